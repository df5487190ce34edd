"""The `lists` layout of the CUDA executor's device graph: device copies of the host graph's
pooled neighbour lists (gpu/graph/lists.py), following each batch per touched vertex.

The layout the kernel reads is the host's: lists sorted by (neighbour label, id) with
gaps between them.  After a batch the lists and vertex entries of the touched vertices
are copied again; a pool the host grew or compacted goes whole (amortised like the
growth).  Importing this module needs CuPy; `gpu.cuda.device` decides whether to.
"""
from __future__ import annotations

import cupy as cp
import numpy as np

from gpu.cuda import match_launchers


def _list_positions(start: np.ndarray, deg: np.ndarray, vertices: np.ndarray) -> np.ndarray:
    """Pool positions of the lists of `vertices`, concatenated."""
    s = start[vertices].astype(np.int64)
    d = deg[vertices].astype(np.int64)
    total = int(d.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    first = np.repeat(s - (np.cumsum(d) - d), d)
    return first + np.arange(total, dtype=np.int64)


class ListMirror:
    """Device copies of a DynamicGraph's pools and vertex arrays."""

    POOLS = ("nbr", "nlab", "elab", "rank")
    VERTEX = ("start", "deg", "label")
    # Directed graphs' lists key arcs by direction (gpu/graph/lists.py list_key), and the
    # copies keep the keys: the kernels read them through a directed plan's bw_key.
    takes_arcs = True

    def __init__(self) -> None:
        self._copies: dict[str, cp.ndarray] = {}
        self._host: dict[str, np.ndarray] = {}     # the host array each copy was made from
        self._ranked: tuple | None = None       # (us, vs, ranks) on the device
        self.max_degree = 0
        self.directed = False       # the host graph's, taken at each sync

    def kernel_labels(self, labels: np.ndarray) -> np.ndarray:
        """Query vertex labels as the kernel compares them: the labels themselves."""
        return np.asarray(labels, dtype=np.int32)

    def admit(self, labels, slots: int) -> str | None:
        return None     # any labels and vertex slots

    def register_labels(self, labels) -> None:
        pass

    def sync(self, graph, touched: np.ndarray | None = None, batch=None) -> None:
        """Bring the copies up to date after a batch that touched `touched` (None: all)."""
        self.max_degree = graph.max_degree
        self.directed = bool(getattr(graph, "directed", False))
        for name in self.VERTEX + self.POOLS:
            host = getattr(graph, name)
            if touched is None or self._host.get(name) is not host:
                self._copies[name] = cp.asarray(host)
                self._host[name] = host
        if touched is None or len(touched) == 0:
            return
        touched = np.asarray(touched, dtype=np.int64)
        dev_touched = cp.asarray(touched)
        for name in self.VERTEX:
            self._copies[name][dev_touched] = cp.asarray(getattr(graph, name)[touched])
        positions = _list_positions(graph.start, graph.deg, touched)
        if len(positions):
            dev_positions = cp.asarray(positions)
            for name in self.POOLS:
                self._copies[name][dev_positions] = cp.asarray(getattr(graph, name)[positions])

    def set_ranks(self, us: np.ndarray, vs: np.ndarray,
                  edges: match_launchers.UpdateEdges) -> None:
        """DynamicGraph.set_ranks on the device copy (found there, by a kernel, from the
        uploaded `edges`, which are kept for clear_ranks)."""
        self._ranked = (edges.us, edges.vs, edges.ranks)
        self._rank_kernel(clear=False)

    def clear_ranks(self) -> None:
        """Zero the ranks set_ranks wrote."""
        if self._ranked is not None:
            self._rank_kernel(clear=True)
            self._ranked = None

    def _rank_kernel(self, clear: bool) -> None:
        a = self._copies
        match_launchers.set_edge_ranks(a["start"], a["deg"], a["nbr"], a["nlab"], a["label"],
                                       a["rank"], *self._ranked, clear=clear,
                                       directed=self.directed)

    def arrays(self) -> match_launchers.ListGraphArrays:
        a = self._copies
        return match_launchers.ListGraphArrays(a["start"], a["deg"], a["nbr"], a["nlab"],
                                               a["elab"], a["rank"])

    def check(self, graph) -> None:
        """Assert the device copies equal the host structures where they are read (tests)."""
        n = graph.num_slots
        for name in self.VERTEX:
            assert np.array_equal(self._copies[name][:n].get(), getattr(graph, name)[:n]), name
        alive = np.flatnonzero(graph.alive[:n])
        positions = _list_positions(graph.start, graph.deg, alive)
        for name in self.POOLS:
            device = self._copies[name][cp.asarray(positions)].get()
            assert np.array_equal(device, getattr(graph, name)[positions]), name
