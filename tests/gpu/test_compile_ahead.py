"""gpu/compile_ahead.py: a first run on a cold cache interprets small runs while a
background process fills the cache, switches once it has, and says what it does.

The first tests stand in for the background process; the last (slow) runs the README's
demo on an empty Numba cache as a new user would, twice.
"""
from __future__ import annotations

import fcntl
import gzip
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numba as nb
import numpy as np
import pytest

from gpu import compile_ahead
from gpu.cpu import interpreted
from tests import compiles

REPO = Path(__file__).resolve().parents[2]


class _Progress:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def phase(self, text: str) -> None:
        self.lines.append(text)

    def status(self, text: str) -> None:
        self.lines.append(text)


class _Process:
    """A background process that finishes when told to."""

    def __init__(self) -> None:
        self.returncode = None

    def poll(self):
        return self.returncode


@pytest.fixture
def cold(monkeypatch, tmp_path):
    """An empty cache folder, the background mode on, and a stand-in for the process."""
    monkeypatch.setattr(compile_ahead, "cache_dir", lambda: tmp_path)
    monkeypatch.setattr(compile_ahead, "search_cached", lambda: False)
    monkeypatch.setenv(compile_ahead.MODE_VARIABLE, "background")
    started: list[_Process] = []

    def start() -> bool:
        started.append(_Process())
        monkeypatch.setattr(compile_ahead, "_background", started[-1])
        return True

    monkeypatch.setattr(compile_ahead, "_start_background", start)
    return started


def _input(tmp_path: Path, size: int) -> list[str]:
    path = tmp_path / "graph.txt"
    path.write_bytes(b"#" * size)
    return [str(path)]


def test_a_small_first_run_is_interpreted_until_the_cache_is_filled(cold, tmp_path):
    progress = _Progress()
    with compile_ahead.first_run(_input(tmp_path, 1000), "cpu", progress):
        assert len(cold) == 1 and interpreted.active()
        assert "background (first run only)" in progress.lines[0]
        compile_ahead.poll()
        assert interpreted.active()         # still compiling
        cold[0].returncode = 0
        compile_ahead.poll()
        assert not interpreted.active()
    assert not interpreted.active()


def test_a_large_first_run_compiles_in_the_foreground_and_says_so(cold, tmp_path):
    progress = _Progress()
    size = compile_ahead.INTERPRET_BELOW_BYTES + 1
    with compile_ahead.first_run(_input(tmp_path, size), "cpu", progress):
        assert cold == [] and not interpreted.active()

        @nb.njit
        def fresh(x):
            return x * 2

        assert fresh(21) == 42
    assert progress.lines[0] == "compiling the CPU executor (first run only)"
    assert progress.lines[1].startswith("compiled 1 kernels in ")
    fresh(1.5)                              # after the command: nothing more is said
    assert len(progress.lines) == 2


@pytest.mark.parametrize("content", [1000, compile_ahead.INTERPRET_BELOW_BYTES + 1])
def test_a_gzip_input_counts_as_what_it_holds(content, cold, tmp_path):
    """A few kB of gzip holding more than the limit compiles: the readers decompress it,
    and interpreting a graph that large would take minutes."""
    path = tmp_path / "graph.txt.gz"
    path.write_bytes(gzip.compress(b"#" * content))
    assert path.stat().st_size < 10_000
    with compile_ahead.first_run([str(path)], "cpu", _Progress()):
        assert interpreted.active() == (content <= compile_ahead.INTERPRET_BELOW_BYTES)
        assert len(cold) == interpreted.active()


@pytest.mark.parametrize("why", ["filled", "cuda", "compile"])
def test_no_background_where_it_is_not_needed(why, cold, tmp_path, monkeypatch):
    if why == "filled":
        monkeypatch.setattr(compile_ahead, "cache_filled", lambda: True)
    elif why == "compile":
        monkeypatch.setenv(compile_ahead.MODE_VARIABLE, "compile")
    with compile_ahead.first_run(_input(tmp_path, 1000), "cuda" if why == "cuda" else "cpu",
                                 _Progress()):
        assert cold == [] and not interpreted.active()


def test_the_stamp_names_the_code_and_every_index(monkeypatch, tmp_path):
    monkeypatch.setattr(compile_ahead, "cache_dir", lambda: tmp_path)
    index = tmp_path / "kernel-1.py311.nbi"
    index.write_bytes(b"")
    stamp = tmp_path / "motifstream-compiled.json"
    assert not compile_ahead.cache_filled()
    stamp.write_text(json.dumps({"code": compile_ahead.code_key(), "indexes": [str(index)]}))
    assert compile_ahead.cache_filled()
    stamp.write_text(json.dumps({"code": "other code", "indexes": [str(index)]}))
    assert not compile_ahead.cache_filled()
    stamp.write_text(json.dumps({"code": compile_ahead.code_key(), "indexes": [str(index)]}))
    index.unlink()                          # a cold cache made by deleting the .nbi files
    assert not compile_ahead.cache_filled()


