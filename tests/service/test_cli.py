"""Tests for service.cli (the ``motifstream`` command) and service.progress."""
from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

import gpu.cuda.device
from service.cli import main
from service.progress import Progress

REPO = Path(__file__).resolve().parents[2]

# Labels: 1, 2, 3, 5, 7 carry label 0; 4 and 6 carry label 1.
GRAPH = """t 6 6
v 1 0
v 2 0
v 3 0
v 4 1
v 5 0
v 6 1
e 1 2
e 2 3
e 3 4
e 4 5
e 5 1
e 2 5
"""
UPDATES = """e 1 3
-e 2 5
v 7 0
e 7 1
e 7 3
-e 3 4
e 6 5
e 6 1
"""
# GRAPH after all of UPDATES, written out by hand.
FINAL = """v 1 0
v 2 0
v 3 0
v 4 1
v 5 0
v 6 1
v 7 0
e 1 2
e 2 3
e 4 5
e 5 1
e 1 3
e 7 1
e 7 3
e 6 5
e 6 1
"""
TRIANGLE = "v 0 0\nv 1 0\nv 2 0\ne 0 1\ne 1 2\ne 0 2\n"
PATH = "v 0 0\nv 1 1\nv 2 0\ne 0 1\ne 1 2\n"  # label-0, label-1, label-0


@pytest.fixture
def files(tmp_path):
    """Paths (as str) of the standard inputs."""
    texts = {"graph": GRAPH, "updates": UPDATES, "final": FINAL,
             "tri": TRIANGLE, "path": PATH}
    out = {}
    for name, text in texts.items():
        (tmp_path / f"{name}.txt").write_text(text)
        out[name] = str(tmp_path / f"{name}.txt")
    return out


def run(capsys, *argv):
    """Run main in-process: (exit status, stdout as parsed JSON lines, stderr)."""
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, [json.loads(line) for line in out.splitlines()], err


def match(capsys, files, *extra):
    return run(capsys, "match", "--graph", files["graph"], "--query", files["tri"],
               "--query", files["path"], "--updates", files["updates"], "--backend", "cpu",
               *extra)


def counts(capsys, files, graph):
    status, lines, _ = run(capsys, "count", "--graph", files[graph], "--query", files["tri"],
                           "--query", files["path"], "--backend", "cpu")
    assert status == 0
    return {line["query"]: line["matches"] for line in lines}


def net(lines, query):
    return sum(l["positive"] - l["negative"] for l in lines if l.get("query") == query)


# --------------------------------------------------------------------------- count


def test_count_reports_each_query(capsys, files):
    status, lines, err = run(capsys, "count", "--graph", files["graph"], "--query", files["tri"],
                             "--query", files["path"], "--backend", "cpu")
    assert status == 0 and err == ""
    # One triangle (1, 2, 5) in 6 orders; path 0-1-0 only through vertex 4: (3, 4, 5) both ways.
    assert [(l["query"], l["matches"]) for l in lines] == [(files["tri"], 6), (files["path"], 2)]
    assert all(l["seconds"] >= 0 for l in lines)


def test_count_edge_list_with_random_labels(capsys, tmp_path, files):
    edges = tmp_path / "edges.csv"
    edges.write_text("src,dst\n1,2\n2,3\n3,1\n")
    status, lines, _ = run(capsys, "count", "--graph", edges, "--query", files["tri"],
                           "--num-labels", "1", "--backend", "cpu")
    assert status == 0 and lines[0]["matches"] == 6


# --------------------------------------------------------------------------- match


def test_match_lines_and_summary_agree(capsys, files):
    status, lines, err = match(capsys, files, "--batch-size", "3")
    assert status == 0 and err == ""
    *rows, summary = lines
    assert [(r["batch"], r["query"]) for r in rows] == [
        (b, q) for b in range(3) for q in (files["tri"], files["path"])]
    assert summary["summary"] is True
    assert summary["batches"] == 3 and summary["updates"] == 8 and summary["backend"] == "cpu"
    for q in (files["tri"], files["path"]):
        for sign in ("positive", "negative"):
            assert summary["queries"][q][sign] == sum(r[sign] for r in rows if r["query"] == q)
    assert summary["applied"] == {"vertices_added": 1, "vertices_deleted": 0,
                                  "edges_inserted": 5, "edges_deleted": 2}
    assert sum(summary["ignored"].values()) == 0
    # The summary's wall time spans every batch's own seconds (start to result known).
    assert all(0 <= r["seconds"] <= summary["seconds"] for r in rows)
    assert 0 <= summary["compile_seconds"] <= summary["seconds"] + summary["load_seconds"]


