"""Vertex signatures and every standing query's candidate bits, kept on the device.

The CUDA executor's counterpart of gpu/plan/signatures.py's `SignatureTable` (same rules,
same interface to the engine): neighbour-label counts, degrees, 2-bit codes and one
candidate bitmap per query live on the device and follow each batch there
(gpu/cuda/kernels/signature.cu): the changed edges go into the counts, and only the touched
vertices are re-encoded and tested against every query, in one launch.  The host keeps
the encoded label set and the queries' side of the test.

Registration is the one time the whole graph is read: a query that brings new labels
re-encodes every vertex (its counts counted on the device when the edges live there, a
DeviceEdgeGraph, else on the host and uploaded), and the new
query's bits are computed for every vertex on the device.  Importing this module needs
CuPy; `gpu.cuda.device` decides whether to.
"""
from __future__ import annotations

import cupy as cp
import numpy as np

from gpu.cuda import signature_launchers
from gpu.cuda.loader import MAX_QUERY, upload_together
from gpu.plan.signatures import SignatureTable, count_neighbour_labels, label_slots, query_codes


class DeviceSignatures:
    """Counts, codes and candidate bits on the device; `cand[qid]` is a device array."""

    def __init__(self) -> None:
        self.labels = np.empty(0, dtype=np.int64)     # encoded labels, sorted
        self.cand: dict[int, cp.ndarray] = {}          # query id -> uint32 [capacity]
        self._queries: dict[int, tuple] = {}           # query id -> (query, codes)
        self.label = cp.zeros(0, dtype=np.int32)      # per vertex slot
        self.deg = cp.zeros(0, dtype=np.int32)
        self.alive = cp.zeros(0, dtype=np.bool_)
        self.slot_of = cp.zeros(0, dtype=np.int32)
        self.counts = cp.zeros((0, 0), dtype=np.int32)
        self.codes = cp.zeros((0, 1), dtype=np.uint64)
        self._tables: signature_launchers.QueryTables | None = None   # rebuilt when stale
        # A directed graph's labels have two fields each, out- and in-neighbours
        # (gpu/plan/signatures.py); taken from the graph at load.
        self.directed = False

    @property
    def fields(self) -> int:
        return len(self.labels) * (2 if self.directed else 1)

    @property
    def words(self) -> int:
        return max(1, -(-self.fields // 32))

    @property
    def capacity(self) -> int:
        return self.label.shape[0]

    @property
    def nbytes(self) -> int:
        """Device memory of the table and every query's candidate bits (benchmarks)."""
        arrays = [self.label, self.deg, self.alive, self.slot_of, self.counts, self.codes,
                  *self.cand.values()]
        return sum(int(a.nbytes) for a in arrays)

    # ---- whole graph (start, recovery, a wider label set) ---------------
    def load(self, graph) -> None:
        """Take the host graph's vertices and counts whole, and every query's bits."""
        self.directed = bool(getattr(graph, "directed", False))
        self.label = cp.asarray(graph.label)
        self.deg = cp.asarray(graph.deg)
        self.alive = cp.asarray(graph.alive)
        self._recount(graph)

    def _recount(self, graph) -> None:
        """Counts and codes of every vertex from the host graph, then every query's bits."""
        n = graph.num_slots
        slot_of = np.full(graph.label.shape[0], -1, dtype=np.int32)
        slot_of[:n] = label_slots(self.labels, graph.label[:n])
        self.slot_of = cp.asarray(slot_of)
        self.counts = self._count_all(graph)
        self.codes = cp.zeros((self.capacity, self.words), dtype=np.uint64)
        self._tables = None
        for qid, (query, _) in self._queries.items():
            self._queries[qid] = (query, query_codes(self.labels, query))
        self.cand = {qid: cp.zeros(self.capacity, dtype=np.uint32) for qid in self._queries}
        self._refresh(cp.arange(n, dtype=np.int32))

    def _count_all(self, graph) -> cp.ndarray:
        """Every vertex slot's neighbour count per label slot: on the device from the
        edges when they live there (a DeviceEdgeGraph), else from the host lists."""
        if not hasattr(graph, "device_edges"):
            return cp.asarray(count_neighbour_labels(graph, self.slot_of.get(),
                                                     len(self.labels)))
        counts = cp.zeros((self.capacity, self.fields), dtype=np.int32)
        us, vs = graph.device_edges()
        signature_launchers.count_edges(us, vs, 1, self.slot_of, counts,
                                        cp.zeros(self.capacity, dtype=np.int32), self.directed)
        return counts

    def resize(self, graph) -> None:
        """Follow the host graph's vertex capacity (it grows by doubling)."""
        size = graph.label.shape[0]
        if self.capacity >= size:
            return

        def grown(arr, fill):
            new = cp.full((size,) + arr.shape[1:], fill, dtype=arr.dtype)
            new[: arr.shape[0]] = arr
            return new
        self.label, self.deg = grown(self.label, 0), grown(self.deg, 0)
        self.alive, self.slot_of = grown(self.alive, False), grown(self.slot_of, -1)
        self.counts, self.codes = grown(self.counts, 0), grown(self.codes, 0)
        self.cand = {qid: grown(bits, 0) for qid, bits in self.cand.items()}
        self._tables = None

    # ---- queries --------------------------------------------------------
    def add_query(self, qid: int, query, graph) -> None:
        """Encode the query's labels (re-encoding every vertex when they are new) and
        compute its bits for every vertex; on failure the query is not registered."""
        new = np.union1d(self.labels, np.unique(query.labels).astype(np.int64))
        self.resize(graph)
        self._queries[qid] = (query, None)
        self._tables = None
        try:
            if len(new) > len(self.labels):
                self.labels = new
                self._recount(graph)    # every query's codes and bits change with the slots
                return
            self._queries[qid] = (query, query_codes(self.labels, query))
            self.cand[qid] = cp.zeros(self.capacity, dtype=np.uint32)
            self._refresh(cp.arange(graph.num_slots, dtype=np.int32))
        except BaseException:
            self._queries.pop(qid)
            self.cand.pop(qid, None)
            raise

    def remove_query(self, qid: int) -> None:
        self.cand.pop(qid, None)
        self._queries.pop(qid)
        self._tables = None

    def host_cand(self, qid: int) -> np.ndarray:
        """The query's candidate bits on the host (registration's planner statistics)."""
        return self.cand[qid].get()

    # ---- per batch ------------------------------------------------------
    def apply(self, graph, batch, touched: np.ndarray | None, uploaded=None) -> None:
        """Follow an EffectiveBatch the host graph has taken: new vertices, the changed
        edges, deleted vertices, then the touched vertices' codes and bits.  The edges
        and the touched vertices are read on the device where they are there already
        (what the device graph `uploaded` with its keys, or found after a device-settled
        batch's update: gpu/cuda/device_graph.py BatchArrays), else uploaded together
        with `touched`."""
        self.resize(graph)
        if len(batch.add_slots):
            slots = cp.asarray(batch.add_slots.astype(np.int32))
            self.label[slots] = cp.asarray(batch.add_labels.astype(np.int32))
            self.slot_of[slots] = cp.asarray(label_slots(self.labels, batch.add_labels))
            # The rows zeroed through a flat index: a 2-D scatter is compiled per shape
            # (one label's table collapses to 1-D), so a service's first vertex record
            # met a kernel the warm-up's one-label graph had not built.
            width = self.counts.shape[1]
            flat = (batch.add_slots.astype(np.int64)[:, None] * width + np.arange(width))
            self.counts.reshape(-1)[cp.asarray(flat.reshape(-1))] = 0
            self.deg[slots] = 0
            self.alive[slots] = True
        if uploaded is not None:
            du, dv, iu, iv, vertices = uploaded[:5]
        else:
            # One upload for the per-batch index arrays; the kernels read views of it.
            parts = (batch.delete_u, batch.delete_v, batch.insert_u, batch.insert_v,
                     touched)
            if sum(len(p) for p in parts) == 0:
                return
            du, dv, iu, iv, vertices = upload_together(
                *(np.asarray(p, dtype=np.int32) for p in parts))
        signature_launchers.count_edges(du, dv, -1, self.slot_of, self.counts, self.deg,
                                        self.directed)
        if len(batch.delete_slots):
            self.alive[cp.asarray(batch.delete_slots.astype(np.int32))] = False
        signature_launchers.count_edges(iu, iv, +1, self.slot_of, self.counts, self.deg,
                                        self.directed)
        self._refresh(vertices)

    def _refresh(self, vertices: cp.ndarray) -> None:
        if not self._queries:
            return
        signature_launchers.refresh_candidates(vertices, self.counts, self.codes, self.label,
                                               self.deg, self.alive, self._query_tables())

    def _query_tables(self) -> signature_launchers.QueryTables:
        if self._tables is None:
            qids = list(self._queries)
            size = (len(qids), MAX_QUERY)
            q_n = np.zeros(len(qids), dtype=np.int32)
            q_label, q_deg = np.zeros(size, dtype=np.int32), np.zeros(size, dtype=np.int32)
            q_codes = np.zeros(size + (self.words,), dtype=np.uint64)
            for i, qid in enumerate(qids):
                query, codes = self._queries[qid]
                n = query.num_vertices
                q_n[i] = n
                q_label[i, :n], q_deg[i, :n], q_codes[i, :n] = query.labels, query.degrees, codes
            ptrs = np.array([self.cand[q].data.ptr for q in qids], dtype=np.uint64)
            self._tables = signature_launchers.QueryTables(*(cp.asarray(a) for a in (
                ptrs, q_n, q_label, q_deg, q_codes)))
        return self._tables

    # ---- tests ----------------------------------------------------------
    def check(self, graph) -> None:
        """Assert counts, degrees and candidate bits equal a host computation from scratch
        over the same label set (tests)."""
        fresh = SignatureTable(self.directed)
        fresh.resize(graph)
        fresh.cover_labels(self.labels, graph)
        for qid, (query, _) in self._queries.items():
            fresh.add_query(qid, query, graph)
        n = graph.num_slots
        alive = graph.alive[:n]
        assert np.array_equal(self.alive[:n].get(), alive), "alive drifted"
        assert np.array_equal(self.label[:n].get()[alive], graph.label[:n][alive]), "labels"
        assert np.array_equal(self.deg[:n].get()[alive], graph.deg[:n][alive]), "degrees"
        assert np.array_equal(self.counts[:n].get()[alive], fresh.counts[:n][alive]), \
            "counts drifted"
        for qid in self._queries:
            assert np.array_equal(self.cand[qid][:n].get(), fresh.cand[qid][:n]), \
                f"candidates of {qid} drifted"
