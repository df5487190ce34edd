"""A large batch's edge records validated and settled on the device (issue 20, item 2):
the records copied once, their endpoints looked up in the device's copy of the id map
(gpu/cuda/id_mirror.py), and gpu/batch_edges.py's checks and set semantics run there with
CuPy, the stored labels read from the packed memory array; the checks read back together,
the effective changes in one copy (with the waits for sizes gpu/batch_edges.py lists).

A batch with no vertex records (edges inserted, deleted, or both: a bulk load's, a
stream's) is settled by gpu/cuda/kernels/prep.cu instead: four kernels around a stable
sort and the array's key lookup, the checks kept on the device and read back with the
changes, one wait in all (the generic path above is ~130 CuPy launches and five waits
for a GH 10% batch, ~4 ms of host time for 0.3 ms of GPU work); the generic path stays
for batches that add or delete vertices.

`normalize` (gpu/batch.py) hands a batch here when it has at least
`EngineConfig.device_prep_records` edge records (a batch that only inserts, or only
deletes, edges between existing vertices and fits `device_batch_group_edges` goes to a
batch group instead, validated on the host and looked up with its group); smaller ones
stay on the host, where a few records cost less than the launches.  Only for the `pma`
layout with its read view
(the label index of every vertex slot is kept on the device there); a directed graph's
records are arcs, keyed as they are.  Importing this
module needs CuPy; `gpu.cuda.device` decides whether to.
"""
from __future__ import annotations

import cupy as cp
import numpy as np

from gpu.batch_edges import (MISSING, EdgeArrays, EdgeChanges, Rejection,
                             edge_changes, first_rejection)
from gpu.cuda import prep_launchers
from gpu.cuda.id_mirror import DeviceIdMap
from gpu.cuda.loader import read_back, upload_together


class _DeviceLookups:
    """gpu/batch_edges.py's EdgeLookups, answered on the device."""

    def __init__(self, prep: DevicePrep, graph) -> None:
        self.prep, self.graph = prep, graph

    def slots(self, ids: cp.ndarray) -> cp.ndarray:
        return self.prep.id_map(self.graph).lookup(ids)

    def stored(self, us: cp.ndarray, vs: cp.ndarray) -> cp.ndarray:
        return self.prep.pma_graph.stored_labels_on_device(us, vs, self.graph.num_slots)


class DevicePrep:
    """Settles batches' edge records on the device (module docstring)."""

    def __init__(self, pma_graph, min_records: int) -> None:
        self.pma_graph = pma_graph          # a PmaGraph with its read view
        self.min_records = min_records
        self._id_map: DeviceIdMap | None = None

    def id_map(self, graph) -> DeviceIdMap:
        if self._id_map is None or self._id_map.ids is not graph.ids:
            self._id_map = DeviceIdMap(graph.ids)
        return self._id_map

    def edge_changes(self, graph, host: tuple, inserts: int | None = None
                     ) -> EdgeChanges | Rejection:
        """gpu/batch_edges.py edge_changes of the host arrays `host` (a, b, labels,
        inserting, add_ids, add_slots, del_slots; `inserts` records insert), copied in one
        upload.  On the array's stream (gpu/cuda/array_stream.py): the lookups read the
        array, and the read-backs wait for this work only."""
        if not len(host[4]) and not len(host[6]):       # no vertex records
            return self.edge_records(graph, *host[:4])
        with self.pma_graph.streams.changing():
            x = upload_together(*(np.asarray(p, dtype=np.int64) for p in host))
            return edge_changes(cp, _DeviceLookups(self, graph), x[0], x[1],
                                x[2].astype(np.int32), x[3] == 1, x[4], x[5], x[6],
                                directed=graph.directed, inserts=inserts)

    def edge_records(self, graph, a, b, labels, inserting) -> EdgeChanges | Rejection:
        """edge_changes of edge records (external ids a, b, labels and the inserting flags,
        host arrays) between vertices that exist before the batch, settled by
        gpu/cuda/kernels/prep.cu (module docstring)."""
        n = len(a)
        bounds = np.full(prep_launchers.CHECKS, n, dtype=np.int64)
        bounds[MISSING] = 2 * n
        with self.pma_graph.streams.changing():
            d_a, d_b, checks, d_labels, d_ins = upload_together(
                np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64), bounds,
                np.asarray(labels, dtype=np.int32), np.asarray(inserting, dtype=np.int32))
            ids = self.id_map(graph)
            key = cp.empty(n, dtype=np.uint64)
            prep_launchers.record_keys(d_a, d_b, ids.lookup(d_a), ids.lookup(d_b), d_labels,
                                       d_ins, key, checks, graph.directed)
            order = cp.argsort(key)         # stable: a run's records in record order
            sorted_keys = key[order]
            array_key = cp.empty(n, dtype=np.uint64)
            pma = self.pma_graph
            prep_launchers.settle_runs(sorted_keys, order, d_labels, d_ins, pma.slot_labels,
                                       pma.vertex_bits, array_key, checks, graph.directed)
            stored = pma.pma.lookup(array_key, values=True)[1]
            keep_ins, keep_del = cp.empty(n, dtype=np.int32), cp.empty(n, dtype=np.int32)
            prep_launchers.keep_changes(sorted_keys, order, d_labels, d_ins, array_key, stored,
                                        keep_ins, keep_del)
            out = cp.empty(6 * n + 2 + prep_launchers.CHECKS, dtype=np.int32)
            prep_launchers.write_changes(sorted_keys, order, d_labels, stored, keep_ins,
                                         keep_del, cp.cumsum(keep_ins, dtype=np.int32),
                                         cp.cumsum(keep_del, dtype=np.int32), checks, out)
            host = read_back(out)           # the batch's one wait
        rejection = first_rejection(host[6 * n + 2:].tolist(), n)
        if rejection is not None:
            return rejection
        kept = [int(host[6 * n]), int(host[6 * n + 1])]
        # Parts: inserted u, v, label at 0, n, 2n; deleted at 3n, 4n, 5n.
        on_host = [host[i * n:i * n + kept[i // 3]] for i in range(6)]
        on_device = [out[i * n:i * n + kept[i // 3]] for i in range(6)]
        inserts = int(np.count_nonzero(inserting))
        return EdgeChanges(*on_host[3:], *on_host[:3], ignored_inserts=inserts - kept[0],
                           ignored_deletes=n - inserts - kept[1],
                           on_device=EdgeArrays(*on_device[3:], *on_device[:3]))
