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
    """What a batch really changes, in internal slots (edges as u < v)."""
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


def _distinct(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """From one stable sort: the distinct keys (ascending), the index of each one's first
    record, and the index of the first record (in record order) whose key appeared
    earlier with another value, or -1."""
    order = np.argsort(keys, kind="stable")
    k, v = keys[order], values[order]
    starts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]]) if len(k) else order
    first_value = np.repeat(v[starts], np.diff(np.r_[starts, len(k)]))
    bad = order[v != first_value]
    return k[starts], order[starts], int(bad.min()) if len(bad) else -1


def _first_duplicate_conflict(keys: np.ndarray, values: np.ndarray) -> int:
    """Index of the first record (in record order) whose key appeared earlier with another
    value, or -1."""
    if len(keys) < 2:
        return -1
    return _distinct(keys, values)[2]


def normalize(stream: UpdateStream, graph) -> EffectiveBatch:
    """Validate `stream` against `graph` and compute its effective changes."""
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

    # ---- edge endpoints -------------------------------------------------
    ei = np.flatnonzero((kind == INSERT_EDGE) | (kind == DELETE_EDGE))
    loops = ei[a[ei] == b[ei]]
    if len(loops):
        reject(loops[0], f"edge ({a[loops[0]]}, {b[loops[0]]}) is a self-loop")
    ends = np.concatenate([a[ei], b[ei]])
    slots = graph.ids.lookup(ends)
    if len(add_ids):
        pos = np.searchsorted(add_ids, ends)
        pos = np.minimum(pos, len(add_ids) - 1)
        is_new = (slots < 0) & (add_ids[pos] == ends)
        slots[is_new] = add_slots[pos[is_new]]
    missing = np.flatnonzero(slots < 0)
    if len(missing):
        first = missing[np.argmin(missing % len(ei))]   # earliest record, not earliest end
        i = ei[first % len(ei)]
        reject(i, f"edge ({a[i]}, {b[i]}): vertex {ends[first]} does not exist and is "
                  f"not added in this batch")
    su, sv = slots[: len(ei)], slots[len(ei):]
    dying = np.zeros(len(ei), dtype=bool)
    if len(del_slots):
        dying = np.isin(su, del_slots) | np.isin(sv, del_slots)
    is_insert = kind[ei] == INSERT_EDGE
    dying_insert = np.flatnonzero(dying & is_insert)
    if len(dying_insert):
        i = ei[dying_insert[0]]
        reject(i, f"edge ({a[i]}, {b[i]}) touches a vertex deleted in this batch")

    lo = np.minimum(su, sv).astype(np.int64)
    hi = np.maximum(su, sv).astype(np.int64)
    key = lo << 32 | hi
    lab = label[ei]

    # ---- inserts ---------------------------------------------------------
    ins = np.flatnonzero(is_insert)
    # Stored edge labels are never negative (the device graph marks ranks with them).
    negative = ins[lab[ins] < 0]
    if len(negative):
        i = ei[negative[0]]
        reject(i, f"edge ({a[i]}, {b[i]}) is inserted with label {label[i]}; edge labels "
                  f"must be >= 0")
    # One sort finds both conflicting duplicates and the distinct inserts (sorted again
    # below only when some inserts cancel against deletes).
    ins_keys, first, bad = _distinct(key[ins], lab[ins])
    if bad >= 0:
        i = ei[ins[bad]]
        reject(i, f"edge ({a[i]}, {b[i]}) is inserted twice with different labels")
    dels = np.flatnonzero(~is_insert & ~dying)
    ignored["edges_deleted"] += int(dying.sum())
    # Inserts and deletes of one edge cancel.  (np.isin sorts; np.intersect1d's unique
    # hashes, 0.9 s for a million keys, and most batches only insert or only delete.)
    drop_i = np.isin(key[ins], key[dels]) if len(ins) and len(dels) else None
    if drop_i is not None and drop_i.any():
        drop_d = np.isin(key[dels], key[ins])
        ignored["edges_inserted"] += int(drop_i.sum())
        ignored["edges_deleted"] += int(drop_d.sum())
        ins, dels = ins[~drop_i], dels[~drop_d]
        ins_keys, first = np.unique(key[ins], return_index=True)

    ignored["edges_inserted"] += len(ins) - len(ins_keys)
    ins_labels = lab[ins][first].astype(np.int32)
    # The inserted and the deleted edges looked up together (one read of a device graph).
    looked_up = np.concatenate([ins_keys, key[dels]])
    stored = _stored_labels(graph, (looked_up >> 32).astype(np.int32),
                            (looked_up & 0xFFFFFFFF).astype(np.int32))
    iu = (ins_keys >> 32).astype(np.int32)
    iv = (ins_keys & 0xFFFFFFFF).astype(np.int32)
    exists = stored[:len(ins_keys)] >= 0
    ignored["edges_inserted"] += int(exists.sum())
    iu, iv, ins_labels = iu[~exists], iv[~exists], ins_labels[~exists]

    # ---- deletes ---------------------------------------------------------
    # A delete names the edge when its label is omitted or equals the stored one; as the
    # batch is a set, an edge goes when any of its delete records names it.
    stored = stored[len(ins_keys):]
    names = (stored >= 0) & ((lab[dels] == NO_LABEL) | (lab[dels] == stored))
    del_keys, first = np.unique(key[dels][names], return_index=True)
    ignored["edges_deleted"] += len(dels) - len(del_keys)
    du = (del_keys >> 32).astype(np.int32)
    dv = (del_keys & 0xFFFFFFFF).astype(np.int32)
    dl = stored[names][first].astype(np.int32)
    if len(del_slots):
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
                          applied=applied, ignored=ignored)


_NO_INT32 = np.empty(0, dtype=np.int32)


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


def _stored_labels(graph, us: np.ndarray, vs: np.ndarray) -> np.ndarray:
    """The stored label of each edge; -1 when absent or when an endpoint is still
    unborn."""
    out = np.full(len(us), -1, dtype=np.int32)
    born = (us < graph.num_slots) & (vs < graph.num_slots)
    if born.any():
        out[born] = graph.edge_labels(us[born], vs[born])
    return out
