"""benchmarks/sections.py and benchmarks/gil_noise.py on a small random graph with the CPU
executor: the per-call report names the engine's steps with their calls and the batch
groups by size; gil_noise reports every burst configuration, and the steps under one."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from benchmarks import gil_noise

REPO = Path(__file__).resolve().parents[2]

# Three groups of four one-edge insertions (started, then finished: one batch group each)
# on a cycle with chords, a triangle standing.
GROUPS = '''
import numpy as np
from gpu.engine import Engine
from gpu.io.records import INSERT_EDGE, LabeledGraph, UpdateStream
from gpu.plan.query import QueryGraph

if __name__ == "__main__":
    n = 40
    src = np.arange(n, dtype=np.int64)
    graph = LabeledGraph(src, np.zeros(n, dtype=np.int32), src, (src + 1) % n,
                         np.zeros(n, dtype=np.int32))
    engine = Engine(graph, backend="cpu")
    engine.add_query(QueryGraph.build("tri", [0, 1, 2], [0, 0, 0], [(0, 1), (1, 2), (2, 0)]))
    step = 0
    for group in range(3):
        started = []
        for _ in range(4):
            a = step % n
            stream = UpdateStream(np.array([INSERT_EDGE]), np.array([a]),
                                  np.array([(a + 2 + group) % n]), np.array([0]),
                                  np.array([step + 1]), "test")
            started.append(engine.start(stream))
            step += 1
        for s in started:
            s.finish()
'''


def test_the_report_times_each_step_per_call_and_counts_the_groups(tmp_path):
    (tmp_path / "groups.py").write_text(GROUPS)
    out = tmp_path / "sections.txt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    subprocess.run([sys.executable, "-m", "benchmarks.sections", "--out", str(out),
                    "-m", "groups"], env=env, check=True, timeout=900)
    report = out.read_text()
    assert report.startswith("# ") and "3 batch groups of 12 batches" in report, report
    assert "sizes (size, groups): [(4, 3)]" in report, report
    calls = {line.split()[-1]: int(line.split()[2]) for line in report.splitlines()[2:]}
    assert calls["Engine._start"] == 12 and calls["BatchGroup._apply_and_search"] == 3, report
    assert calls["PendingBatch.finish"] == 12, report


def test_gil_noise_reports_every_configuration_and_the_steps_under_one(tmp_path, capsys):
    rng = np.random.default_rng(0)
    edges = {tuple(sorted(e)) for e in rng.integers(0, 300, (1500, 2)).tolist() if e[0] != e[1]}
    graph = tmp_path / "edges.csv"
    graph.write_text("".join(f"{a},{b}\n" for a, b in sorted(edges)))
    queries = tmp_path / "queries"
    queries.mkdir()
    (queries / "dense_0.graph").write_text("t 3 3\nv 0 0\nv 1 0\nv 2 0\n"
                                           "e 0 1 0\ne 1 2 0\ne 2 0 0\n")
    gil_noise.main(["--graph", str(graph), "--queries-dir", str(queries), "--queries", "1",
                    "--k", "3", "--groups", "40", "--rounds", "2", "--bursts", "1:4",
                    "--sections", "1:4"])
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "cpu, groups of 3 one-edge batches, switch interval 0.5 ms" in lines[0], out
    for name in ("no bursts", "1 ms every 4 ms"):
        rates = [line for line in lines if line.strip().startswith(f"{name}:")]
        assert len(rates) == 1 and len(rates[0].split(":")[1].split(", ")) == 2, out
    assert "steps under bursts of 1 ms every 4 ms" in out and "Engine._start" in out, out
    assert "40 batch groups of 120 batches" in out, out


def test_a_wrapped_static_method_stays_static_and_is_timed():
    """A static method (DeviceMirror.touched is one) wrapped on its class is still called
    without the instance and counted once a call."""
    from benchmarks.apply_profile import Sections

    class Owner:
        @staticmethod
        def double(x):
            return 2 * x

    sections = Sections()
    sections.wrap(Owner, "double")
    assert Owner().double(3) == 6 and Owner.double(4) == 8
    assert sections.calls["Owner.double"] == 2