def test_match_net_change_is_count_difference(capsys, files):
    before, after = counts(capsys, files, "graph"), counts(capsys, files, "final")
    _, one_batch, _ = match(capsys, files)
    _, single_updates, _ = match(capsys, files, "--batch-size", "1")
    assert len(one_batch) == 2 + 1 and len(single_updates) == 8 * 2 + 1
    for q in (files["tri"], files["path"]):
        assert net(one_batch, q) == net(single_updates, q) == after[q] - before[q]


def test_list_writes_each_match_with_its_sign(capsys, tmp_path, files):
    listing = tmp_path / "matches.jsonl"
    status, lines, _ = match(capsys, files, "--batch-size", "1", "--list", listing)
    assert status == 0
    listed = [json.loads(line) for line in listing.read_text().splitlines()]
    for row in lines[:-1]:
        mine = [m for m in listed if (m["batch"], m["query"]) == (row["batch"], row["query"])]
        assert sum(m["sign"] == "+" for m in mine) == row["positive"]
        assert sum(m["sign"] == "-" for m in mine) == row["negative"]
    assert len(listed) == sum(r["positive"] + r["negative"] for r in lines[:-1])

    # Replay the stream one record at a time: an added match is an embedding after its
    # batch, a removed one before it, and each uses the batch's edge.
    labels, edges = _parse(GRAPH)
    queries = {files["tri"]: _parse(TRIANGLE), files["path"]: _parse(PATH)}
    for i, update in enumerate(UPDATES.splitlines()):
        tag, *ids = update.split()
        before = set(edges)
        if tag == "v":
            labels[int(ids[0])] = int(ids[1])
        else:
            edge = frozenset(map(int, ids))
            (edges.add if tag == "e" else edges.discard)(edge)
        for m in (m for m in listed if m["batch"] == i):
            graph = edges if m["sign"] == "+" else before
            q_labels, q_edges = queries[m["query"]]
            assert _embeds(m["match"], q_labels, q_edges, labels, graph)
            assert any(frozenset(m["match"][a] for a in e) == edge for e in q_edges)


def _parse(text):
    """Vertex labels by id and edges as frozensets, from t/v/e text (vertices in file order)."""
    labels, edges = {}, set()
    for line in text.splitlines():
        tag, *fields = line.split()
        if tag == "v":
            labels[int(fields[0])] = int(fields[1])
        elif tag == "e":
            edges.add(frozenset(map(int, fields)))
    return labels, edges


def _embeds(match, q_labels, q_edges, labels, edges):
    order = list(q_labels)  # query vertices in file order = query-vertex order
    image = dict(zip(order, match))
    return (len(set(match)) == len(match)
            and all(labels[image[v]] == q_labels[v] for v in order)
            and all(frozenset(image[v] for v in e) in edges for e in q_edges))


def test_list_truncation_is_marked_and_counts_stay_exact(capsys, tmp_path, files):
    listing = tmp_path / "matches.jsonl"
    _, full, _ = match(capsys, files)
    status, lines, err = match(capsys, files, "--list", listing, "--list-limit", "1")
    assert status == 0
    assert [(l["positive"], l["negative"]) for l in lines[:-1]] == [
        (l["positive"], l["negative"]) for l in full[:-1]]
    listed = [json.loads(line) for line in listing.read_text().splitlines()]
    assert {"batch": 0, "query": files["tri"], "truncated": True} in listed
    assert "warning" in err and "truncated" in err and err.count("\n") == 1


def test_empty_stream_has_only_a_summary(capsys, tmp_path, files):
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing\n")
    status, lines, _ = run(capsys, "match", "--graph", files["graph"], "--query", files["tri"],
                           "--updates", empty, "--backend", "cpu")
    assert status == 0 and len(lines) == 1
    assert lines[0]["batches"] == 0 and lines[0]["queries"][files["tri"]]["positive"] == 0


