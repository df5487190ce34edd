"""Turns a batch of update records into the set of effective changes, or rejects it.

GAMMA's batch semantics: a batch is applied as a set.  An insert and a delete
of the same edge cancel; inserting an existing edge or deleting a missing one
is a no-op counted in `ignored`; an edge whose endpoint does not exist after
the batch rejects the whole batch.  Deleting a vertex deletes its edges.
Validation reads the graph and never changes it, so a rejected batch leaves
everything as it was.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpu.batch_edges import (CONFLICT, DYING_INSERT, LOOP, MISSING, NEGATIVE_LABEL,
                             EdgeArrays, Rejection, distinct, edge_changes)
from gpu.io.records import (ADD_VERTEX, DELETE_EDGE, DELETE_VERTEX, INSERT_EDGE, NO_LABEL,
                            UpdateStream)

COUNT_KEYS = ("vertices_added", "vertices_deleted", "edges_inserted", "edges_deleted")


class BatchRejected(ValueError):
    """The batch is invalid; nothing was applied."""

    def __init__(self, source: str, line: int, reason: str) -> None:
        self.source, self.line, self.reason = source, int(line), reason
        super().__init__(f"{source}:{line}: {reason}" if line else f"{source}: {reason}")


def _counts() -> dict[str, int]:
    return dict.fromkeys(COUNT_KEYS, 0)


@dataclass
class EffectiveBatch:
    """What a batch really changes, in internal slots (edges as u < v; arcs u -> v in a
    directed graph)."""
    add_ids: np.ndarray          # int64 external ids of new vertices
    add_labels: np.ndarray       # int32
    add_slots: np.ndarray        # int32 slots they will get
    delete_slots: np.ndarray     # int32 existing vertices to delete
    delete_u: np.ndarray         # int32 edges to delete (explicit and incident to deleted vertices)
    delete_v: np.ndarray
    delete_labels: np.ndarray    # int32 labels of the deleted edges
    insert_u: np.ndarray         # int32 new edges
    insert_v: np.ndarray
    insert_labels: np.ndarray
    applied: dict[str, int] = field(default_factory=_counts)
    ignored: dict[str, int] = field(default_factory=_counts)
    # The edge arrays above as they were made on the device (gpu/cuda/batch_prep.py), entry
    # for entry: the device graph's update and the search read these instead of uploading.
    device: EdgeArrays | None = None


def _first_duplicate_conflict(keys: np.ndarray, values: np.ndarray) -> int:
    """Index of the first record (in record order) whose key appeared earlier with another
    value, or -1."""
    if len(keys) < 2:
        return -1
    bad = int(distinct(np, keys, values)[2])
    return bad if bad < len(keys) else -1


def normalize(stream: UpdateStream, graph, device=None) -> EffectiveBatch:
    """Validate `stream` against `graph` and compute its effective changes; with `device`
    (the CUDA executor's DevicePrep) the edge records of a batch with at least
    `device.min_records` of them are settled on the device (gpu/batch_edges.py)."""
    if len(stream) == 1:
        single = _single_edge(stream, graph)
        if single is not None:
            return single
    kind, a, b, label, line = stream.kind, stream.a, stream.b, stream.label, stream.line

    def reject(index: int, reason: str):
        raise BatchRejected(stream.source, int(line[index]), reason)

    applied, ignored = _counts(), _counts()

    # ---- vertices -----------------------------------------------------
    va = np.flatnonzero(kind == ADD_VERTEX)
    vd = np.flatnonzero(kind == DELETE_VERTEX)
    bad = _first_duplicate_conflict(a[va], label[va])
    if bad >= 0:
        i = va[bad]
        reject(i, f"vertex {a[i]} is added twice with different labels")
    both = np.intersect1d(a[va], a[vd])
    if len(both):
        i = va[np.flatnonzero(a[va] == both[0])[0]]
        reject(i, f"vertex {both[0]} is both added and deleted in one batch")

    add_ids, first = np.unique(a[va], return_index=True)
    add_labels = label[va][first].astype(np.int32)
    ignored["vertices_added"] += len(va) - len(add_ids)
    existing = graph.ids.lookup(add_ids)
    present = existing >= 0
    if present.any():
        clash = present & (graph.label[np.maximum(existing, 0)] != add_labels)
        if clash.any():
            vid = add_ids[np.flatnonzero(clash)[0]]
            i = va[np.flatnonzero(a[va] == vid)[0]]
            reject(i, f"vertex {vid} already exists with label "
                      f"{graph.label[graph.ids.lookup(np.array([vid]))[0]]}")
        ignored["vertices_added"] += int(present.sum())
    add_ids, add_labels = add_ids[~present], add_labels[~present]
    add_slots = graph.reserve_slots(len(add_ids))

    del_ids, first = np.unique(a[vd], return_index=True)
    del_labels = label[vd][first]
    ignored["vertices_deleted"] += len(vd) - len(del_ids)
    del_slots = graph.ids.lookup(del_ids)
    found = del_slots >= 0
    if found.any():
        # `-v id label` names the vertex it means; another label is a different (missing) vertex.
        wrong = found & (del_labels != NO_LABEL) & (graph.label[np.maximum(del_slots, 0)]
                                                    != del_labels)
        found &= ~wrong
    ignored["vertices_deleted"] += int((~found).sum())
    del_slots = del_slots[found].astype(np.int32)

    # ---- edges: on the host, or on the device (gpu/batch_edges.py) --------------------
    edge_records = (kind == INSERT_EDGE) | (kind == DELETE_EDGE)
    if edge_records.all():      # only edge records (most large batches): no gathers
        ei = np.arange(len(kind))
        host = (a, b, label, kind == INSERT_EDGE, add_ids, add_slots, del_slots)
    else:
        ei = np.flatnonzero(edge_records)
        host = (a[ei], b[ei], label[ei], kind[ei] == INSERT_EDGE, add_ids, add_slots,
                del_slots)
    inserts = int(np.count_nonzero(host[3]))
    if device is not None and len(ei) >= device.min_records:
        changes = device.edge_changes(graph, host, inserts)
    else:
        changes = edge_changes(np, _HostLookups(graph), *host, directed=graph.directed,
                               inserts=inserts)
    if isinstance(changes, Rejection):
        i = ei[changes.record]
        edge = f"edge ({a[i]}, {b[i]})"
        reject(i, {
            LOOP: f"{edge} is a self-loop",
            MISSING: f"{edge}: vertex {(a, b)[changes.end][i]} does not exist and is not "
                     f"added in this batch",
            DYING_INSERT: f"{edge} touches a vertex deleted in this batch",
            # Stored edge labels are never negative (the device graph marks ranks with them).
            NEGATIVE_LABEL: f"{edge} is inserted with label {label[i]}; edge labels must "
                            f"be >= 0",
            CONFLICT: f"{edge} is inserted twice with different labels"}[changes.check])
    ignored["edges_inserted"] += changes.ignored_inserts
    ignored["edges_deleted"] += changes.ignored_deletes
    iu, iv, ins_labels = changes.insert_u, changes.insert_v, changes.insert_labels
    du, dv, dl = changes.delete_u, changes.delete_v, changes.delete_labels
    on_device = changes.on_device
    if len(del_slots):
        on_device = None    # the deleted vertices' edges join on the host
        xu, xv, xl = graph.incident_edges(del_slots)
        du, dv, dl = np.concatenate([du, xu]), np.concatenate([dv, xv]), np.concatenate([dl, xl])
        k = du.astype(np.int64) << 32 | dv.astype(np.int64)
        _, first = np.unique(k, return_index=True)
        du, dv, dl = du[first], dv[first], dl[first]

    applied["vertices_added"] = len(add_ids)
    applied["vertices_deleted"] = len(del_slots)
    applied["edges_inserted"] = len(iu)
    applied["edges_deleted"] = len(du)
    return EffectiveBatch(add_ids=add_ids, add_labels=add_labels, add_slots=add_slots,
                          delete_slots=del_slots, delete_u=du, delete_v=dv, delete_labels=dl,
                          insert_u=iu, insert_v=iv, insert_labels=ins_labels,
                          applied=applied, ignored=ignored, device=on_device)


_NO_INT32 = np.empty(0, dtype=np.int32)


class _HostLookups:
    """What gpu/batch_edges.py asks of the graph, answered on the host."""

    def __init__(self, graph) -> None:
        self.graph = graph

    def slots(self, ids: np.ndarray) -> np.ndarray:
        return self.graph.ids.lookup(ids)

    def stored(self, us: np.ndarray, vs: np.ndarray) -> np.ndarray:
        return stored_labels(self.graph, us, vs)


def _single_edge(stream: UpdateStream, graph) -> EffectiveBatch | None:
    """normalize() of a one-record batch that inserts or deletes an edge between existing
    vertices, in scalar code (the general path spends ~0.1 ms of NumPy calls on it);
    None for anything else, which the general path handles (and rejects)."""
    kind = int(stream.kind[0])
    if kind != INSERT_EDGE and kind != DELETE_EDGE:
        return None
    su, sv, stored = graph.find_edge(stream.a[0], stream.b[0])
    if su < 0 or sv < 0 or su == sv:
        return None
    u, v = np.array([su], dtype=np.int32), np.array([sv], dtype=np.int32)
    applied, ignored = _counts(), _counts()
    label = np.array([stream.label[0]], dtype=np.int32)
    empty = _NO_INT32
    effective = {"add_ids": np.empty(0, dtype=np.int64), "add_labels": empty,
                 "add_slots": empty, "delete_slots": empty, "delete_u": empty,
                 "delete_v": empty, "delete_labels": empty, "insert_u": empty,
                 "insert_v": empty, "insert_labels": empty}
    if kind == INSERT_EDGE:
        if label[0] < 0:
            return None     # the general path rejects it
        if stored >= 0:
            ignored["edges_inserted"] = 1
        else:
            applied["edges_inserted"] = 1
            effective.update(insert_u=u, insert_v=v, insert_labels=label)
    else:
        stored = int(stored)
        if stored >= 0 and (label[0] == NO_LABEL or label[0] == stored):
            applied["edges_deleted"] = 1
            effective.update(delete_u=u, delete_v=v,
                             delete_labels=np.array([stored], dtype=np.int32))
        else:
            ignored["edges_deleted"] = 1
    return EffectiveBatch(**effective, applied=applied, ignored=ignored)


@dataclass
class PendingEdges:
    """A batch of edge records of one kind (all inserts or all deletes) between existing
    vertices, each edge once, that is valid whatever the graph's edges are: which of its
    records apply waits for the stored labels of its edges (`resolve`), so that the
    batches of a batch group are looked up together, in one read of the graph (one
    device round trip on CUDA instead of one per batch).  Edges as slots u < v (arcs
    u -> v in a directed graph), sorted."""
    inserting: bool
    u: np.ndarray               # int32
    v: np.ndarray               # int32
    labels: np.ndarray          # int32: the inserted labels, or a delete's (NO_LABEL: any)

    def __len__(self) -> int:
        return len(self.u)

    def keys(self) -> list[int]:
        """The edges as u << 32 | v (a batch group's test for shared edges)."""
        return ((self.u.astype(np.int64) << 32) | self.v).tolist()

    def resolve(self, stored: np.ndarray) -> EffectiveBatch:
        """The batch's effective changes given the stored label of each of its edges (-1:
        absent), as `normalize` makes them: an insert of an existing edge, or a delete of
        a missing one or naming another label, is ignored."""
        applied, ignored = _counts(), _counts()
        if self.inserting:
            new = stored < 0
            kind = "edges_inserted"
            effective = {"insert_u": self.u[new], "insert_v": self.v[new],
                         "insert_labels": self.labels[new]}
        else:
            new = (stored >= 0) & ((self.labels == NO_LABEL) | (self.labels == stored))
            kind = "edges_deleted"
            effective = {"delete_u": self.u[new], "delete_v": self.v[new],
                         "delete_labels": stored[new].astype(np.int32)}
        applied[kind] = int(new.sum())
        ignored[kind] = len(new) - applied[kind]
        empty = _NO_INT32
        parts = {"add_ids": np.empty(0, dtype=np.int64), "add_labels": empty,
                 "add_slots": empty, "delete_slots": empty, "delete_u": empty,
                 "delete_v": empty, "delete_labels": empty, "insert_u": empty,
                 "insert_v": empty, "insert_labels": empty}
        parts.update(effective)
        return EffectiveBatch(**parts, applied=applied, ignored=ignored)


def pending_edges(stream: UpdateStream, graph, limit: int) -> PendingEdges | None:
    """The batch as PendingEdges when it is one (at most `limit` records, every record an
    insert, or every one a delete, of a distinct edge between two distinct existing
    vertices, inserted labels >= 0); None for any other batch, which `normalize` takes
    (and rejects where it must).  Reads the vertex table only."""
    kind = stream.kind
    count = len(kind)
    if count == 0 or count > limit:
        return None
    first = int(kind[0])
    if first != INSERT_EDGE and first != DELETE_EDGE:
        return None
    if count > 1 and (kind != first).any():
        return None
    slots = graph.ids.lookup(np.concatenate([stream.a, stream.b]))
    su, sv = slots[:count], slots[count:]
    if (slots < 0).any() or (su == sv).any():
        return None
    labels = np.asarray(stream.label, dtype=np.int32)
    inserting = first == INSERT_EDGE
    if inserting and (labels < 0).any():
        return None
    u, v = (su, sv) if graph.directed else (np.minimum(su, sv), np.maximum(su, sv))
    if count > 1:
        key = (u.astype(np.int64) << 32) | v
        order = np.argsort(key)
        if (key[order][1:] == key[order][:-1]).any():
            return None     # an edge twice: normalize's rules for duplicates
        u, v, labels = u[order], v[order], labels[order]
    return PendingEdges(inserting, u, v, labels)


def stored_labels(graph, us: np.ndarray, vs: np.ndarray) -> np.ndarray:
    """The stored label of each edge; -1 when absent or when an endpoint is still
    unborn."""
    out = np.full(len(us), -1, dtype=np.int32)
    born = (us < graph.num_slots) & (vs < graph.num_slots)
    if born.any():
        out[born] = graph.edge_labels(us[born], vs[born])
    return out
