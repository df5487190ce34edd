"""The CUDA executor's data graph on the device, in one of two layouts behind one interface.

- `PmaGraph` (the default): the packed memory array of gpu/pma.py, updated on the
  device from each batch's effective edge changes (both directions of every edge), so
  per-batch work and traffic follow the batch and memory stays near 19 bytes per
  directed edge.  The matching kernel reads neighbour ranges from it directly.  The
  total-order ranks of a phase's update edges live beside it: their keys sorted with
  their ranks, and a flag per vertex that touches one of them.
- `ListMirror`: the host graph's pools as they are (lists with gaps between them,
  sorted by (label, id)), following each batch by copying the lists of the vertices the
  batch touched; a pool the host grew or compacted is copied whole.  Kept for the
  comparison in the benchmarks and as a second, independent device path in the tests.

Both give the kernel launcher their arrays (`arrays()`), the buffer width
(`max_degree`), ranks for a phase (`set_ranks` / `clear_ranks`) and a check against
the host graph (tests).  Importing this module needs CuPy; `gpu.device` decides whether to.
"""
from __future__ import annotations

import cupy as cp
import numpy as np

from gpu import cuda_kernels
from gpu.pma import PackedMemoryArray, PMAConfig, edge_keys

LAYOUTS = ("pma", "lists")


def make_device_graph(layout: str, segment_size: int = PMAConfig.segment_size):
    if layout == "pma":
        return PmaGraph(PMAConfig(segment_size=segment_size))
    if layout == "lists":
        return ListMirror()
    raise ValueError(f"device graph layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")


def _both_directions(us, vs, labels=None):
    """Keys of u -> v and v -> u for each edge (host arrays), and their labels doubled."""
    us = np.asarray(us, dtype=np.int64)
    vs = np.asarray(vs, dtype=np.int64)
    keys = edge_keys(np, np.concatenate([us, vs]), np.concatenate([vs, us]))
    if labels is None:
        return keys
    labels = np.asarray(labels, dtype=np.int32)
    return keys, np.concatenate([labels, labels])