# --------------------------------------------------------------------------- errors


def assert_one_error(err, *fragments):
    assert err.startswith("motifstream: error: ") and err.count("\n") == 1, err
    for fragment in fragments:
        assert fragment in err, err
    assert "Traceback" not in err


def test_missing_file(capsys, tmp_path, files):
    missing = tmp_path / "nope.txt"
    status, lines, err = run(capsys, "count", "--graph", missing, "--query", files["tri"])
    assert status == 2 and lines == []
    assert_one_error(err, str(missing), "No such file")


def test_directory_as_query(capsys, tmp_path, files):
    status, _, err = run(capsys, "count", "--graph", files["graph"], "--query", tmp_path,
                         "--backend", "cpu")
    assert status == 2
    assert_one_error(err, str(tmp_path))


def test_malformed_graph_line(capsys, tmp_path, files):
    bad = tmp_path / "bad.txt"
    bad.write_text("v 1 0\nv 2 0\ne 1 x\n")
    status, _, err = run(capsys, "count", "--graph", bad, "--query", files["tri"],
                         "--backend", "cpu")
    assert status == 2
    assert_one_error(err, f"{bad}:3:")


@pytest.mark.parametrize("text, where", [("0;1\n1;2\n", ":1: line '0;1'"),
                                         ("a,b\n", ":1: no edges")])
def test_unparsable_edge_list_exits_2_naming_file_line_and_value(capsys, tmp_path, files,
                                                                 text, where):
    # Both had loaded as an empty graph, and the command exited 0.
    bad = tmp_path / "bad.csv"
    bad.write_text(text)
    status, lines, err = run(capsys, "count", "--graph", bad, "--query", files["tri"],
                             "--num-labels", "2", "--backend", "cpu")
    assert (status, lines) == (2, [])
    assert_one_error(err, f"{bad}{where}")


def test_disconnected_query(capsys, tmp_path, files):
    split = tmp_path / "split.txt"
    split.write_text("v 0 0\nv 1 0\nv 2 0\nv 3 0\ne 0 1\ne 2 3\n")
    status, _, err = run(capsys, "count", "--graph", files["graph"], "--query", split,
                         "--backend", "cpu")
    assert status == 2
    assert_one_error(err, "not connected")


def test_rejected_batch_exits_1_with_line_number(capsys, tmp_path, files):
    updates = tmp_path / "u.txt"
    updates.write_text("e 1 3\ne 1 99\n")
    status, lines, err = run(capsys, "match", "--graph", files["graph"], "--query", files["tri"],
                             "--updates", updates, "--backend", "cpu")
    assert status == 1 and lines == []
    assert_one_error(err, f"{updates}:2:", "99")


