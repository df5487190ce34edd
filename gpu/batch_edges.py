"""The edge records' part of batch validation (gpu/batch.py `normalize`), written once for
NumPy and CuPy: on the host, or on the device from the batch's edge records copied once.

`edge_changes` takes a batch's edge records (the vertex records are settled on the host
before: which vertices are added, with which slots, and which are deleted) and gives the
effective edge changes, or the record that rejects the batch.  Every check is computed
before any is read, so that on the device the checks are read back together; they are
then raised in `normalize`'s order (self-loop, missing endpoint, an insert touching a deleted
vertex, a negative insert label, an edge inserted twice with different labels), each
naming its first record.  The effects follow the same set semantics as before: inserts
and deletes of one edge cancel, an existing edge inserted or a missing one deleted is
ignored, a delete names its edge when its label is omitted or the stored one.  On CuPy
every `flatnonzero`, `unique`, boolean mask and `any()` also waits for the device to learn
a size (about ten waits a batch, on the array's stream only): keeping the masks
uncompacted to the end would remove most of them.  The results are sorted by edge
(u << 32 | v), so both array modules give the same arrays.

`EdgeLookups` is what the graph answers: slots of external ids and stored edge labels,
in the caller's array module (host: the vertex table and the graph; device: the id map
mirrored on the device and the packed memory array).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from gpu.io.records import NO_LABEL

# Indices into the checks read back at once (`Rejection.check`).
LOOP, MISSING, DYING_INSERT, NEGATIVE_LABEL, CONFLICT = range(5)


class EdgeLookups(Protocol):
    def slots(self, ids):
        """The slot of each external id (int32 in the same array module), -1 if unknown."""

    def stored(self, us, vs):
        """The stored label of each edge us-vs (slots, u < v, or arcs us -> vs; -1 where
        absent or where an endpoint is not yet born), int32."""


@dataclass
class Rejection:
    check: int          # LOOP .. CONFLICT
    record: int         # index among the edge records
    end: int = 0        # MISSING: 0 when the record's first endpoint is the missing one


@dataclass
class EdgeArrays:
    """Effective edge changes (int32 slots and labels, sorted by edge) in one array
    module: on CuPy the device copy of an EdgeChanges' host arrays, entry for entry."""
    delete_u: object
    delete_v: object
    delete_labels: object
    insert_u: object
    insert_v: object
    insert_labels: object


@dataclass
class EdgeChanges:
    """Effective edge changes as host arrays (slots, u < v or arcs u -> v, sorted by
    edge), and the records ignored; `on_device`: the same arrays where they were made on
    the device (so the graph update and the search need not upload them again)."""
    delete_u: np.ndarray
    delete_v: np.ndarray
    delete_labels: np.ndarray
    insert_u: np.ndarray
    insert_v: np.ndarray
    insert_labels: np.ndarray
    ignored_inserts: int
    ignored_deletes: int
    on_device: EdgeArrays | None = None


