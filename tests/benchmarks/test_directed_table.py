"""The directed GH table end to end on a tiny graph (CPU executor): every query set on both
sides, counts equal to the brute-force oracle's, and the CUDA refusal reported, not raised."""
import contextlib
import io
import json
import statistics

import networkx as nx
import numpy as np
import pytest

from benchmarks import directed_table
from benchmarks.directed_table import CYCLES, PATTERNS, pattern_arcs
from benchmarks.querygen import KINDS
from gpu.engine import Engine
from gpu.io.graphs import load_graph, read_query
from gpu.io.streams import split_stream
from tests.reference import RefGraph, RefQuery

NUM_LABELS = 1


@pytest.fixture(scope="module")
def edge_list(tmp_path_factory):
    # Rewired cliques: dense pockets for dense queries and short cycles, bridges for the rest.
    g = nx.relaxed_caveman_graph(6, 6, 0.2, seed=5)
    g.remove_edges_from(list(nx.selfloop_edges(g)))
    path = tmp_path_factory.mktemp("graph") / "edges.csv"
    # Ids spread out and a header, as GH's CSV has.
    path.write_text("id_1,id_2\n" + "".join(f"{10 * u + 3},{10 * v + 3}\n" for u, v in g.edges))
    return path


def _args(edge_list, tmp_path, *extra):
    return ["--graph", str(edge_list), "--num-labels", str(NUM_LABELS), "--per-set", "2",
            "--queries-dir", str(tmp_path / "q"), "--directed-queries-dir", str(tmp_path / "dq"),
            "--json", str(tmp_path / "out.jsonl"), *extra]


def _reference(graph, directed: bool) -> RefGraph:
    return RefGraph.build(
        dict(zip(graph.vertex_ids.tolist(), graph.vertex_labels.tolist())),
        zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), graph.edge_labels.tolist()),
        directed)