@pytest.fixture
def lockable(tmp_path, monkeypatch):
    """compile_ahead.main on a cache folder of its own; compile_everything recorded, not
    run; whether the cache counts as filled set by the test."""
    compiled: list[bool] = []
    filled = {"now": False}
    monkeypatch.setattr(compile_ahead, "cache_dir", lambda: tmp_path)
    monkeypatch.setattr(compile_ahead, "cache_filled", lambda: filled["now"])
    monkeypatch.setattr(compile_ahead, "code_key", lambda: "code")
    monkeypatch.setattr(compile_ahead, "compile_everything",
                        lambda: compiled.append(True) or [])
    return tmp_path, compiled, filled


@pytest.mark.parametrize("holder_filled_it", [True, False])
def test_a_second_background_process_waits_for_the_first(lockable, holder_filled_it):
    """A restart while the first start's compile runs starts a second process: it must not
    exit before the first is done (its server would take the cache as filled and compile
    every kernel on its engine thread), and compiles only if the first left it unfilled
    (killed half way)."""
    folder, compiled, filled = lockable
    status: list[int] = []
    # flock conflicts between two opens of the file, also within one process.
    with open(folder / compile_ahead._LOCK, "w") as first:
        fcntl.flock(first, fcntl.LOCK_EX)
        second = threading.Thread(target=lambda: status.append(compile_ahead.main()),
                                  daemon=True)
        second.start()
        second.join(0.5)
        assert second.is_alive(), "returned while another process was compiling"
        filled["now"] = holder_filled_it
    second.join(10)
    assert status == [0]
    assert compiled == ([] if holder_filled_it else [True])
    assert (folder / compile_ahead._STAMP).exists() != holder_filled_it


def test_a_lone_background_process_compiles_and_stamps(lockable):
    folder, compiled, _ = lockable
    assert compile_ahead.main() == 0
    assert compiled == [True]
    assert json.loads((folder / compile_ahead._STAMP).read_text()) == \
        {"code": "code", "indexes": []}


COUNT_COMPILES = compiles.PRELUDE + textwrap.dedent('''
    from service.cli import main

    status = main(["match"])
    print("compiled", compiled, file=sys.stderr)
    sys.exit(status)
''')


@pytest.mark.slow
def test_the_demo_on_an_empty_cache_then_on_the_filled_one(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "NUMBA_CACHE_DIR": str(tmp_path),
           compile_ahead.MODE_VARIABLE: "background"}

    def demo() -> tuple[list[dict], str]:
        proc = subprocess.run([sys.executable, "-c", COUNT_COMPILES], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=600, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        lines = [json.loads(line) for line in proc.stdout.splitlines()]
        return lines, proc.stderr.splitlines()[-1]

    first, compiled = demo()
    assert compiled == "compiled []"        # interpreted: nothing compiled in the run
    stamp = next(Path(tmp_path).rglob("motifstream-compiled.json"), None)
    deadline = time.monotonic() + 900
    while stamp is None and time.monotonic() < deadline:
        time.sleep(2)
        stamp = next(Path(tmp_path).rglob("motifstream-compiled.json"), None)
    assert stamp is not None, "the background compile did not finish"
    second, compiled = demo()
    assert compiled == "compiled []"        # loaded from the cache
    assert first[-1]["compile_seconds"] == 0.0 < second[-1]["compile_seconds"]

    def counts(lines):
        return [{k: v for k, v in line.items() if not k.endswith("seconds")}
                for line in lines]

    assert counts(first) == counts(second)
    assert first[-1]["queries"] and sum(q["positive"] for q in first[-1]["queries"].values())


def test_a_search_compiled_from_this_code_wants_no_background(monkeypatch):
    """A run that compiled in the foreground writes no stamp; its cache still holds the
    search from this code, fresh under the package's stamp, and no background is wanted."""
    from gpu import Engine, QueryGraph
    from gpu.cpu import search
    from gpu.io.records import LabeledGraph
    graph = LabeledGraph(np.arange(3), np.zeros(3, np.int32), np.array([0, 1]),
                         np.array([1, 2]), np.zeros(2, np.int32))
    engine = Engine(graph, backend="cpu")
    engine.count(engine.add_query(QueryGraph.build("p", [0, 1, 2], [0, 0, 0],
                                                   [(0, 1), (1, 2)])))
    monkeypatch.setenv(compile_ahead.MODE_VARIABLE, "background")
    monkeypatch.setattr(compile_ahead, "cache_filled", lambda: False)
    assert compile_ahead.search_cached() and not compile_ahead.background_wanted()
    # Compiled from other code (another stamp): stale, as Numba reads it.
    monkeypatch.setattr(search.run_tasks._cache._cache_file, "_source_stamp", "other code")
    assert not compile_ahead.search_cached() and compile_ahead.background_wanted()
