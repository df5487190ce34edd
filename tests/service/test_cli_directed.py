"""`--directed` on the command line (issue 22): graph files, edge lists, queries and update
files read as arcs, counts and per-batch deltas equal to the directed oracle's."""
from __future__ import annotations

import json

from service.cli import main
from tests import reference as ref
from tests.reference import RefGraph, RefQuery

# A directed 3-cycle 1 -> 2 -> 3 -> 1 with a chord 1 -> 3 and the reverse 2 -> 1.
GRAPH = "v 1 0\nv 2 0\nv 3 0\nv 4 0\ne 1 2\ne 2 3\ne 3 1\ne 1 3\ne 2 1\n"
CYCLE = "v 0 0\nv 1 0\nv 2 0\ne 0 1\ne 1 2\ne 2 0\n"
PAIR = "v 0 0\nv 1 0\ne 0 1\ne 1 0\n"
UPDATES = "e 3 4\ne 4 3\n-e 2 1\ne 4 1\n"


def _run(capsys, *argv):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, [json.loads(line) for line in out.splitlines()], err


def _write(tmp_path, **texts):
    for name, text in texts.items():
        (tmp_path / f"{name}.txt").write_text(text)
    return {name: str(tmp_path / f"{name}.txt") for name in texts}


def _oracle():
    g = RefGraph.build({1: 0, 2: 0, 3: 0, 4: 0},
                       [(1, 2, 0), (2, 3, 0), (3, 1, 0), (1, 3, 0), (2, 1, 0)], directed=True)
    cycle = RefQuery.build([0, 0, 0], [(0, 1, 0), (1, 2, 0), (2, 0, 0)], directed=True)
    pair = RefQuery.build([0, 0], [(0, 1, 0), (1, 0, 0)], directed=True)
    return g, cycle, pair


def test_count_directed(capsys, tmp_path):
    f = _write(tmp_path, graph=GRAPH, cycle=CYCLE, pair=PAIR)
    status, lines, _ = _run(capsys, "count", "--directed", "--graph", f["graph"],
                            "--query", f["cycle"], "--query", f["pair"], "-q")
    assert status == 0
    g, cycle, pair = _oracle()
    assert [line["matches"] for line in lines] == [len(g.embeddings(cycle)),
                                                  len(g.embeddings(pair))] == [3, 4]
    # Undirected, the same files are a triangle on {1, 2, 3} ... with duplicate edges.
    status, _, err = _run(capsys, "count", "--graph", f["graph"], "--query", f["cycle"], "-q")
    assert status != 0 and "duplicate edge" in err


def test_match_directed_updates(capsys, tmp_path):
    f = _write(tmp_path, graph=GRAPH, cycle=CYCLE, pair=PAIR, updates=UPDATES)
    status, lines, _ = _run(capsys, "match", "--directed", "--graph", f["graph"],
                            "--query", f["cycle"], "--query", f["pair"],
                            "--updates", f["updates"], "--batch-size", "2", "-q")
    assert status == 0
    g, cycle, pair = _oracle()
    expected = []
    for batch in ([(ref.INSERT_EDGE, 3, 4, 0), (ref.INSERT_EDGE, 4, 3, 0)],
                  [(ref.DELETE_EDGE, 2, 1, ref.NO_LABEL), (ref.INSERT_EDGE, 4, 1, 0)]):
        before = [g.embeddings(q) for q in (cycle, pair)]
        g.apply(batch)
        after = [g.embeddings(q) for q in (cycle, pair)]
        expected.append([(len(a - b), len(b - a)) for a, b in zip(after, before)])
    got = [[(line["positive"], line["negative"]) for line in lines
            if line.get("batch") == b and "query" in line] for b in (0, 1)]
    assert got == expected


def test_edge_list_keeps_both_arcs_of_a_pair(capsys, tmp_path):
    f = _write(tmp_path, pair=PAIR)
    edges = tmp_path / "edges.txt"
    edges.write_text("# SNAP\n1 2\n2 1\n1 2\n2 3\n")
    status, lines, _ = _run(capsys, "count", "--directed", "--graph", edges, "--num-labels",
                            "1", "--query", f["pair"], "-q")
    assert status == 0 and lines[0]["matches"] == 2      # 1 <-> 2, both ways round
    status, lines, _ = _run(capsys, "count", "--graph", edges, "--num-labels", "1",
                            "--query", f["pair"], "-q")
    assert status != 0      # undirected, the pair query has the same edge twice