def first_rejection(found, n: int) -> Rejection | None:
    """The Rejection the checks' values `found` (LOOP .. CONFLICT: each the first failing
    record, MISSING twice it plus the end, or the bound n, 2n where none fails) name
    first, in `normalize`'s order; None when every check passed."""
    for check in (LOOP, MISSING, DYING_INSERT, NEGATIVE_LABEL, CONFLICT):
        bound = 2 * n if check == MISSING else n
        if found[check] < bound:
            if check == MISSING:
                return Rejection(check, found[check] // 2, found[check] % 2)
            return Rejection(check, found[check])
    return None


def _stable_argsort(xp, keys):
    # CuPy's argsort is always stable and takes no other kind.
    return np.argsort(keys, kind="stable") if xp is np else xp.argsort(keys)


def _first(xp, mask, n: int):
    """The first index where `mask` holds, or n (a device scalar on CuPy: no read-back)."""
    return xp.where(mask, xp.arange(mask.shape[0]), n).min() if mask.shape[0] else \
        xp.asarray(n)


def distinct(xp, keys, values):
    """From one stable sort: the distinct keys (ascending), the index of each one's first
    record, and the first record (in record order) whose key appeared earlier with another
    value, or len(keys) (a device scalar on CuPy)."""
    n = keys.shape[0]
    order = _stable_argsort(xp, keys)
    k, v = keys[order], values[order]
    head = xp.ones(n, dtype=bool)
    if n > 1:
        head[1:] = k[1:] != k[:-1]
    starts = xp.flatnonzero(head)
    run = xp.cumsum(head) - 1            # each sorted record's run (its key's index)
    first_value = v[starts][run]
    bad = xp.where(v != first_value, order, n)
    return k[starts], order[starts], (bad.min() if n else xp.asarray(0))


def edge_changes(xp, lookups: EdgeLookups, a, b, labels, inserting, add_ids, add_slots,
                 del_slots, directed: bool = False, inserts: int | None = None
                 ) -> EdgeChanges | Rejection:
    """The effective edge changes of the edge records (a, b, labels, inserting: arrays of
    `xp`, one entry per record, in record order), given the batch's new vertices (add_ids
    ascending with their add_slots) and deleted vertex slots (`xp` arrays); or the
    Rejection of the batch.  `directed`: a record is the arc a -> b, keyed as it is.
    `inserts`: how many records insert, where the caller knows (a batch of one kind then
    skips the other kind's steps: on CuPy each is a launch or a wait)."""
    n = a.shape[0]
    ends = xp.concatenate([a, b])
    slots = lookups.slots(ends)
    if add_ids.shape[0]:
        pos = xp.minimum(xp.searchsorted(add_ids, ends), add_ids.shape[0] - 1)
        is_new = (slots < 0) & (add_ids[pos] == ends)
        slots = xp.where(is_new, add_slots[pos], slots)
    su, sv = slots[:n], slots[n:]
    dying = xp.zeros(n, dtype=bool)
    if del_slots.shape[0]:
        dying = xp.isin(su, del_slots) | xp.isin(sv, del_slots)
    if directed:
        lo, hi = su.astype(np.int64), sv.astype(np.int64)
    else:
        lo = xp.minimum(su, sv).astype(np.int64)
        hi = xp.maximum(su, sv).astype(np.int64)
    key = lo << 32 | hi
    no_index = xp.zeros(0, dtype=np.int64)
    if inserts == n:
        ins = xp.arange(n)
    elif inserts == 0:
        ins = no_index
    else:
        ins = xp.flatnonzero(inserting)
    if ins.shape[0]:
        ins_keys, first, conflict = distinct(xp, key[ins], labels[ins])
    else:
        ins_keys, first, conflict = no_index, no_index, xp.asarray(0)
    # The earliest record missing an endpoint: its first end before its second.
    missing = xp.where(slots < 0, (xp.arange(2 * n) % n) * 2 + xp.arange(2 * n) // n, 2 * n)
    checks = xp.stack([
        _first(xp, a == b, n),
        missing.min() if n else xp.asarray(0),
        _first(xp, dying & inserting, n),
        _first(xp, inserting & (labels < 0), n),
        xp.where(conflict < ins.shape[0], ins[xp.minimum(conflict, max(ins.shape[0] - 1, 0))]
                 if ins.shape[0] else 0, n),
    ]).astype(np.int64)
    rejection = first_rejection(checks.tolist(), n)     # on CuPy one read-back
    if rejection is not None:
        return rejection

    if inserts == n:
        dels = no_index
    elif inserts == 0 and not del_slots.shape[0]:
        dels = xp.arange(n)
    else:
        dels = xp.flatnonzero(~inserting & ~dying)
    ignored_deletes = dying.sum()
    ignored_inserts = xp.asarray(0)
    # Inserts and deletes of one edge cancel.  (isin sorts; most batches only insert or
    # only delete.)
    if ins.shape[0] and dels.shape[0]:
        drop_i = xp.isin(key[ins], key[dels])
        if bool(drop_i.any()):
            drop_d = xp.isin(key[dels], key[ins])
            ignored_inserts = ignored_inserts + drop_i.sum()
            ignored_deletes = ignored_deletes + drop_d.sum()
            ins, dels = ins[~drop_i], dels[~drop_d]
            ins_keys, first = xp.unique(key[ins], return_index=True)
    ignored_inserts = ignored_inserts + (ins.shape[0] - ins_keys.shape[0])
    ins_labels = labels[ins][first].astype(np.int32)
    # The inserted and the deleted edges looked up together (one read of the graph).
    looked_up = xp.concatenate([ins_keys, key[dels]])
    stored = lookups.stored((looked_up >> 32).astype(np.int32),
                            (looked_up & 0xFFFFFFFF).astype(np.int32))
    exists = stored[:ins_keys.shape[0]] >= 0
    ignored_inserts = ignored_inserts + exists.sum()
    ins_keys, ins_labels = ins_keys[~exists], ins_labels[~exists]
    # A delete names the edge when its label is omitted or equals the stored one; as the
    # batch is a set, an edge goes when any of its delete records names it.
    stored = stored[exists.shape[0]:]
    if dels.shape[0]:
        dl_all = labels[dels]
        names = (stored >= 0) & ((dl_all == NO_LABEL) | (dl_all == stored))
        del_keys, first_del = xp.unique(key[dels][names], return_index=True)
        del_labels = stored[names][first_del].astype(np.int32)
    else:
        del_keys, del_labels = no_index, xp.zeros(0, dtype=np.int32)
    ignored_deletes = ignored_deletes + (dels.shape[0] - del_keys.shape[0])
    # One read-back of everything the host needs, as int32 (slots below 2^31, labels
    # int32, counts at most the records); on CuPy its parts stay on the device as well.
    m_ins, m_del = ins_keys.shape[0], del_keys.shape[0]
    packed = xp.concatenate([
        (ins_keys >> 32), ins_keys & 0xFFFFFFFF, ins_labels.astype(np.int64),
        (del_keys >> 32), del_keys & 0xFFFFFFFF, del_labels.astype(np.int64),
        xp.stack([xp.asarray(ignored_inserts), xp.asarray(ignored_deletes)]).astype(np.int64)]
    ).astype(np.int32)
    bounds = np.cumsum([m_ins, m_ins, m_ins, m_del, m_del, m_del])
    iu, iv, il, du, dv, dl, counts = np.split(packed.get() if xp is not np else packed,
                                              bounds)
    on_device = None
    if xp is not np:
        d_iu, d_iv, d_il, d_du, d_dv, d_dl, _ = (packed[lo:hi] for lo, hi in zip(
            [0, *bounds], [*bounds, packed.shape[0]], strict=True))
        on_device = EdgeArrays(delete_u=d_du, delete_v=d_dv, delete_labels=d_dl,
                               insert_u=d_iu, insert_v=d_iv, insert_labels=d_il)
    return EdgeChanges(delete_u=du, delete_v=dv, delete_labels=dl, insert_u=iu,
                       insert_v=iv, insert_labels=il, ignored_inserts=int(counts[0]),
                       ignored_deletes=int(counts[1]), on_device=on_device)
