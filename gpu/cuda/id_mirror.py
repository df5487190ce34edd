"""The vertex id map on the device: a copy of the host's open-addressing table
(gpu/graph/idmap.py) that follows it by the positions each batch wrote, and its lookup
kernel (gpu/cuda/kernels/idmap.cu), so that a large batch's endpoints are looked up where
its edges are validated (gpu/batch_edges.py).

The copy is made whole when it is first used and whenever the host replaced its table
(it doubles at half load: amortised); otherwise a batch copies only the positions its
vertex changes wrote.  Importing this module needs CuPy; `gpu.cuda.device` decides whether
to.
"""
from __future__ import annotations

import cupy as cp
import numpy as np

from gpu.cuda.loader import check_array, one_thread_each
from gpu.graph.idmap import IdMap


def lookup_ids(keys: cp.ndarray, vals: cp.ndarray, query: cp.ndarray,
               out: cp.ndarray) -> None:
    """Launch gpu/cuda/kernels/idmap.cu:lookup_ids: out[i] = the slot of id query[i]."""
    check_array("keys", keys, np.int64, 1)
    check_array("vals", vals, np.int32, 1)
    check_array("query", query, np.int64, 1)
    check_array("out", out, np.int32, 1)
    size = keys.shape[0]
    if size & (size - 1) or vals.shape[0] != size:
        raise ValueError(f"the table must be a power of two of keys and values, got "
                         f"{size} and {vals.shape[0]}")
    if out.shape[0] != query.shape[0]:
        raise ValueError(f"out holds {out.shape[0]} slots for {query.shape[0]} ids")
    n = query.shape[0]
    one_thread_each("idmap", "lookup_ids", n,
                    (keys, vals, np.int64(size - 1), query, out, np.int64(n)))


class DeviceIdMap:
    """A device copy of an IdMap, brought up to date before each lookup."""

    def __init__(self, ids: IdMap) -> None:
        self.ids = ids
        ids.record_changes()
        self._generation: int | None = None
        self.keys = self.vals = None

    def _follow(self) -> None:
        ids = self.ids
        changed = ids.take_changes()
        host_keys, host_vals = ids.table
        if self._generation != ids.generation or self.keys.shape[0] != host_keys.shape[0]:
            self.keys, self.vals = cp.asarray(host_keys), cp.asarray(host_vals)
            self._generation = ids.generation
            return
        if changed.shape[0]:
            at = cp.asarray(changed)
            self.keys[at] = cp.asarray(host_keys[changed])
            self.vals[at] = cp.asarray(host_vals[changed])

    def lookup(self, query: cp.ndarray) -> cp.ndarray:
        """The slot of each external id (int64 on the device), -1 where unknown (int32)."""
        self._follow()
        query = cp.ascontiguousarray(query, dtype=np.int64)
        out = cp.empty(query.shape[0], dtype=np.int32)
        lookup_ids(self.keys, self.vals, query, out)
        return out
