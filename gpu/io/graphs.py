"""Graph and query files (``t``/``v``/``e`` lines): read, parse, write; and `load_graph`,
which reads either a graph file or an edge list."""
from __future__ import annotations

import numpy as np

from gpu.io.edge_lists import parse_edge_list
from gpu.io.records import FormatError, LabeledGraph
from gpu.io.text import (E_RECORD, GRAPH_GRAMMAR, T_RECORD, V_RECORD, Records,
                         duplicate_problems, first_content_line, open_for_write, parse,
                         read_bytes, write_lines)


def read_graph(path, directed: bool = False) -> LabeledGraph:
    """Read a graph file (``t``/``v``/``e`` lines; ``e u v`` is the arc u -> v when
    `directed`)."""
    return parse_graph_text(read_bytes(path), str(path), directed)


def read_query(path, directed: bool = False) -> LabeledGraph:
    """Read a query file: same format as graphs; query-specific checks live elsewhere."""
    return read_graph(path, directed)


def parse_graph_text(text: str | bytes, source: str = "<text>",
                     directed: bool = False) -> LabeledGraph:
    data = text.encode() if isinstance(text, str) else text
    return _build_graph(parse(data, GRAPH_GRAMMAR, source), source, directed)


def _build_graph(recs: Records, source: str, directed: bool = False) -> LabeledGraph:
    t_rows = np.flatnonzero(recs.kind == T_RECORD)
    v_rows = np.flatnonzero(recs.kind == V_RECORD)
    e_rows = np.flatnonzero(recs.kind == E_RECORD)
    ids, v_lines = recs.fields[v_rows, 0], recs.line[v_rows]
    src, dst, e_lines = recs.fields[e_rows, 0], recs.fields[e_rows, 1], recs.line[e_rows]

    problems = []  # (line, reason); the earliest line is reported
    if t_rows.size > 1:
        problems.append((int(recs.line[t_rows[1]]), "duplicate 't' header"))
    if t_rows.size and t_rows[0] != 0:
        problems.append(
            (int(recs.line[t_rows[0]]), "'t' header must precede all 'v' and 'e' lines")
        )
    problems += duplicate_problems(ids, ids, v_lines, lambda i: f"duplicate vertex id {ids[i]}")
    loops = np.flatnonzero(src == dst)
    if loops.size:
        problems.append((int(e_lines[loops[0]]), f"self-loop on vertex {src[loops[0]]}"))
    for ends in (src, dst):
        undeclared = np.flatnonzero(~np.isin(ends, ids))
        if undeclared.size:
            bad = undeclared[0]
            problems.append(
                (int(e_lines[bad]), f"edge endpoint {ends[bad]} is not declared by a 'v' line")
            )
    if directed:
        problems += duplicate_problems(
            src, dst, e_lines, lambda i: f"duplicate arc {src[i]}->{dst[i]}")
    else:
        lo, hi = np.minimum(src, dst), np.maximum(src, dst)
        problems += duplicate_problems(
            lo, hi, e_lines, lambda i: f"duplicate edge {src[i]}-{dst[i]} (either orientation)"
        )
    if problems:
        raise FormatError(source, *min(problems))

    if t_rows.size:
        n, m = recs.fields[t_rows[0], :2]
        if (n, m) != (ids.size, src.size):
            raise FormatError(
                source, int(recs.line[t_rows[0]]),
                f"header declares {n} vertices and {m} edges, file has {ids.size} and {src.size}",
            )
    labels = recs.fields[e_rows, 2]
    return LabeledGraph(ids, recs.fields[v_rows, 1], src, dst, np.where(labels < 0, 0, labels))


def write_graph(graph: LabeledGraph, path) -> None:
    """Write in graph-file format (``t n m``, then ``v`` lines, then ``e`` lines)."""
    with open_for_write(path) as f:
        f.write(f"t {graph.num_vertices} {graph.num_edges}\n")
        write_lines(f, "v {} {}\n".format, graph.vertex_ids, graph.vertex_labels)
        write_lines(
            f, "e {} {} {}\n".format, graph.edge_src, graph.edge_dst, graph.edge_labels
        )


def load_graph(path, *, labels_path=None, num_labels=None, seed=0,
               directed: bool = False) -> LabeledGraph:
    """Read a graph file or an edge list, told apart by the first content line (their
    edges read as arcs when `directed`)."""
    data = read_bytes(path)
    tokens = first_content_line(data, b"#")[2]
    if tokens[:1] in ([b"t"], [b"v"], [b"e"]) and len(tokens) > 1:
        if labels_path is not None or num_labels is not None:
            raise ValueError(f"{path} is a graph file with its own labels; "
                             "labels_path/num_labels apply to edge lists only")
        return parse_graph_text(data, str(path), directed)
    return parse_edge_list(data, str(path), labels_path, num_labels, seed, directed)
