"""Typed launchers of the batch-preparation kernels (gpu/cuda/kernels/prep.cu): a one-kind
batch's edge records checked, keyed, settled as a set and written out in key order
(gpu/cuda/batch_prep.py drives them around a sort and the array's key lookup).

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


def record_keys(a: cp.ndarray, b: cp.ndarray, slot_a: cp.ndarray, slot_b: cp.ndarray,
                labels: cp.ndarray, inserting: bool, key: cp.ndarray,
                checks: cp.ndarray) -> None:
    """Launch prep.cu:record_keys: each record's checks folded into `checks` (int64
    [CHECKS], each the first failing record so far) and its edge key into `key`."""
    n = a.shape[0]
    _check_records(n, (("a", np.int64, a), ("b", np.int64, b), ("slot_a", np.int32, slot_a),
                       ("slot_b", np.int32, slot_b), ("labels", np.int32, labels),
                       ("key", np.uint64, key)))
    check_array("checks", checks, np.int64, 1)
    if checks.shape[0] != CHECKS:
        raise ValueError(f"checks holds {checks.shape[0]} entries, not {CHECKS}")
    one_thread_each("prep", "record_keys", n,
                    (a, b, slot_a, slot_b, labels, np.int64(n), np.int32(inserting), key, checks))


def settle_runs(sorted_keys: cp.ndarray, order: cp.ndarray, labels: cp.ndarray,
                inserting: bool, slot_labels: cp.ndarray, vertex_bits: int,
                array_key: cp.ndarray, checks: cp.ndarray) -> None:
    """Launch prep.cu:settle_runs over the sorted keys (`order`: the stable argsort that
    sorted them): the array key of each run's first record, conflicts into `checks`."""
    n = sorted_keys.shape[0]
    _check_records(n, (("sorted_keys", np.uint64, sorted_keys), ("order", np.int64, order),
                       ("labels", np.int32, labels), ("array_key", np.uint64, array_key)))
    check_array("slot_labels", slot_labels, np.int32, 1)
    check_array("checks", checks, np.int64, 1)
    one_thread_each("prep", "settle_runs", n,
                    (sorted_keys, order, labels, np.int64(n), np.int32(inserting),
                     slot_labels, np.int32(vertex_bits), array_key, checks))


def keep_changes(sorted_keys: cp.ndarray, order: cp.ndarray, labels: cp.ndarray,
                 array_key: cp.ndarray, stored: cp.ndarray, inserting: bool,
                 keep: cp.ndarray) -> None:
    """Launch prep.cu:keep_changes: keep[p] = 1 where sorted record p's run changes its
    edge, given each run's stored label (`stored`, -1 where absent)."""
    n = sorted_keys.shape[0]
    _check_records(n, (("sorted_keys", np.uint64, sorted_keys), ("order", np.int64, order),
                       ("labels", np.int32, labels), ("array_key", np.uint64, array_key),
                       ("stored", np.int32, stored), ("keep", np.int32, keep)))
    one_thread_each("prep", "keep_changes", n,
                    (sorted_keys, order, labels, array_key, stored, np.int64(n),
                     np.int32(inserting), keep))


def write_changes(sorted_keys: cp.ndarray, order: cp.ndarray, labels: cp.ndarray,
                  stored: cp.ndarray, keep: cp.ndarray, place: cp.ndarray, inserting: bool,
                  checks: cp.ndarray, out: cp.ndarray) -> None:
    """Launch prep.cu:write_changes: the kept edges (u, v, label; `place` the inclusive
    prefix sum of `keep`) into out[:n], out[n:2n], out[2n:3n], then the count kept and
    the checks (out: int32 [3n + 1 + CHECKS])."""
    n = sorted_keys.shape[0]
    _check_records(n, (("sorted_keys", np.uint64, sorted_keys), ("order", np.int64, order),
                       ("labels", np.int32, labels), ("stored", np.int32, stored),
                       ("keep", np.int32, keep), ("place", np.int32, place)))
    check_array("checks", checks, np.int64, 1)
    check_array("out", out, np.int32, 1)
    if out.shape[0] != 3 * n + 1 + CHECKS:
        raise ValueError(f"out holds {out.shape[0]} entries, not {3 * n + 1 + CHECKS}")
    one_thread_each("prep", "write_changes", n,
                    (sorted_keys, order, labels, stored, keep, place, np.int64(n),
                     np.int32(inserting), checks, out))
