"""Update streams (``v``/``-v``/``e``/``-e`` lines): read, parse, write; and `split_stream`,
the usual benchmark set-up that holds a graph's edges out as an insertion stream."""
from __future__ import annotations

import numpy as np

from gpu.io.records import (ADD_VERTEX, DELETE_EDGE, DELETE_VERTEX, INSERT_EDGE, NO_LABEL,
                            NO_TIME, LabeledGraph, UpdateStream)
from gpu.io.text import STREAM_GRAMMAR, open_for_write, parse, read_bytes, write_lines


def read_updates(path) -> UpdateStream:
    return parse_updates_text(read_bytes(path), str(path))


def parse_updates_text(text: str | bytes, source: str = "<text>") -> UpdateStream:
    """Parse an update stream; only syntax and value ranges are checked, in file order.
    An edge insert may give an event time after its label (`e u v label time`); the
    stream has times when any record does (the others untimed)."""
    data = text.encode() if isinstance(text, str) else text
    recs = parse(data, STREAM_GRAMMAR, source)
    kind, f = recs.kind, recs.fields
    is_edge = (kind == INSERT_EDGE) | (kind == DELETE_EDGE)
    label = np.where(is_edge, f[:, 2], f[:, 1])
    # `e u v` inserts an edge of label 0; other records keep -1 (= NO_LABEL) when omitted.
    label = np.where((kind == INSERT_EDGE) & (label < 0), 0, label)
    timed = (kind == INSERT_EDGE) & (f[:, 3] >= 0)
    time = np.where(timed, f[:, 3], NO_TIME) if timed.any() else None
    return UpdateStream(kind, f[:, 0], np.where(is_edge, f[:, 1], 0), label, recs.line, source,
                        time)


_UPDATE_LINE = {  # (kind, has a label) -> line format over (a, b, label)
    (int(ADD_VERTEX), True): "v {0} {2}\n",
    (int(DELETE_VERTEX), False): "-v {0}\n",
    (int(DELETE_VERTEX), True): "-v {0} {2}\n",
    (int(INSERT_EDGE), True): "e {0} {1} {2}\n",
    (int(DELETE_EDGE), False): "-e {0} {1}\n",
    (int(DELETE_EDGE), True): "-e {0} {1} {2}\n",
}


def _format_update(kind: int, a: int, b: int, label: int, time: int = NO_TIME) -> str:
    line = _UPDATE_LINE[kind, label != NO_LABEL].format(a, b, label)
    return line if time == NO_TIME else f"{line[:-1]} {time}\n"


def write_updates(stream: UpdateStream, path) -> None:
    """Write in update-stream format; omitted labels (NO_LABEL) stay omitted, and an edge
    insert's event time follows its label."""
    times = () if stream.time is None else (stream.time,)
    with open_for_write(path) as f:
        write_lines(f, _format_update, stream.kind, stream.a, stream.b, stream.label, *times)


def split_stream(
    graph: LabeledGraph, fraction: float, seed: int
) -> tuple[LabeledGraph, UpdateStream]:
    """Hold out round(fraction * m) random edges as an insertion stream (in random order).

    The remaining edges, in their original order, and all vertices form the
    initial graph — the usual continuous-subgraph-matching benchmark setup.
    """
    if not 0 <= fraction < 1:
        raise ValueError(f"fraction must be in [0, 1), got {fraction}")
    perm = np.random.default_rng(seed).permutation(graph.num_edges)
    k = round(fraction * graph.num_edges)
    streamed, kept = perm[:k], np.sort(perm[k:])
    initial = LabeledGraph(
        graph.vertex_ids, graph.vertex_labels,
        graph.edge_src[kept], graph.edge_dst[kept], graph.edge_labels[kept],
    )
    stream = UpdateStream(
        np.full(k, INSERT_EDGE), graph.edge_src[streamed], graph.edge_dst[streamed],
        graph.edge_labels[streamed], np.arange(1, k + 1), "<split_stream>",
    )
    return initial, stream
