"""A large batch's edge records validated and settled on the device (issue 20, item 2):
the records copied once, their endpoints looked up in the device's copy of the id map
(gpu/cuda/id_mirror.py), and gpu/batch_edges.py's checks and set semantics run there with
CuPy, the stored labels read from the packed memory array; the checks read back together,
the effective changes in one copy (with the waits for sizes gpu/batch_edges.py lists).

`normalize` (gpu/batch.py) hands a batch here when it has at least
`EngineConfig.device_prep_records` edge records (a batch that only inserts, or only
deletes, edges between existing vertices and fits `device_batch_group_edges` goes to a
batch group instead, validated on the host and looked up with its group); smaller ones
stay on the host, where a few records cost less than the launches.  Only for the `pma`
layout with its read view
(the label index of every vertex slot is kept on the device there).  Importing this
module needs CuPy; `gpu.cuda.device` decides whether to.
"""
from __future__ import annotations

import cupy as cp
import numpy as np

from gpu.batch_edges import EdgeChanges, Rejection, edge_changes
from gpu.cuda.id_mirror import DeviceIdMap
from gpu.cuda.loader import upload_together


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
        with self.pma_graph.streams.changing():
            x = upload_together(*(np.asarray(p, dtype=np.int64) for p in host))
            return edge_changes(cp, _DeviceLookups(self, graph), x[0], x[1],
                                x[2].astype(np.int32), x[3] == 1, x[4], x[5], x[6],
                                inserts=inserts)
