"""The data graph's vertex slots: external ids, labels, liveness, degrees, free slots.

Both graphs the engine keeps build on this table: `gpu.graph.lists.DynamicGraph` (the CPU's
neighbour lists on the host) and `gpu.cuda.device_graph.DeviceEdgeGraph` (the CUDA engine's
host side when the edges live only in the device's packed memory array).  A deleted
vertex's slot is reused, last freed first, and keeps its label until then.
"""
from __future__ import annotations

import numpy as np

from gpu.config import EngineConfig
from gpu.graph.idmap import IdMap


class VertexTable:
    """Vertex slots (dense internal ids) and the map from external ids to them."""

    # Per-slot arrays and the value a fresh slot holds; subclasses add their own.
    ARRAYS: dict[str, tuple[type, int]] = {"label": (np.int32, 0), "alive": (np.bool_, 0),
                                           "ext": (np.int64, -1), "deg": (np.int32, 0)}
    # Edges are arcs u -> v (gpu/graph/lists.py takes both kinds; the device graph does not).
    directed = False

    def __init__(self, config: EngineConfig | None = None) -> None:
        self.config = config or EngineConfig()
        self.ids = IdMap(self.config.initial_idmap_capacity)
        for name, (dtype, fill) in self.ARRAYS.items():
            setattr(self, name, np.full(self.config.initial_vertex_capacity, fill, dtype=dtype))
        self.num_slots = 0          # slots ever handed out (high-water mark)
        self.num_vertices = 0
        self.num_edges = 0          # undirected
        self._free: list[int] = []  # slots of deleted vertices, reused LIFO
        self._max_degree = 0

    @property
    def max_degree(self) -> int:
        """An upper bound on every degree (kept per insert, so no graph-wide scan)."""
        return self._max_degree

    def edge_slots(self, graph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A `LabeledGraph`'s edges as (u, v, label) slots of this table's vertices (a bulk
        load); ValueError for an unknown endpoint or a negative edge label."""
        us = self.ids.lookup(graph.edge_src)
        vs = self.ids.lookup(graph.edge_dst)
        if (us < 0).any() or (vs < 0).any():
            raise ValueError("edge endpoint is not a vertex of the graph")
        labels = np.asarray(graph.edge_labels, dtype=np.int32)
        if len(labels) and int(labels.min()) < 0:
            raise ValueError(f"edge label {int(labels.min())}: edge labels must be >= 0")
        return us, vs, labels

    def reserve_slots(self, count: int) -> np.ndarray:
        """The slots the next `add_vertices` of `count` vertices will use (no change)."""
        reuse = self._free[len(self._free) - min(count, len(self._free)):][::-1]
        fresh = np.arange(self.num_slots, self.num_slots + count - len(reuse), dtype=np.int32)
        return np.concatenate([np.asarray(reuse, dtype=np.int32), fresh])

    def add_vertices(self, ext_ids, labels) -> np.ndarray:
        ext_ids = np.asarray(ext_ids, dtype=np.int64)
        labels = np.asarray(labels, dtype=np.int32)
        slots = self.reserve_slots(len(ext_ids))
        del self._free[len(self._free) - min(len(self._free), len(ext_ids)):]
        self.num_slots = max(self.num_slots, int(slots.max()) + 1 if len(slots) else 0)
        self._grow_vertices(self.num_slots)
        for name, (_, fill) in self.ARRAYS.items():
            getattr(self, name)[slots] = fill
        self.label[slots] = labels
        self.alive[slots] = True
        self.ext[slots] = ext_ids
        self.ids.insert(ext_ids, slots)
        self.num_vertices += len(slots)
        return slots

    def delete_vertices(self, slots: np.ndarray) -> None:
        """Remove isolated vertices (delete their edges first)."""
        slots = np.asarray(slots, dtype=np.int32)
        if len(slots) == 0:
            return
        assert not self.deg[slots].any(), "delete a vertex's edges before the vertex"
        self._release(slots)
        self.alive[slots] = False
        self.ids.delete(self.ext[slots])
        self._free.extend(slots.tolist())
        self.num_vertices -= len(slots)

    def _release(self, slots: np.ndarray) -> None:
        """What a subclass frees with these vertices (called before they go)."""

    def _grow_vertices(self, needed: int) -> None:
        size = self.label.shape[0]
        if needed <= size:
            return
        while size < needed:
            size *= 2
        for name, (dtype, fill) in self.ARRAYS.items():
            old = getattr(self, name)
            new = np.full(size, fill, dtype=dtype)
            new[: old.shape[0]] = old
            setattr(self, name, new)

    def _check_vertices(self) -> None:
        """Assert the table's own invariants (tests)."""
        n = self.num_slots
        assert int(self.alive[:n].sum()) == self.num_vertices
        assert not self.deg[:n][~self.alive[:n]].any(), "a deleted vertex kept edges"
        assert int(self.deg[:n].max(initial=0)) <= self._max_degree
        assert int(self.deg[:n].sum()) == 2 * self.num_edges