DEVICE_GRAPH_BACKENDS = [pytest.param("cpu", id="cpu"),
                         pytest.param("cuda", id="cuda", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("backend", DEVICE_GRAPH_BACKENDS)
def test_device_graph_layouts_give_the_same_lines(capsys, files, backend):
    # On the CPU the flag is accepted and changes nothing; on CUDA both layouts match.
    outputs = []
    for layout in ("lists", "pma"):
        status, lines, _ = run(capsys, "match", "--graph", files["graph"], "--query",
                               files["tri"], "--query", files["path"], "--updates",
                               files["updates"], "--backend", backend, "--batch-size", "2",
                               "--device-graph", layout)
        assert status == 0
        outputs.append([{k: v for k, v in line.items() if k != "seconds" and
                         not k.endswith("_seconds")} for line in lines[:-1]])
    assert outputs[0] == outputs[1] and len(outputs[0]) == 8


def test_unknown_device_graph_is_refused(capsys, files):
    assert main(["count", "--graph", files["graph"], "--query", files["tri"],
                 "--device-graph", "csr"]) == 2
    assert "argument --device-graph: invalid choice: 'csr'" in capsys.readouterr().err


def test_cuda_without_device(capsys, monkeypatch, files):
    monkeypatch.setattr(gpu.cuda.device, "cuda_available", lambda: False)
    status, _, err = run(capsys, "count", "--graph", files["graph"], "--query", files["tri"],
                         "--backend", "cuda")
    assert status == 2
    assert_one_error(err, "cuda", "--backend cpu")


def test_edge_list_needs_labels(capsys, tmp_path, files):
    edges = tmp_path / "edges.txt"
    edges.write_text("1 2\n2 3\n")
    status, _, err = run(capsys, "count", "--graph", edges, "--query", files["tri"],
                         "--backend", "cpu")
    assert status == 2
    assert_one_error(err, "--num-labels")


def test_labels_on_graph_file_refused(capsys, files):
    status, _, err = run(capsys, "count", "--graph", files["graph"], "--query", files["tri"],
                         "--num-labels", "3", "--backend", "cpu")
    assert status == 2
    assert_one_error(err, "edge lists only")


def test_same_query_twice(capsys, files):
    status, _, err = run(capsys, "count", "--graph", files["graph"], "--query", files["tri"],
                         "--query", files["tri"], "--backend", "cpu")
    assert status == 2
    assert_one_error(err, "more than once")


@pytest.mark.parametrize("size", ["0", "-2", "three"])
def test_batch_size_must_be_positive(capsys, files, size):
    status, lines, err = match(capsys, files, "--batch-size", size)
    assert status == 2 and lines == []
    assert "--batch-size" in err


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("motifstream ")


def test_interrupt_exits_130_quietly(capsys, monkeypatch, files):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr("service.cli.read_updates", interrupted)
    status, _, err = match(capsys, files)
    assert status == 130 and err == ""


# --------------------------------------------------------------------------- progress


def test_no_progress_when_stderr_is_not_a_tty(capsys, files):
    status, _, err = match(capsys, files, "--batch-size", "1")
    assert status == 0 and err == ""


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_on_a_terminal():
    screen = _Terminal()
    progress = Progress(screen)
    progress.phase("loading graph g.txt")
    progress.update(1, 4, 1000)
    progress.update(4, 4, 4000)
    progress.close()
    text = screen.getvalue()
    assert "s] loading graph g.txt\n" in text
    assert "\rbatch 1/4, " in text and "updates/s, eta " in text
    assert "\rbatch 4/4, " in text and text.endswith("\n")


def test_progress_status_redraws_the_meter_line():
    screen = _Terminal()
    progress = Progress(screen)
    progress.phase("compiling the CPU executor (first run only)")
    progress.status("compiled 12 kernels in 3 s")
    progress.phase("applying 8 updates in 1 batch")
    text = screen.getvalue()
    assert "(first run only)\n\rcompiled 12 kernels in 3 s\n[" in text


def test_progress_disabled_writes_nothing():
    screen = _Terminal()
    progress = Progress(screen, enabled=False)
    progress.phase("x")
    progress.update(1, 2, 3)
    progress.status("y")
    progress.close()
    assert screen.getvalue() == ""


# --------------------------------------------------------------------------- console script


def _console_script() -> Path:
    script = Path(sys.executable).with_name("motifstream")
    if not script.exists():
        pytest.skip("motifstream is not installed in this environment")
    return script


def test_console_script(files):
    done = subprocess.run(
        [_console_script(), "match", "--graph", files["graph"], "--query", files["tri"],
         "--updates", files["updates"], "--backend", "cpu"],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    *rows, summary = map(json.loads, done.stdout.splitlines())
    assert rows[0]["query"] == files["tri"] and summary["summary"] is True


def test_console_script_exit_status(files):
    done = subprocess.run(
        [_console_script(), "count", "--graph", files["graph"] + ".missing",
         "--query", files["tri"]],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2
    assert done.stderr.startswith("motifstream: error: ") and "Traceback" not in done.stderr


def test_embedded_demo_runs_without_inputs(capsys):
    """`motifstream match` alone replays the shipped demo; its net equals count after - before."""
    import json as _json
    from importlib import resources

    from gpu.engine import Engine
    from gpu.io.graphs import read_graph, read_query
    from gpu.io.streams import read_updates
    from gpu.plan.query import QueryGraph

    assert main(["match", "--quiet"]) == 0
    lines = [_json.loads(line) for line in capsys.readouterr().out.splitlines()]
    summary = lines[-1]
    assert summary["batches"] == 5 and len(summary["queries"]) == 3
    demo = resources.files("service") / "demo"
    engine = Engine(read_graph(str(demo / "graph.txt")), backend="cpu")
    ids = {str(demo / name): engine.add_query(QueryGraph.from_labeled(read_query(str(demo / name))))
           for name in ("triangle.graph", "square.graph", "house.graph")}
    before = {name: engine.count(qid) for name, qid in ids.items()}
    engine.apply(read_updates(str(demo / "updates.txt")))
    for name, qid in ids.items():
        totals = summary["queries"][name]
        assert totals["positive"] - totals["negative"] == engine.count(qid) - before[name]
        assert totals["positive"] > 0


def test_partial_inputs_are_refused(capsys):
    assert main(["match", "--graph", "g.txt"]) == 2
    assert "together" in capsys.readouterr().err


def test_serve_demo_and_graph_are_exclusive(capsys, monkeypatch):
    import service.main

    monkeypatch.setattr(service.main, "serve", lambda settings: pytest.fail("served"))
    assert main(["serve", "--demo", "--graph", "g.txt"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err
    assert main(["serve", "--demo", "--num-labels", "3"]) == 2
    assert "demo" in capsys.readouterr().err


# A first run whose plain-Python kernels run out of time (gpu/compile_ahead.py), on the CPU
# executor (a CUDA host would pick CUDA), in a fresh interpreter: no kernel is compiled in
# that process yet, so the twins run.
_OUT_OF_TIME = '''
import json, sys
from gpu import compile_ahead
from gpu.cpu import interpreted
from service import cli

class Compiling:                        # a background compile that never finishes
    returncode = None
    def poll(self):
        return None

def start():
    compile_ahead._background = Compiling()
    return True

compile_ahead.cache_filled = lambda: False
compile_ahead.search_cached = lambda: False
compile_ahead._start_background = start
command, trip_after = sys.argv[1], int(sys.argv[2])
lines, seen = [], {}

def emit(record):
    lines.append(record)
    seen.setdefault("interpreting_at_first", interpreted.active())
    if len(lines) == trip_after:
        interpreted.allow(-1.0)         # the budget is spent: the next twin call stops
        seen["tripped"] = interpreted.active()

cli._emit = emit
status = cli.main([command, "-q", "--backend", "cpu"])
print(json.dumps({"status": status, "lines": lines, **seen}))
'''


def _first_run_out_of_time(command: str, trip_after: int) -> dict:
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin",
           "MOTIFSTREAM_FIRST_RUN": "background"}
    proc = subprocess.run([sys.executable, "-c", _OUT_OF_TIME, command, str(trip_after)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def _without_times(lines: list[dict]) -> list[dict]:
    return [{k: v for k, v in line.items() if "seconds" not in k} for line in lines]


@pytest.mark.parametrize("command, trip_after", [("match", 6), ("count", 1)])
def test_a_first_run_out_of_time_starts_over_compiled_and_reports_each_result_once(
        command, trip_after, capsys):
    tripped = _first_run_out_of_time(command, trip_after)
    assert tripped["status"] == 0
    assert tripped["interpreting_at_first"] and tripped["tripped"]
    assert main([command, "-q", "--backend", "cpu"]) == 0     # compiled from the start
    expected = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert _without_times(tripped["lines"]) == _without_times(expected)
    assert len(expected) > trip_after


def _timed_path_files(tmp_path, updates: str):
    """(graph, path query, updates, listing) files: four vertices of label 0, the 3-vertex
    path query, these timed update lines, and where the listing goes."""
    graph = tmp_path / "g.graph"
    graph.write_text("v 1 0\nv 2 0\nv 3 0\nv 4 0\n")
    path = tmp_path / "path.graph"
    path.write_text("v 0 0\nv 1 0\nv 2 0\ne 0 1\ne 1 2\n")
    stream = tmp_path / "u.txt"
    stream.write_text(updates)
    return graph, path, stream, tmp_path / "l.jsonl"


def test_match_with_retention_reports_expired_matches(capsys, tmp_path):
    """Event times on `e` lines and --retention: the batch that moves the watermark past an
    edge's time deletes it, and the matches it took are reported (and listed) as expired;
    a late edge already past the horizon is inserted and expired at once."""
    graph, path, updates, listing = _timed_path_files(
        tmp_path, "e 1 2 0 100\ne 2 3 0 105\ne 3 4 0\ne 1 4 0 111\ne 1 3 0 50\n")
    status, lines, err = run(capsys, "match", "--graph", graph, "--query", path, "--updates",
                             updates, "--batch-size", "3", "--retention", "10", "--list",
                             listing, "--backend", "cpu")
    assert status == 0 and err == ""
    first, second, summary = lines
    assert (first["positive"], first["negative"], first["expired"]) == (4, 0, 0)
    assert (second["positive"], second["negative"], second["expired"]) == (2, 2, 2)
    assert summary["applied"]["edges_inserted"] == 5 and summary["applied"]["edges_deleted"] == 2
    removed = [json.loads(line) for line in listing.read_text().splitlines()
               if json.loads(line).get("sign") == "-"]
    assert sorted(tuple(r["match"]) for r in removed) == [(1, 2, 3), (3, 2, 1)]
    assert all(r["expired"] for r in removed)
    # Without --retention the same stream keeps every edge; the lines say no expiry.
    status, lines, _ = run(capsys, "match", "--graph", graph, "--query", path, "--updates",
                           updates, "--batch-size", "3", "--backend", "cpu")
    assert status == 0 and [line.get("expired") for line in lines[:2]] == [0, 0]
    assert lines[-1]["applied"]["edges_deleted"] == 0


def test_retention_must_be_non_negative(capsys, files):
    status, lines, err = match(capsys, files, "--retention", "-1")
    assert status == 2 and lines == []
    assert "must be a non-negative integer, got -1" in err


def test_match_with_a_window_counts_and_lists_the_matches_within_it(capsys, tmp_path):
    """--window: a path counts only while its two edges' times are within W; a refresh
    moves one out of the window and another in."""
    graph, path, updates, listing = _timed_path_files(
        tmp_path, "e 1 2 0 100\ne 2 3 0 103\ne 3 4 0 110\ne 4 1 0 106\ne 2 3 0 108\n")
    status, lines, err = run(capsys, "match", "--graph", graph, "--query", path, "--updates",
                             updates, "--batch-size", "2", "--window", "5", "--list", listing)
    assert status == 0 and err == ""
    assert [(line["positive"], line["negative"]) for line in lines[:3]] == \
        [(2, 0), (2, 0), (2, 2)]
    rows = [json.loads(line) for line in listing.read_text().splitlines()]
    last = {(r["sign"], tuple(r["match"])) for r in rows if r["batch"] == lines[2]["batch"]}
    assert last == {("+", (2, 3, 4)), ("+", (4, 3, 2)), ("-", (1, 2, 3)), ("-", (3, 2, 1))}
    # Without the window every path counts: 2-3-4 and 2-1-4 too.
    status, lines, _ = run(capsys, "match", "--graph", graph, "--query", path, "--updates",
                           updates, "--batch-size", "2", "--backend", "cpu")
    assert [(line["positive"], line["negative"]) for line in lines[:3]] == \
        [(2, 0), (6, 0), (0, 0)]


def test_a_window_on_a_directed_graph_counts_the_arcs_within_it(capsys, tmp_path):
    graph = tmp_path / "g.graph"
    graph.write_text("v 1 0\nv 2 0\n")
    pair = tmp_path / "pair.graph"
    pair.write_text("v 0 0\nv 1 0\ne 0 1\ne 1 0\n")
    updates = tmp_path / "u.txt"
    # 1 -> 2 at 5, 2 -> 1 at 7 (the pair spans 2), then 2 -> 1 refreshed to 9 (spans 4).
    updates.write_text("e 1 2 0 5\ne 2 1 0 7\ne 2 1 0 9\n")
    status, lines, _ = run(capsys, "match", "--graph", graph, "--query", pair, "--updates",
                           updates, "--window", "3", "--directed", "--batch-size", "2",
                           "--backend", "cpu")
    assert status == 0
    assert [(line["positive"], line["negative"]) for line in lines[:2]] == [(2, 0), (0, 2)]