@pytest.fixture(scope="module")
def run(edge_list, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("run")
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = directed_table.main(_args(edge_list, tmp_path, "--check"))
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    return code, stdout.getvalue(), records


def test_every_set_runs_on_both_sides_and_the_table_shows_them(run):
    code, stdout, records = run
    assert code == 0
    assert "command: " in stdout and "backend: cpu" in stdout and "date: " in stdout
    rows = {line.split("|")[1].strip(): line for line in stdout.splitlines()
            if line.startswith("| ") and not line.startswith("| query set")}
    assert list(rows) == [*KINDS, *PATTERNS]
    for kind in KINDS:
        for directed in (True, False):
            mine = [r for r in records if r["kind"] == kind and r["directed"] is directed]
            assert [r["index"] for r in mine] == [0, 1]
    for name in PATTERNS:
        assert sum(r["kind"] == name for r in records) == 2     # one query a side
    for r in records:
        assert r["check"] is True       # the engine's own static counts agree
        assert r["backend"] == "cpu" and r["batch"] > 0 and r["match_seconds"] >= 0
        assert r["vertices"] == (6 if r["kind"] in KINDS else len(
            {v for arc in pattern_arcs(r["kind"]) for v in arc}))
    # The table's matches are the records' sums, its apply medians theirs, per side.
    for kind, line in rows.items():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        for side, apply_column, matches_column in ((True, 2, 5), (False, 6, 9)):
            mine = [r for r in records if r["kind"] == kind and r["directed"] is side]
            assert cells[matches_column] == str(sum(r["positive"] for r in mine))
            assert float(cells[apply_column]) == pytest.approx(
                statistics.median(r["wall_seconds"] for r in mine), rel=1e-3)


def test_match_counts_equal_the_brute_force_count(run, edge_list):
    _, _, records = run
    undirected = load_graph(edge_list, num_labels=NUM_LABELS, seed=0)
    arcs = directed_table.orient(undirected, 0)
    checked, found = 0, {True: 0, False: 0}
    for directed, graph in ((True, arcs), (False, undirected)):
        initial, batch = split_stream(graph, directed_table.INSERT_FRACTION, 0)
        before, after = _reference(initial, directed), _reference(graph, directed)
        for r in records:
            if r["directed"] is not directed or r["kind"] == "tree":
                continue    # trees: too many embeddings for the oracle's plain backtracking
            q = read_query(r["query"], directed)
            query = RefQuery.build(q.vertex_labels.tolist(), zip(
                q.edge_src.tolist(), q.edge_dst.tolist(), q.edge_labels.tolist()), directed)
            new = len(after.embeddings(query)) - len(before.embeddings(query))
            assert r["positive"] == new, r
            checked += 1
            found[directed] += new > 0 and r["kind"] in KINDS
    assert checked == 2 * (2 * 2 + len(PATTERNS))
    # Not only zeros: walk queries with new matches on both sides (one label: many matches).
    assert found[True] and found[False]


def test_patterns_are_labelled_as_a_witness_through_a_batch_arc(run, edge_list):
    _, _, records = run
    arcs = directed_table.orient(load_graph(edge_list, num_labels=NUM_LABELS, seed=0), 0)
    _, batch = split_stream(arcs, directed_table.INSERT_FRACTION, 0)
    label = dict(zip(arcs.vertex_ids.tolist(), arcs.vertex_labels.tolist()))
    data_arcs = set(zip(arcs.edge_src.tolist(), arcs.edge_dst.tolist()))
    batch_arcs = set(zip(batch.a.tolist(), batch.b.tolist()))
    for r in records:
        if r["kind"] not in PATTERNS:
            continue
        witness = r["witness"]
        q = read_query(r["query"], directed=True)
        assert len(set(witness)) == len(witness)
        assert q.vertex_labels.tolist() == [label[v] for v in witness]
        used = {(witness[a], witness[b]) for a, b in pattern_arcs(r["kind"])}
        assert used <= data_arcs and used & batch_arcs
        assert r["positive"] >= 1


def test_pattern_shapes():
    assert pattern_arcs("cycle4") == [(0, 1), (1, 2), (2, 3), (3, 0)]
    assert pattern_arcs("fan-out") == [(0, 1), (0, 2), (0, 3)]
    assert pattern_arcs("fan-in") == [(1, 0), (2, 0), (3, 0)]
    assert CYCLES == ("cycle3", "cycle4", "cycle5", "cycle6")


def test_a_refused_directed_engine_is_a_row_not_a_crash(edge_list, tmp_path, monkeypatch,
                                                         capsys):
    # "cuda" is what the run resolves to; the undirected engine runs on the CPU in its
    # place, and the directed one is refused (as a backend without directed graphs would).
    class UndirectedOnCpu(Engine):
        def __init__(self, graph, backend="auto", directed=False, **kw):
            if directed:
                raise ValueError("directed graphs are not taken here")
            super().__init__(graph, backend="cpu", directed=directed, **kw)

    monkeypatch.setattr(directed_table, "resolve_backend", lambda backend: "cuda")
    monkeypatch.setattr(directed_table, "run_header",
                        lambda backend, module, argv: {"backend": backend})
    monkeypatch.setattr(directed_table, "Engine", UndirectedOnCpu)
    code = directed_table.main(_args(edge_list, tmp_path, "--backend", "cuda", "--no-warmup",
                                     "--kinds", "dense", "--patterns", "cycle3"))
    out = capsys.readouterr()
    assert code == 0
    row = next(line for line in out.out.splitlines() if line.startswith("| dense "))
    assert "refused: directed graphs are not taken here" in row
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    refused = [r for r in records if r.get("refused")]
    assert {r["kind"] for r in refused} == {"dense", "cycle3"}
    assert all(r["directed"] and r["backend"] == "cuda" for r in refused)
    measured = [r for r in records if "refused" not in r]
    assert {(r["kind"], r["directed"]) for r in measured} == {("dense", False), ("cycle3", False)}


def test_bad_options_are_refused_by_name(edge_list, tmp_path, capsys):
    with pytest.raises(SystemExit):
        directed_table.main(_args(edge_list, tmp_path, "--max-vertices", "1"))
    assert "--max-vertices must be >= 2, got 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        directed_table.main(_args(edge_list, tmp_path, "--repeat", "0"))
    assert "--repeat must be >= 1, got 0" in capsys.readouterr().err


def test_repeat_measures_each_query_again_and_counts_its_matches_once(edge_list, tmp_path,
                                                                     capsys):
    code = directed_table.main(_args(edge_list, tmp_path, "--no-warmup", "--kinds", "dense",
                                     "--patterns", "cycle3", "--repeat", "3"))
    out = capsys.readouterr().out
    assert code == 0
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    for kind in ("dense", "cycle3"):
        for side in (True, False):
            mine = [r for r in records if r["kind"] == kind and r["directed"] is side]
            runs: dict[int, list[dict]] = {}
            for r in mine:
                runs.setdefault(r["index"], []).append(r)
            assert runs and all([r["repeat"] for r in rs] == [0, 1, 2] for rs in runs.values())
            # Each run applies the same batch to the same graph: the same matches.
            assert all(len({r["positive"] for r in rs}) == 1 for rs in runs.values())
            row = next(line for line in out.splitlines() if line.startswith(f"| {kind} "))
            cells = [c.strip() for c in row.split("|")[1:-1]]
            assert cells[1] == str(len(runs))
            assert cells[5 if side else 9] == str(sum(rs[0]["positive"]
                                                      for rs in runs.values()))


def test_quick_takes_the_core_and_small_sets():
    args = directed_table._parse_args(["--quick"])
    assert args.max_vertices == directed_table.QUICK_VERTICES
    assert args.per_set == directed_table.QUICK_PER_SET
    assert args.queries_dir.name.endswith(f"_core{directed_table.QUICK_VERTICES}")
    assert args.directed_queries_dir.name == args.queries_dir.name + "_directed0"
    assert directed_table._parse_args(["--quick", "--per-set", "5"]).per_set == 5


def test_densest_core_keeps_the_highest_degree_vertices_induced(edge_list):
    graph = load_graph(edge_list, num_labels=NUM_LABELS, seed=0)
    core = directed_table.densest_core(graph, 10)
    degree = np.bincount(np.searchsorted(graph.vertex_ids,
                                         np.concatenate([graph.edge_src, graph.edge_dst])))
    order = np.lexsort((graph.vertex_ids, -degree))[:10]
    assert sorted(core.vertex_ids.tolist()) == sorted(graph.vertex_ids[order].tolist())
    kept = set(core.vertex_ids.tolist())
    induced = [(s, d) for s, d in zip(graph.edge_src.tolist(), graph.edge_dst.tolist())
               if s in kept and d in kept]
    assert list(zip(core.edge_src.tolist(), core.edge_dst.tolist())) == induced