class PmaGraph:
    """The data graph as a packed memory array on the device."""

    def __init__(self, config: PMAConfig) -> None:
        self.pma = PackedMemoryArray(cp, 0, config)
        self.max_degree = 0
        self.touched = cp.zeros(0, dtype=np.uint8)
        self._ranked: tuple | None = None   # (sorted keys, ranks, endpoints) of a phase
        self._no_ranks = (cp.zeros(1, dtype=np.uint64), cp.zeros(1, dtype=np.int32))

    def sync(self, graph, touched=None, batch=None) -> None:
        """Follow the host graph: load it whole (no batch), or apply the batch's edge
        changes (an EffectiveBatch, already applied to the host graph)."""
        self.max_degree = graph.max_degree
        self._ensure_vertices(graph.num_slots)
        if batch is None:
            us, vs, labels = graph.edges()
            keys, vals = _both_directions(us, vs, labels)
            self.pma.load(cp.asarray(keys), cp.asarray(vals))
            return
        if len(batch.insert_u) == 0 and len(batch.delete_u) == 0:
            return
        keys, vals = _both_directions(batch.insert_u, batch.insert_v, batch.insert_labels)
        deleted = _both_directions(batch.delete_u, batch.delete_v)
        self.pma.apply(cp.asarray(keys), cp.asarray(vals), cp.asarray(deleted))

    def _ensure_vertices(self, n: int) -> None:
        self.pma.ensure_vertices(n)
        if self.touched.shape[0] < n:
            touched = cp.zeros(max(n, 2 * self.touched.shape[0]), dtype=np.uint8)
            touched[: self.touched.shape[0]] = self.touched
            self.touched = touched

    def set_ranks(self, us: np.ndarray, vs: np.ndarray, ranks: np.ndarray) -> None:
        """Rank the edges us-vs (both directions) until clear_ranks."""
        keys = _both_directions(us, vs)
        order = np.argsort(keys)
        doubled = np.concatenate([ranks, ranks]).astype(np.int32)
        ends = cp.asarray(np.concatenate([us, vs]).astype(np.int64))
        self._ranked = (cp.asarray(keys[order]), cp.asarray(doubled[order]), ends)
        self.touched[ends] = 1

    def clear_ranks(self) -> None:
        if self._ranked is not None:
            self.touched[self._ranked[2]] = 0
            self._ranked = None

    def arrays(self) -> cuda_kernels.PmaGraphArrays:
        pma = self.pma
        keys, ranks = self._ranked[:2] if self._ranked is not None else self._no_ranks
        count = keys.shape[0] if self._ranked is not None else 0
        return cuda_kernels.PmaGraphArrays(pma.keys, pma.vals, pma.cnt, pma.row,
                                           pma.S.bit_length() - 1, keys, ranks, count,
                                           self.touched)

    def memory_bytes(self) -> int:
        return self.pma.memory_bytes() + int(self.touched.nbytes)

    def check(self, graph) -> None:
        """Assert the PMA holds exactly the host graph's edges, both directions (tests)."""
        us, vs, labels = graph.edges()
        keys, vals = _both_directions(us, vs, labels)
        order = np.argsort(keys)
        self.pma.check(cp.asarray(keys[order]), cp.asarray(vals[order]))
        assert self._ranked is None and not bool(self.touched.any()), "ranks left set"


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

    def __init__(self) -> None:
        self.arrays_: dict[str, cp.ndarray] = {}
        self._host: dict[str, np.ndarray] = {}     # the host array each copy was made from
        self._ranked: tuple | None = None       # (us, vs, ranks) on the device
        self.max_degree = 0

    def sync(self, graph, touched: np.ndarray | None = None, batch=None) -> None:
        """Bring the copies up to date after a batch that touched `touched` (None: all)."""
        self.max_degree = graph.max_degree
        for name in self.VERTEX + self.POOLS:
            host = getattr(graph, name)
            if touched is None or self._host.get(name) is not host:
                self.arrays_[name] = cp.asarray(host)
                self._host[name] = host
        if touched is None or len(touched) == 0:
            return
        touched = np.asarray(touched, dtype=np.int64)
        dev_touched = cp.asarray(touched)
        for name in self.VERTEX:
            self.arrays_[name][dev_touched] = cp.asarray(getattr(graph, name)[touched])
        positions = _list_positions(graph.start, graph.deg, touched)
        if len(positions):
            dev_positions = cp.asarray(positions)
            for name in self.POOLS:
                self.arrays_[name][dev_positions] = cp.asarray(getattr(graph, name)[positions])

    def set_ranks(self, us: np.ndarray, vs: np.ndarray, ranks: np.ndarray) -> None:
        """DynamicGraph.set_ranks on the device copy (found there, by a kernel); the
        edges are kept for clear_ranks."""
        self._ranked = tuple(cp.asarray(np.ascontiguousarray(a, dtype=np.int32))
                             for a in (us, vs, ranks))
        self._rank_kernel(clear=False)

    def clear_ranks(self) -> None:
        """Zero the ranks set_ranks wrote."""
        if self._ranked is not None:
            self._rank_kernel(clear=True)
            self._ranked = None

    def _rank_kernel(self, clear: bool) -> None:
        a = self.arrays_
        cuda_kernels.set_edge_ranks(a["start"], a["deg"], a["nbr"], a["nlab"], a["label"],
                                    a["rank"], *self._ranked, clear=clear)

    def arrays(self) -> cuda_kernels.ListGraphArrays:
        a = self.arrays_
        return cuda_kernels.ListGraphArrays(a["start"], a["deg"], a["nbr"], a["nlab"],
                                            a["elab"], a["rank"])

    def memory_bytes(self) -> int:
        return sum(int(a.nbytes) for a in self.arrays_.values())

    def check(self, graph) -> None:
        """Assert the device copies equal the host structures where they are read (tests)."""
        n = graph.num_slots
        for name in self.VERTEX:
            assert np.array_equal(self.arrays_[name][:n].get(), getattr(graph, name)[:n]), name
        alive = np.flatnonzero(graph.alive[:n])
        positions = _list_positions(graph.start, graph.deg, alive)
        for name in self.POOLS:
            device = self.arrays_[name][cp.asarray(positions)].get()
            assert np.array_equal(device, getattr(graph, name)[positions]), name
