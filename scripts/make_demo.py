"""Regenerates the embedded demo (service/demo/): a labeled slice of the GH graph and a stream.

The demo is what `motifstream match` runs with no input flags: the GitHub
graph's vertices 0..9999 (5 random labels, seed 0), 10% of their edges held
back as insertions, and every 50th initial edge deleted, mixed into one
stream; plus three small queries.  Run from the repo root:

    python scripts/make_demo.py ../shared/datasets/github/musae_git_edges.csv
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from gpu.io.graphs import load_graph, write_graph
from gpu.io.records import DELETE_EDGE, NO_LABEL, LabeledGraph, UpdateStream
from gpu.io.streams import split_stream, write_updates

QUERIES = {
    "triangle.graph": "v 0 0\nv 1 1\nv 2 2\ne 0 1\ne 1 2\ne 0 2\n",
    "square.graph": "v 0 0\nv 1 1\nv 2 0\nv 3 1\ne 0 1\ne 1 2\ne 2 3\ne 3 0\n",
    "house.graph": "v 0 0\nv 1 1\nv 2 2\nv 3 3\nv 4 4\n"
                   "e 0 1\ne 1 2\ne 2 0\ne 1 3\ne 2 4\ne 3 4\n",
}


def main(source: str, out: Path = Path("service/demo")) -> None:
    full = load_graph(source, num_labels=5, seed=0)
    keep_v = full.vertex_ids < 10000
    keep_e = (full.edge_src < 10000) & (full.edge_dst < 10000)
    graph = LabeledGraph(full.vertex_ids[keep_v], full.vertex_labels[keep_v],
                         full.edge_src[keep_e], full.edge_dst[keep_e], full.edge_labels[keep_e])
    initial, inserts = split_stream(graph, 0.10, seed=0)
    doomed = np.arange(0, initial.num_edges, 50)
    deletes = UpdateStream.from_records(
        [(DELETE_EDGE, int(initial.edge_src[i]), int(initial.edge_dst[i]), NO_LABEL)
         for i in doomed])
    rng = np.random.default_rng(0)
    records = [(int(k), int(a), int(b), int(lab)) for s in (inserts, deletes)
               for k, a, b, lab in zip(s.kind, s.a, s.b, s.label)]
    records = [records[i] for i in rng.permutation(len(records))]
    out.mkdir(parents=True, exist_ok=True)
    write_graph(initial, out / "graph.txt")
    write_updates(UpdateStream.from_records(records, source="demo"), out / "updates.txt")
    for name, text in QUERIES.items():
        (out / name).write_text(text)


if __name__ == "__main__":
    main(sys.argv[1])
