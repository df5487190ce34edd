"""Typed launchers of the batch-preparation kernels (gpu/cuda/kernels/prep.cu): a batch's
edge records (no vertex records) checked, keyed, settled as a set and written out in key
order (gpu/cuda/batch_prep.py drives them around a sort and the array's key lookup).

Only import this module where `gpu.cuda.device.cuda_available()` is true.
"""
from __future__ import annotations

import cupy as cp
import numpy as np

from gpu.cuda.loader import check_array, one_thread_each

CHECKS = 5          # gpu/batch_edges.py's LOOP .. CONFLICT, in that order


def _check_records(n: int, arrays) -> None:
    """check_array every (name, dtype, array) as one-dimensional of n entries."""
    for name, dtype, array in arrays:
        check_array(name, array, dtype, 1)
        if array.shape[0] != n:
            raise ValueError(f"{name} holds {array.shape[0]} entries for {n} records")


def _check_checks(checks: cp.ndarray) -> None:
    check_array("checks", checks, np.int64, 1)
    if checks.shape[0] != CHECKS:
        raise ValueError(f"checks holds {checks.shape[0]} entries, not {CHECKS}")


def record_keys(a: cp.ndarray, b: cp.ndarray, slot_a: cp.ndarray, slot_b: cp.ndarray,
                labels: cp.ndarray, inserting: cp.ndarray, key: cp.ndarray,
                checks: cp.ndarray, directed: bool = False) -> None:
    """Launch prep.cu:record_keys: each record's checks folded into `checks` (int64
    [CHECKS], each the first failing record so far) and its edge key into `key` (the
    arc's where `directed`); `inserting`: 1 for a record that inserts, 0 for one that
    deletes (int32)."""
    n = a.shape[0]
    _check_records(n, (("a", np.int64, a), ("b", np.int64, b), ("slot_a", np.int32, slot_a),
                       ("slot_b", np.int32, slot_b), ("labels", np.int32, labels),
                       ("inserting", np.int32, inserting), ("key", np.uint64, key)))
    _check_checks(checks)
    one_thread_each("prep", "record_keys", n,
                    (a, b, slot_a, slot_b, labels, inserting, np.int64(n),
                     np.int32(1 if directed else 0), key, checks))


def settle_runs(sorted_keys: cp.ndarray, order: cp.ndarray, labels: cp.ndarray,
                inserting: cp.ndarray, slot_labels: cp.ndarray, vertex_bits: int,
                array_key: cp.ndarray, checks: cp.ndarray, directed: bool = False) -> None:
    """Launch prep.cu:settle_runs over the sorted keys (`order`: the stable argsort that
    sorted them): the array key of each one-kind run's first record (`directed`: its
    arc's entry at the tail), conflicts into `checks`."""
    n = sorted_keys.shape[0]
    _check_records(n, (("sorted_keys", np.uint64, sorted_keys), ("order", np.int64, order),
                       ("labels", np.int32, labels), ("inserting", np.int32, inserting),
                       ("array_key", np.uint64, array_key)))
    check_array("slot_labels", slot_labels, np.int32, 1)
    _check_checks(checks)
    one_thread_each("prep", "settle_runs", n,
                    (sorted_keys, order, labels, inserting, np.int64(n), slot_labels,
                     np.int32(vertex_bits), np.int32(1 if directed else 0), array_key,
                     checks))


def keep_changes(sorted_keys: cp.ndarray, order: cp.ndarray, labels: cp.ndarray,
                 inserting: cp.ndarray, array_key: cp.ndarray, stored: cp.ndarray,
                 keep_ins: cp.ndarray, keep_del: cp.ndarray) -> None:
    """Launch prep.cu:keep_changes: keep_ins[p] (keep_del[p]) = 1 where sorted record p's
    run inserts (deletes) its edge, given each run's stored label (`stored`, -1 where
    absent)."""
    n = sorted_keys.shape[0]
    _check_records(n, (("sorted_keys", np.uint64, sorted_keys), ("order", np.int64, order),
                       ("labels", np.int32, labels), ("inserting", np.int32, inserting),
                       ("array_key", np.uint64, array_key), ("stored", np.int32, stored),
                       ("keep_ins", np.int32, keep_ins), ("keep_del", np.int32, keep_del)))
    one_thread_each("prep", "keep_changes", n,
                    (sorted_keys, order, labels, inserting, array_key, stored, np.int64(n),
                     keep_ins, keep_del))


def write_changes(sorted_keys: cp.ndarray, order: cp.ndarray, labels: cp.ndarray,
                  stored: cp.ndarray, keep_ins: cp.ndarray, keep_del: cp.ndarray,
                  place_ins: cp.ndarray, place_del: cp.ndarray, checks: cp.ndarray,
                  out: cp.ndarray) -> None:
    """Launch prep.cu:write_changes: the kept edges (u, v, label; `place_*` the inclusive
    prefix sums of `keep_*`) into out: inserted at [0, 3n), deleted at [3n, 6n), each
    as u, v, label parts of n; then the two counts kept and the checks
    (out: int32 [6n + 2 + CHECKS])."""
    n = sorted_keys.shape[0]
    _check_records(n, (("sorted_keys", np.uint64, sorted_keys), ("order", np.int64, order),
                       ("labels", np.int32, labels), ("stored", np.int32, stored),
                       ("keep_ins", np.int32, keep_ins), ("keep_del", np.int32, keep_del),
                       ("place_ins", np.int32, place_ins), ("place_del", np.int32, place_del)))
    _check_checks(checks)
    check_array("out", out, np.int32, 1)
    if out.shape[0] != 6 * n + 2 + CHECKS:
        raise ValueError(f"out holds {out.shape[0]} entries, not {6 * n + 2 + CHECKS}")
    one_thread_each("prep", "write_changes", n,
                    (sorted_keys, order, labels, stored, keep_ins, keep_del, place_ins,
                     place_del, np.int64(n), checks, out))
