"""The CUDA executor's data graph on the device, in one of two layouts behind one interface.

- `ListMirror` (`lists`, gpu/cuda/list_mirror.py): the host graph's pools as they are
  (lists with gaps between them, sorted by (label, id)), following each batch by copying
  the lists of the vertices the batch touched; a pool the host grew or compacted is
  copied whole.
- `PmaGraph` (`pma`, the default): the packed memory array of gpu/graph/pma/, keyed so
  that each vertex's neighbours of one label are one sorted run, updated on the device
  from each batch's effective edge changes (both directions of every edge), so per-batch
  work and traffic follow the batch.  The matching kernel reads the array's gap-free read view
  (gpu/graph/pma/view.py: the touched vertices' lists copied again on the device after
  each batch), laid out as the lists; with `EngineConfig(pma_view=False)` it reads
  neighbour ranges from the array itself (19 bytes per directed edge, no view), and during
  a phase the value slots of its update edges point at their total-order ranks and saved
  edge labels (edge labels are never negative).

Both give the kernel launcher their arrays (`arrays()`), the buffer width
(`max_degree`), ranks for a phase (`set_ranks` / `clear_ranks`) and a check against
the host graph (tests).  Importing this module needs CuPy; `gpu.cuda.device` decides whether to.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import cupy as cp
import numpy as np

from gpu.cuda import match_launchers, pma_launchers
from gpu.cuda.loader import upload_together
from gpu.cuda.array_stream import ArrayStream
from gpu.cuda.small_phase import SmallLookup
from gpu.config import DEVICE_GRAPHS, EngineConfig
from gpu.graph.label_index import LabelIndex, label_keys
from gpu.graph.pma import device_update
from gpu.graph.pma.array import PackedMemoryArray
from gpu.graph.pma.layout import PMAConfig
from gpu.graph.pma.view import ListView
from gpu.graph.sets import sorted_unique
from gpu.graph.vertices import VertexTable


def make_device_graph(config: EngineConfig, directed: bool = False):
    """The device graph of `config.device_graph` for an undirected or a `directed` graph,
    with the config's PMA settings."""
    layout = config.device_graph
    if layout == "pma":
        return PmaGraph(PMAConfig(segment_size=config.pma_segment_size),
                        config.min_list_capacity if config.pma_view else None,
                        config.pma_checks, directed)
    if layout == "lists":
        from gpu.cuda.list_mirror import ListMirror
        return ListMirror()
    raise ValueError(f"device graph layout must be one of {DEVICE_GRAPHS}, got {layout!r}")


class BatchArrays(NamedTuple):
    """A batch's edge changes and touched vertices on the device, uploaded with its keys
    (PmaGraph.sync): int32 edge ends, the touched vertices as int32 and as int64."""
    delete_u: cp.ndarray
    delete_v: cp.ndarray
    insert_u: cp.ndarray
    insert_v: cp.ndarray
    touched32: cp.ndarray
    touched: cp.ndarray


# Lookups of at most this many keys (a small batch's validation) go through SmallLookup's
# prepared launch and buffers.
SMALL_LOOKUP_KEYS = 1024

# Label bits reserved in a key's low word even when fewer labels are known, so that the
# first few new labels do not re-key the whole array (vertex ids below 2^29).
MIN_LABEL_BITS = 3


