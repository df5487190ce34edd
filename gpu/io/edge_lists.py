"""Edge lists (SNAP text or CSV) and label files, read as an undirected simple graph with
labels from a file or drawn at random."""
from __future__ import annotations

import numpy as np

from gpu.graph.sets import sorted_unique
from gpu.io.records import MAX_LABEL, FormatError, LabeledGraph
from gpu.io.text import (EDGE_LIST_GRAMMAR, LABELS_GRAMMAR, duplicate_problems,
                         first_repeat, parse, read_bytes, without_header)


def read_edge_list(path, *, labels_path=None, num_labels=None, seed=0,
                   directed: bool = False) -> LabeledGraph:
    """Read a SNAP/CSV edge list as an undirected simple graph (directed: arcs u -> v).

    Self-loops and duplicate edges (either orientation; directed, the same arc) are
    dropped silently;
    the first occurrence of each edge is kept, in file order.  Vertices are
    every id in the edge list plus every id in the label file, sorted.
    Labels come from ``labels_path`` (which must label every edge-list vertex)
    or are drawn uniformly from ``num_labels`` with ``seed``; give exactly one.
    """
    return parse_edge_list(read_bytes(path), str(path), labels_path, num_labels, seed,
                           directed)


def parse_edge_list(data: bytes, source: str, labels_path, num_labels, seed,
                    directed: bool = False) -> LabeledGraph:
    """read_edge_list of the bytes `data`, named `source` in errors.  An edge list without
    any edge line is a FormatError: loading it as an empty graph hid a misread file."""
    if (labels_path is None) == (num_labels is None):
        raise ValueError("an edge list needs exactly one of labels_path= or num_labels=")
    body, header = without_header(data, EDGE_LIST_GRAMMAR)
    recs = parse(body, EDGE_LIST_GRAMMAR, source)
    if not len(recs.line):
        # An empty graph is never what a load of an edge list means: say what was read.
        if header is None:
            raise FormatError(source, 0, "no edges: the edge list has no `u v` line")
        raise FormatError(source, header.line,
                          f"no edges: only the header line {header.text!r}")
    src, dst = recs.fields[:, 0], recs.fields[:, 1]
    keep = np.ones(src.size, dtype=bool)
    if directed:
        keep[first_repeat(src, dst)] = False
    else:
        keep[first_repeat(np.minimum(src, dst), np.maximum(src, dst))] = False
    keep &= src != dst
    src, dst = src[keep], dst[keep]
    edge_ids = sorted_unique(np.concatenate((src, dst)))
    if labels_path is None:
        vertex_ids, labels = edge_ids, random_labels(edge_ids, num_labels, seed)
    else:
        vertex_ids, labels = _labels_for(edge_ids, labels_path, source)
    return LabeledGraph(vertex_ids, labels, src, dst, np.zeros(src.size, dtype=np.int32))


def _labels_for(edge_ids: np.ndarray, labels_path, edges_path) -> tuple[np.ndarray, np.ndarray]:
    """Sorted vertex ids (edge ids plus labelled ids) and their labels from the label file."""
    ids, labels = read_label_file(labels_path)
    missing = edge_ids[~np.isin(edge_ids, ids)]
    if missing.size:
        raise FormatError(labels_path, 0, f"vertex {missing[0]} of {edges_path} has no label")
    order = np.argsort(ids)
    return ids[order], labels[order]


def read_label_file(path) -> tuple[np.ndarray, np.ndarray]:
    """Read ``<id> <label>`` lines (whitespace or comma, optional header); ids must be unique."""
    source = str(path)
    recs = parse(without_header(read_bytes(path), LABELS_GRAMMAR)[0], LABELS_GRAMMAR, source)
    ids, labels = recs.fields[:, 0], recs.fields[:, 1]
    problems = duplicate_problems(
        ids, ids, recs.line, lambda i: f"duplicate label for vertex {ids[i]}"
    )
    if problems:
        raise FormatError(source, *problems[0])
    return ids, labels.astype(np.int32)


def random_labels(vertex_ids: np.ndarray, num_labels: int, seed: int) -> np.ndarray:
    """Uniform labels in [0, num_labels), one per vertex, deterministic in ``seed``."""
    if not 1 <= num_labels <= MAX_LABEL + 1:
        raise ValueError(f"num_labels must be in [1, 2**31], got {num_labels}")
    rng = np.random.default_rng(seed)
    return rng.integers(0, num_labels, size=len(vertex_ids)).astype(np.int32)
