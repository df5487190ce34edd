"""Typed launchers of the signature kernels (gpu/cuda/kernels/signature.cu): neighbour-label
counts and the candidate bits of every standing query, kept on the device.

Only import this module where `gpu.cuda.device.cuda_available()` is true.
"""
from __future__ import annotations

from typing import NamedTuple

import cupy as cp
import numpy as np

from gpu.cuda.loader import MAX_QUERY, check_array, one_thread_each


def count_edges(us: cp.ndarray, vs: cp.ndarray, delta: int, slot_of: cp.ndarray,
                counts: cp.ndarray, deg: cp.ndarray, directed: bool = False) -> None:
    """Launch gpu/cuda/kernels/signature.cu:count_edges: edges us[i] - vs[i] (`directed`:
    arcs us[i] -> vs[i], two fields a label) added (delta 1) or taken out (-1) in the
    neighbour-label counts [vertices, fields] and degrees."""
    for name, array in (("us", us), ("vs", vs), ("slot_of", slot_of), ("deg", deg)):
        check_array(name, array, np.int32, 1)
    check_array("counts", counts, np.int32, 2)
    if vs.shape[0] != us.shape[0] or delta not in (1, -1):
        raise ValueError(f"us and vs differ in length ({us.shape[0]}, {vs.shape[0]}) or "
                         f"delta {delta} is not 1 or -1")
    one_thread_each("signature", "count_edges", us.shape[0],
                    (us, vs, np.int32(us.shape[0]), np.int32(delta), slot_of, counts,
                     np.int32(counts.shape[1]), deg, np.int32(1 if directed else 0)))


class QueryTables(NamedTuple):
    """Every standing query's side of the candidate test, stacked for refresh."""
    cand_ptrs: cp.ndarray     # uint64 [Q]   address of each query's candidate bits
    q_n: cp.ndarray           # int32 [Q]
    q_label: cp.ndarray       # int32 [Q, MAX_QUERY]
    q_deg: cp.ndarray         # int32 [Q, MAX_QUERY]
    q_codes: cp.ndarray       # uint64 [Q, MAX_QUERY, words]


def refresh_candidates(vertices: cp.ndarray, counts: cp.ndarray, codes: cp.ndarray,
                       label: cp.ndarray, deg: cp.ndarray, alive: cp.ndarray,
                       queries: QueryTables) -> None:
    """Launch gpu/cuda/kernels/signature.cu:refresh: re-encode `vertices` from their counts
    and recompute their candidate bits in every query's table."""
    for name, array in (("vertices", vertices), ("label", label), ("deg", deg)):
        check_array(name, array, np.int32, 1)
    check_array("counts", counts, np.int32, 2)
    check_array("codes", codes, np.uint64, 2)
    check_array("alive", alive, np.bool_, 1)
    dtypes = {"cand_ptrs": np.uint64, "q_n": np.int32, "q_label": np.int32,
              "q_deg": np.int32, "q_codes": np.uint64}
    for name, array in zip(queries._fields, queries, strict=True):
        check_array(name, array, dtypes[name])
    words = codes.shape[1]
    if queries.q_codes.shape[1:] != (MAX_QUERY, words) or words * 32 < counts.shape[1]:
        raise ValueError(f"codes have {words} words for {counts.shape[1]} label slots, "
                         f"query codes {queries.q_codes.shape[1:]}")
    one_thread_each("signature", "refresh", vertices.shape[0],
                    (vertices, np.int32(vertices.shape[0]), counts,
                     np.int32(counts.shape[1]), codes, np.int32(words), label, deg, alive,
                     np.int32(queries.cand_ptrs.shape[0]), *queries), threads=128)