class PmaGraph:
    """The data graph as a packed memory array on the device.

    A key is ``src << 32 | label(dst) << vertex_bits | dst`` with the label as a dense
    index (`LabelIndex`), so each vertex's neighbours of one label are one sorted run, as
    in the host lists: the kernel finds a label segment by binary search instead of
    scanning the whole list.  The label bits grow when more labels appear, which re-keys
    the array from the host graph (rare: at 9, 17, 33, ... labels).

    A `directed` graph stores each arc u -> v twice, as the lists do (gpu/graph/lists.py
    list_key): at u under the list key 2 label(v) + 0 and at v under 2 label(u) + 1, label
    indices here, so one label bit more; its matching reads the read view, where the list
    keys are the kernel's `nlab` (a directed plan's bw_key, made of label indices by the
    executor)."""

    def __init__(self, config: PMAConfig, view_capacity: int | None = 4,
                 checks: bool = True, directed: bool = False) -> None:
        if directed and view_capacity is None:
            raise ValueError("a directed graph's packed memory array needs its read view "
                             "(the kernel reads arcs from lists); use EngineConfig("
                             "pma_view=True) or device_graph='lists'")
        self.config = config
        self.checks = checks        # the array checks each batch again (PMA.apply)
        self.directed = bool(directed)
        self.labels = LabelIndex()
        self.vertex_bits = 32 - MIN_LABEL_BITS
        self.pma = PackedMemoryArray(cp, 0, dataclasses.replace(config,
                                                                vertex_bits=self.vertex_bits))
        self.max_degree = 0
        self.relayouts = 0
        self._host = None                   # the host graph this follows
        self._ranked: tuple | None = None   # a phase's (ranks, saved labels, slots)
        self._no_ranks = cp.zeros(1, dtype=np.int32)
        self._small_lookup = SmallLookup(SMALL_LOOKUP_KEYS)
        # The read view, and each vertex slot's label index there (the rank kernel's).
        self.view = None if view_capacity is None else ListView(cp, view_capacity)
        self._slot_labels = cp.zeros(0, dtype=np.int32)
        # Per vertex slot, the last batch that found it touched (_touched_after).
        self._stamp, self._epoch = cp.zeros(0, dtype=np.int32), 0
        # With the view the array has a stream of its own (gpu/cuda/array_stream.py).
        self.streams = ArrayStream(self.view is not None)

    @property
    def takes_arcs(self) -> bool:
        """Whether directed plans run on this layout: on the read view (its list keys)."""
        return self.view is not None

    @property
    def slot_labels(self) -> cp.ndarray:
        """Each vertex slot's label index in the keys (int32, on the device; with the
        view): what the rank kernel compares."""
        return self._slot_labels

    def _key_bits(self, count: int) -> int:
        """Bits of a key's list key for `count` labels (a directed graph's direction bit
        besides the label index)."""
        return max(0, count - 1).bit_length() + self.directed

    def _fits(self, slots: int) -> bool:
        """Whether the label bits and `slots` vertex ids fit the current layout."""
        return (self._key_bits(self.labels.count) <= 32 - self.vertex_bits
                and slots <= (1 << self.vertex_bits))

    def admit(self, labels, slots: int) -> str | None:
        """Why the keys cannot hold these vertex labels besides the known ones and `slots`
        vertex slots (None when they can); nothing changes.  The engine asks before it
        changes anything, so a batch or query that does not fit is refused whole."""
        count = self.labels.count_with(labels)
        need = self._key_bits(count)
        if slots > 1 << (32 - need):
            return (f"the packed memory array cannot key {count} vertex labels and {slots} "
                    f"vertex slots in 32 bits; use EngineConfig(device_graph='lists')")
        return None

    def register_labels(self, labels) -> None:
        """Give these labels indices now (a query's, at registration), re-keying the array
        when they need another label bit, so that no phase has to."""
        self.labels.of(labels)
        if self._host is not None and not self._fits(self._host.num_slots):
            with self.streams.changing():
                self._relayout(self._host)

    def _relayout(self, graph, edges=None) -> None:
        """Choose the label bits again and load the graph's edges (or `edges`, (u, v,
        label) host arrays) under them."""
        slots = graph.num_slots
        problem = self.admit([], slots)     # the engine asked before: a defence only
        if problem is not None:
            raise ValueError(problem)
        need = self._key_bits(self.labels.count)
        bits = max(need, MIN_LABEL_BITS)
        if slots > 1 << (32 - bits):
            bits = need
        # Built aside and swapped in whole, so a failed load leaves the old array.
        pma = PackedMemoryArray(cp, 0, dataclasses.replace(self.config, vertex_bits=32 - bits))
        # Only between phases (a batch's sync, a query's registration): no ranks are set.
        assert self._ranked is None, "re-keyed with a phase's ranks set"
        self._load(graph, pma, 32 - bits, edges)
        self.pma, self.vertex_bits = pma, 32 - bits
        self.relayouts += 1

    def _load(self, graph, pma: PackedMemoryArray, vertex_bits: int, edges=None) -> None:
        us, vs, elab = graph.edges() if edges is None else edges
        keys = self._entry_keys(us, vs, graph.label, vertex_bits)
        pma.ensure_vertices(graph.num_slots)
        vals = np.concatenate([elab, elab]).astype(np.int32)
        pma.load(cp.asarray(keys), cp.asarray(vals))

    def _list_keys(self, dst_labels, incoming) -> np.ndarray:
        """The list key of entries whose neighbours have `dst_labels`: the label index, for
        a directed graph 2 index + 1 where the arc enters the entry's vertex (`incoming`,
        a bool or an array of them), + 0 where it leaves it."""
        index = self.labels.of(dst_labels)
        if self.directed:
            return 2 * index + np.asarray(incoming, dtype=np.int64)
        return index

    def _entry_keys(self, us, vs, label: np.ndarray, vertex_bits: int | None = None
                    ) -> np.ndarray:
        """The keys of both entries of each edge us - vs (directed: the arc us -> vs): the
        ones at us, then the ones at vs; `label` the vertex slots' labels."""
        src, dst = np.concatenate([us, vs]), np.concatenate([vs, us])
        incoming = np.arange(len(src)) >= len(us)
        return label_keys(src, dst, self._list_keys(label[dst], incoming),
                          self.vertex_bits if vertex_bits is None else vertex_bits)

    def _holds(self, graph) -> bool:
        """Whether `graph` keeps its edges in this array (a DeviceEdgeGraph) rather than
        in host lists this array follows."""
        return getattr(graph, "device", None) is self

    def sync(self, graph, touched=None, batch=None) -> BatchArrays | None:
        """Follow the host graph: load it whole (no batch), or apply the batch's edge
        changes (an EffectiveBatch, already applied to the host graph, except for the
        degrees of a batch whose changes are on the device: its touched vertices are
        found here after the update, with their degrees in the array, _touched_after).
        A batch whose keys were made here, or whose changes are on the device, returns
        its edge ends and touched vertices there, for the signatures (BatchArrays), else
        None."""
        self._host = graph
        self.max_degree = graph.max_degree
        if batch is None:
            if not self._holds(graph):     # a DeviceEdgeGraph's came through load_edges
                self._load_whole(graph)
            return None
        self.labels.of(batch.add_labels)
        # Written on the engine's stream and read by the keys' kernel on the array's
        # (device_entry_keys): recorded as a read, so that the array's stream waits for it.
        with self.streams.reading():
            self._label_slots(graph, batch.add_slots)
        with self.streams.changing():
            uploaded = self._apply(graph, batch, touched)
            if batch.device is not None:
                assert self._holds(graph) and self.view is not None
                touched, uploaded = self._touched_after(graph, batch)
        touched_on_device = None if uploaded is None else uploaded.touched
        with self.streams.reading():
            self._refresh_view(graph, batch, touched, touched_on_device)
        return uploaded

    def _apply(self, graph, batch, touched=None) -> BatchArrays | None:
        """The batch's edge changes into the array (sync).  Keys made here go up in one
        copy with the batch's edge ends and its `touched` vertices (host, distinct,
        ascending), which come back on the device (BatchArrays)."""
        if not self._fits(graph.num_slots):
            # Host lists hold the batch already; a DeviceEdgeGraph's edges are this
            # array's, re-keyed as they were before the batch, which then follows.
            self._relayout(graph)
            if not self._holds(graph):
                return None
        self.pma.ensure_vertices(graph.num_slots)
        if len(batch.insert_u) == 0 and len(batch.delete_u) == 0:
            return None
        if batch.device is not None and self.view is not None:
            self._apply_from_device(batch.device)
            return None
        label = graph.label
        inserted = self._entry_keys(batch.insert_u, batch.insert_v, label)
        # A deleted vertex's slot keeps its label until the slot is reused.
        deleted = self._entry_keys(batch.delete_u, batch.delete_v, label)
        vals = np.concatenate([batch.insert_labels, batch.insert_labels]).astype(np.int32)
        small = len(inserted) + len(deleted) <= device_update.SMALL_BATCH
        if small:   # sorted here, where a few keys sort faster than a launch
            order = np.argsort(inserted)
            inserted, vals, deleted = inserted[order], vals[order], np.sort(deleted)
        if touched is None:
            touched = sorted_unique(np.concatenate([batch.insert_u, batch.insert_v,
                                                    batch.delete_u, batch.delete_v]))
        # One upload: the keys, the touched vertices (the view's int64, the signatures'
        # int32), the values and the edge ends.
        on_device = upload_together(
            inserted, deleted, np.asarray(touched, dtype=np.int64), vals,
            *(np.asarray(a, dtype=np.int32) for a in (batch.delete_u, batch.delete_v,
                                                      batch.insert_u, batch.insert_v,
                                                      touched)))
        ik, dk, touched64, iv, *ends, touched32 = on_device
        self.pma.apply(ik, iv, dk, check=self.checks, presorted=small)
        return BatchArrays(*ends, touched32, touched64)

    def _touched_after(self, graph, batch) -> tuple[np.ndarray, BatchArrays]:
        """The distinct vertices a batch changed on the device touched, found after its
        update with their degrees in the array, in one launch and one read-back
        (pma_launchers.touched_vertices, in the order found); the host graph takes the
        degrees.  Returns the vertices on the host, and the batch's edge ends and the
        vertices on the device."""
        dev = batch.device
        self._epoch += 1
        if self._stamp.shape[0] < graph.num_slots or self._epoch >= 2**31 - 1:
            self._stamp = cp.zeros(max(graph.num_slots, 2 * self._stamp.shape[0]),
                                   dtype=np.int32)
            self._epoch = 1
        slots = np.concatenate([batch.delete_slots, batch.add_slots]).astype(np.int32)
        touched, degrees, on_device = pma_launchers.touched_vertices(
            dev.delete_u, dev.delete_v, dev.insert_u, dev.insert_v, cp.asarray(slots),
            self.pma.deg, self._stamp, self._epoch)
        graph.follow_degrees(touched, degrees, len(batch.insert_u) - len(batch.delete_u))
        self.max_degree = graph.max_degree
        return touched, BatchArrays(dev.delete_u, dev.delete_v, dev.insert_u, dev.insert_v,
                                    on_device, on_device.astype(np.int64))

    def _apply_from_device(self, edges) -> None:
        """_apply of a batch whose changes are on the device already (EdgeArrays): keyed
        there (device_entry_keys, one launch a side), so nothing is made or uploaded here."""
        inserted, vals = self.device_entry_keys(edges.insert_u, edges.insert_v,
                                                edges.insert_labels)
        deleted, _ = self.device_entry_keys(edges.delete_u, edges.delete_v)
        self.pma.apply(inserted, vals, deleted, check=self.checks)

    def device_entry_keys(self, us: cp.ndarray, vs: cp.ndarray,
                          labels: cp.ndarray | None = None
                          ) -> tuple[cp.ndarray, cp.ndarray | None]:
        """The keys of both entries of each edge us - vs (born slots, device arrays;
        directed: the arc us -> vs), the ones at us first, each neighbour's label index
        read from the slots' label indices kept with the view (_list_keys); with `labels`
        the entries' values (the edges' labels) too.  One launch
        (gpu/cuda/kernels/view.cu)."""
        assert self.view is not None, "the slots' label indices are kept with the view"
        as32 = functools.partial(cp.ascontiguousarray, dtype=np.int32)
        return pma_launchers.entry_keys(as32(us), as32(vs), self._slot_labels,
                                        self.vertex_bits, self.directed,
                                        None if labels is None else as32(labels))

    def _refresh_view(self, graph, batch, touched=None, touched_on_device=None) -> None:
        """Copy again the view's lists of the vertices whose edges `batch` changed (or of
        `touched`, the engine's distinct touched vertices, which include them, and
        `touched_on_device` their device copy)."""
        if self.view is None:
            return
        if touched is None:
            touched = sorted_unique(np.concatenate([batch.insert_u, batch.insert_v,
                                                    batch.delete_u, batch.delete_v]))
            touched_on_device = None
        self.view.refresh(self.pma, graph.deg[:graph.num_slots], touched, touched_on_device)

    def _label_slots(self, graph, slots) -> None:
        """Record the label indices of these (new) vertex slots for the rank kernel."""
        if self.view is None:
            return
        self.view.ensure_vertices(graph.num_slots)
        n = graph.label.shape[0]
        if self._slot_labels.shape[0] < n:
            grown = cp.zeros(n, dtype=np.int32)
            grown[:self._slot_labels.shape[0]] = self._slot_labels
            self._slot_labels = grown
        if len(slots):
            slots = np.asarray(slots, dtype=np.int64)
            self._slot_labels[cp.asarray(slots)] = cp.asarray(
                self.labels.of(graph.label[slots]).astype(np.int32))

    # ---- the edge store of a DeviceEdgeGraph --------------------------------
    def load_edges(self, graph, us: np.ndarray, vs: np.ndarray, elab: np.ndarray) -> None:
        """Load `graph`'s edges u - v (host arrays) whole: a DeviceEdgeGraph's bulk load,
        after which batches follow through sync."""
        self._host = graph
        self.max_degree = graph.max_degree
        self._load_whole(graph, (us, vs, elab))

    def _load_whole(self, graph, edges=None) -> None:
        """Register the live vertices' labels and load the graph's edges (or `edges`)."""
        alive = np.flatnonzero(graph.alive[: graph.num_slots])
        self.labels.of(graph.label[alive])
        with self.streams.changing():
            self._relayout(graph, edges)
        if self.view is not None:
            self._label_slots(graph, alive)
            with self.streams.reading():
                self.view.rebuild(self.pma, graph.deg[:graph.num_slots])

    def stored_labels(self, graph, us: np.ndarray, vs: np.ndarray) -> np.ndarray:
        """The stored label of each edge u - v of `graph`'s vertices (int32, on the host),
        -1 where absent: one lookup on the device, one read back."""
        if len(us) == 0:
            return np.empty(0, dtype=np.int32)
        # The labels of born slots are registered (load_edges, sync): nothing changes.
        keys = label_keys(us, vs, self._list_keys(graph.label[vs], False), self.vertex_bits)
        with self.streams.changing():   # a read with its read-back: the array's stream
            if len(keys) <= SMALL_LOOKUP_KEYS and self.pma.config.kernels:
                return self._small_lookup.values(self.pma, keys)
            return self.pma.lookup(cp.asarray(keys), values=True)[1].get()

    def stored_labels_on_device(self, us: cp.ndarray, vs: cp.ndarray,
                                num_slots: int) -> cp.ndarray:
        """stored_labels of device arrays (int32, -1 where absent or where an endpoint is
        not one of the graph's `num_slots` born slots), keyed through the view's label
        index of each slot; inside `streams.changing()` (gpu/cuda/batch_prep.py)."""
        if us.shape[0] == 0:
            return cp.empty(0, dtype=np.int32)
        born = (us < num_slots) & (vs < num_slots)
        keys = self.device_entry_keys(cp.where(born, us, 0),
                                      cp.where(born, vs, 0))[0][:us.shape[0]]
        found = self.pma.lookup(keys, values=True)[1]
        return cp.where(born, found, -1).astype(np.int32)

    def stored_edges(self) -> tuple[cp.ndarray, cp.ndarray, cp.ndarray]:
        """Every stored edge once as (u, v, label) with u < v (directed: every arc u -> v),
        int32 on the device."""
        with self.streams.reading():
            keys, vals = self.pma.edges()
            src = (keys >> np.uint64(32)).astype(np.int32)
            dst = (keys & self.pma.vertex_mask).astype(np.int32)
            keep = ~self._incoming(keys) if self.directed else src < dst
            return src[keep], dst[keep], vals[keep]

    def _incoming(self, keys: cp.ndarray) -> cp.ndarray:
        """Of a directed graph's keys: whether each is the entry of an arc into its source
        (the list key's low bit)."""
        return ((keys >> np.uint64(self.vertex_bits)) & np.uint64(1)) == 1

    def incident_edges(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every edge touching `slots`, once, as (u, v, label) with u < v (host arrays)."""
        vertices = sorted_unique(np.asarray(slots, dtype=np.int64))
        with self.streams.reading():
            src, keys, vals = self.pma.out_edges(cp.asarray(vertices))
        dst = (keys & self.pma.vertex_mask).astype(np.int64)
        if self.directed:       # the arc each entry stands for, whichever end listed it
            incoming = self._incoming(keys)
            lo, hi = cp.where(incoming, dst, src), cp.where(incoming, src, dst)
        else:
            lo, hi = cp.minimum(src, dst), cp.maximum(src, dst)
        _, first = cp.unique(lo << 32 | hi, return_index=True)
        return (lo[first].astype(np.int32).get(), hi[first].astype(np.int32).get(),
                vals[first].astype(np.int32).get())

    def kernel_labels(self, labels: np.ndarray) -> np.ndarray:
        """Query vertex labels as the kernel compares them: label indices (registered with
        the query, so never new here: a new one could re-key the array inside a phase)."""
        assert self.labels.count_with(labels) == self.labels.count, "unregistered label"
        return self.labels.of(labels).astype(np.int32).reshape(np.shape(labels))

    def set_ranks(self, us: np.ndarray, vs: np.ndarray,
                  edges: match_launchers.UpdateEdges) -> None:
        """Rank the edges us-vs (both directions, all stored) until clear_ranks: the value
        slot of the j-th directed edge holds -(j + 1), its label and rank go to side
        arrays, so the kernel reads a slot's rank beside it as in the lists.  (`edges`,
        their upload, holds the ranks; the keys are made on the host from us-vs.)
        With the read view, the ranks go to its rank pool instead, by the lists' rank
        kernel."""
        if self.view is not None:
            self._ranked = (edges.us, edges.vs, edges.ranks)
            self._view_ranks(clear=False)
            return
        keys = self._entry_keys(us, vs, self._host.label)
        pos = self.pma.find(cp.asarray(keys))
        saved = self.pma.vals[pos]
        ranked = cp.concatenate([edges.ranks, edges.ranks])
        # Recorded before the slots change, so clear_ranks restores them after any failure.
        self._ranked = (ranked, saved, pos)
        self.pma.vals[pos] = -cp.arange(1, len(keys) + 1, dtype=np.int32)

    def clear_ranks(self) -> None:
        if self._ranked is not None:
            if self.view is not None:
                # Recorded as a read: the ranked edges may be a batch's device arrays,
                # made on the array's stream, and freed once the batch is done; the
                # array's stream must not reuse their memory before this kernel ran.
                with self.streams.reading():
                    self._view_ranks(clear=True)
            else:
                _, saved, pos = self._ranked
                self.pma.vals[pos] = saved
            self._ranked = None

    def _view_ranks(self, clear: bool) -> None:
        view = self.view
        match_launchers.set_edge_ranks(view.device_start, view.deg, view.nbr, view.nlab,
                                       self._slot_labels, view.rank, *self._ranked,
                                       clear=clear, directed=self.directed)

    def arrays(self) -> match_launchers.PmaGraphArrays | match_launchers.ListGraphArrays:
        pma = self.pma
        if self.view is not None:
            view = self.view
            # The view's own lengths: the array's degrees may be the next batch's already.
            return match_launchers.ListGraphArrays(view.device_start, view.deg, view.nbr,
                                                   view.nlab, view.elab, view.rank)
        ranked, saved = (self._ranked[:2] if self._ranked is not None
                         else (self._no_ranks, self._no_ranks))
        return match_launchers.PmaGraphArrays(pma.keys, pma.vals, pma.cnt, pma.row,
                                              pma.S.bit_length() - 1, self.vertex_bits,
                                              ranked, saved)

    def check(self, graph) -> None:
        """Assert the PMA holds exactly the host graph's edges, both entries of each, keyed
        by the list keys of their destinations (tests)."""
        us, vs, elab = graph.edges()
        keys = self._entry_keys(us, vs, graph.label)
        assert self._ranked is None, "ranks left set"
        with self.streams.reading():
            self.pma.check(cp.asarray(keys), cp.asarray(np.concatenate([elab, elab])))
        if self.view is not None:
            n = graph.num_slots
            with self.streams.reading():
                self.view.check(self.pma, graph.deg[:n])
            alive = np.flatnonzero(graph.alive[:n])
            assert np.array_equal(self._slot_labels[cp.asarray(alive)].get(),
                                  self.labels.of(graph.label[alive])), "slot label indices"
        assert self.directed == graph.directed, "an undirected array for arcs, or back"


class DeviceEdgeGraph(VertexTable):
    """The CUDA engine's data graph on the `pma` layout: the vertex table on the host and
    the edges only in the device's packed memory array (a PmaGraph), so that no batch
    merges host neighbour lists (what bounded the engine's ingest on large graphs).

    It answers what the engine and batch validation ask of a graph: the stored label of
    an edge (one lookup on the device per batch), the edges of deleted vertices, every
    edge (static matching, snapshots), the planner's edge statistics.  A batch's edges
    change only the host degrees here; PmaGraph.sync applies them to the array.  Directed
    or not as its array is (a vertex's degree counts its arcs both ways, as the lists
    do)."""

    def __init__(self, config, device: PmaGraph) -> None:
        super().__init__(config)
        self.device = device
        self.directed = device.directed

    @classmethod
    def from_labeled(cls, graph, config, device: PmaGraph) -> "DeviceEdgeGraph":
        """Bulk-load a `LabeledGraph`: vertices on the host, edges (arcs where `device` is
        directed) into `device`."""
        g = cls(config, device)
        g.add_vertices(graph.vertex_ids, graph.vertex_labels)
        us, vs, labels = g.edge_slots(graph)
        g.insert_edges(us, vs, labels)
        device.load_edges(g, us, vs, labels)
        return g

    # ---- edges: host degrees here, the array in PmaGraph.sync -------------
    def insert_edges(self, us: np.ndarray, vs: np.ndarray, labels: np.ndarray) -> None:
        self._count(us, vs, 1)

    def delete_edges(self, us: np.ndarray, vs: np.ndarray) -> None:
        self._count(us, vs, -1)

    def follow_degrees(self, vertices: np.ndarray, degrees: np.ndarray, edges: int) -> None:
        """Take the array's degrees of `vertices` (every endpoint of a batch's edge
        changes) and its change in edges, for a batch the engine did not count here."""
        self.deg[vertices] = degrees
        self.num_edges += edges
        if len(degrees):
            self._max_degree = max(self._max_degree, int(degrees.max()))

    def _count(self, us: np.ndarray, vs: np.ndarray, sign: int) -> None:
        if len(us) == 0:
            return
        ends = np.concatenate([us, vs])
        np.add.at(self.deg, ends, np.int32(sign))
        self.num_edges += sign * len(us)
        if sign > 0:
            self._max_degree = max(self._max_degree, int(self.deg[ends].max()))

    # ---- reads from the device ------------------------------------------
    def edge_labels(self, us: np.ndarray, vs: np.ndarray) -> np.ndarray:
        """The stored label of each edge u - v (directed: arc u -> v; int32), -1 where
        absent."""
        return self.device.stored_labels(self, us, vs)

    def find_edge(self, a: int, b: int) -> tuple[int, int, int]:
        """DynamicGraph.find_edge: the slots of external ids a and b (u < v; directed: a's,
        b's) and the stored label of the edge u - v, -1 when absent."""
        su, sv = self.ids.lookup(np.array([a, b], dtype=np.int64)).tolist()
        if su < 0 or sv < 0 or su == sv:
            return su, sv, -1
        u, v = (su, sv) if self.directed else (min(su, sv), max(su, sv))
        found = self.edge_labels(np.array([u], dtype=np.int32), np.array([v], dtype=np.int32))
        return u, v, int(found[0])

    def incident_edges(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All edges touching `slots`, each once, as (u, v, label) with u < v (directed:
        the arcs u -> v into and out of them)."""
        return self.device.incident_edges(slots)

    def edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every edge once as (u, v, label) slots with u < v (directed: every arc)."""
        return tuple(a.get() for a in self.device.stored_edges())

    def device_edges(self) -> tuple[cp.ndarray, cp.ndarray]:
        """Every edge once as (u, v), int32 on the device (as `edges`)."""
        return self.device.stored_edges()[:2]

    def candidate_edge_counts(self, cand: np.ndarray, qa: np.ndarray, qb: np.ndarray,
                              ql: np.ndarray) -> np.ndarray:
        """DynamicGraph.candidate_edge_counts, over the array on the device (both
        orientations of each edge or arc, as the lists count them)."""
        us, vs, elab = self.device.stored_edges()
        bits = cp.asarray(cand)
        cu, cv = bits[us].astype(np.int64), bits[vs].astype(np.int64)
        out = np.zeros(len(qa), dtype=np.int64)
        for j, (a, b, label) in enumerate(zip(qa.tolist(), qb.tolist(), ql.tolist(),
                                              strict=True)):
            both = (((cu >> a) & (cv >> b) & 1) + ((cv >> a) & (cu >> b) & 1))
            out[j] = int((both * (elab == label)).sum())
        return out

    # ---- tests ------------------------------------------------------------
    def host_lists(self):
        """The graph as host neighbour lists with the same slots (a DynamicGraph), for
        the checks that compare structures against one."""
        from gpu.graph.lists import DynamicGraph
        host = DynamicGraph.on_slots_of(self, self.config)
        host.insert_edges(*self.edges())
        return host

    def check(self) -> None:
        """Assert the vertex table's invariants and that the host degrees are the
        array's (tests)."""
        self._check_vertices()
        n = self.num_slots
        with self.device.streams.reading():
            assert np.array_equal(self.device.pma.deg[:n].get(), self.deg[:n]), "degrees"
        assert self.device.pma.num_edges == 2 * self.num_edges, "edge count"
