"""Per-batch upkeep of every standing query's candidate bits and leaf counts, in one
compiled call per step instead of one call per query.

A batch's upkeep runs the same kernels for each standing query (gpu/plan/leaf_counts.py,
gpu/plan/signatures.py); for a one-edge batch the Python calls around them cost more than the
work.  `QueryArrays` keeps one tuple of arrays per standing query in a numba typed list,
rebuilt whenever one of them is replaced (a query added or removed, the vertex capacity
grown, the signature labels widened) or the kernels start or stop being interpreted
(gpu/cpu/interpreted.py); the kernels below walk that list.
"""
from __future__ import annotations

from collections.abc import Callable

import numba as nb
import numpy as np

from gpu import kernel_cache  # noqa: F401 -- stamps this module's kernels (see there)
from gpu.cpu.interpreted import kernel_list
from gpu.plan.leaf_counts import _cand_changed, _edge_contrib
from gpu.plan.signatures import _apply_edges, _candidates, _encode


@nb.njit(cache=True, nogil=True)
def leaf_edges(queries, us, vs, labels, sign):
    """LeafCounts.edges for every query: add (+1) or take out (-1) edges us-vs."""
    for q in range(len(queries)):
        cand, nc, leaf_q, leaf_elab, leaf_dir = queries[q][:5]
        _edge_contrib(nc, cand, leaf_q, leaf_elab, leaf_dir, us, vs, labels, sign)


@nb.njit(cache=True, nogil=True)
def refresh_candidates(queries, vertices, alive, label, deg, codes, start, nbr, nlab, elab):
    """For every query: recompute the candidate bits of `vertices` (their codes are
    already re-encoded) and follow the changes into the neighbours' leaf counts
    (SignatureTable.refresh, then LeafCounts.candidates_changed)."""
    old = np.empty(vertices.shape[0], dtype=np.uint32)
    new = np.empty(vertices.shape[0], dtype=np.uint32)
    for q in range(len(queries)):
        cand, nc, leaf_q, leaf_elab, leaf_dir, q_label, q_deg, q_codes = queries[q]
        for i in range(vertices.shape[0]):
            old[i] = cand[vertices[i]]
        _candidates(cand, vertices, alive, label, deg, codes, q_label, q_deg, q_codes)
        for i in range(vertices.shape[0]):
            new[i] = cand[vertices[i]]
        _cand_changed(nc, leaf_q, leaf_elab, leaf_dir, vertices, old, new, start, deg, nbr,
                      nlab, elab)


@nb.njit(cache=True, nogil=True)
def _signature_changes(counts, slot_of, codes, delete_u, delete_v, insert_u, insert_v,
                       vertices, directed):
    """SignatureTable.edges_changed for the deleted (-1) and inserted (+1) edges, then
    SignatureTable.encode of every vertex they touch and of `vertices`; returns those
    vertices, sorted and unique."""
    _apply_edges(counts, slot_of, delete_u, delete_v, np.int32(-1), directed)
    _apply_edges(counts, slot_of, insert_u, insert_v, np.int32(1), directed)
    touched = np.unique(np.concatenate((delete_u, delete_v, insert_u, insert_v, vertices)))
    _encode(counts, codes, touched)
    return touched


@nb.njit(cache=True, nogil=True)
def _batch_changes(queries, counts, slot_of, codes, delete_u, delete_v, insert_u, insert_v,
                   insert_labels, vertices, directed, alive, label, deg, start, nbr, nlab, elab):
    """_signature_changes, the inserted edges' leaf counts under the old candidate bits,
    then the bit changes of the touched vertices (refresh_candidates), in one call."""
    for q in range(len(queries)):
        cand, nc, leaf_q, leaf_elab, leaf_dir = queries[q][:5]
        _edge_contrib(nc, cand, leaf_q, leaf_elab, leaf_dir, insert_u, insert_v, insert_labels,
                      np.int32(1))
    touched = _signature_changes(counts, slot_of, codes, delete_u, delete_v, insert_u,
                                 insert_v, vertices, directed)
    refresh_candidates(queries, touched, alive, label, deg, codes, start, nbr, nlab, elab)
    return touched


def batch_changes(queries, signatures, graph, delete_u, delete_v, insert_u, insert_v,
                  insert_labels, vertices) -> np.ndarray:
    """Everything a batch changes outside the graph, once the graph holds the new edges:
    neighbour-label counts, codes, candidate bits and leaf counts (the inserted edges' under
    the old bits, then the bit changes), for every query at once.  `queries` is the
    upkeep QueryArrays list or None (no query standing); `vertices` are vertices added or
    deleted.  Returns the touched vertices (int32, sorted, unique): the deleted and
    inserted edges' endpoints and `vertices`."""
    sig = signatures
    if queries is None:
        return _signature_changes(sig.counts, sig.slot_of, sig.codes, delete_u, delete_v,
                                  insert_u, insert_v, vertices, sig.directed)
    return _batch_changes(queries, sig.counts, sig.slot_of, sig.codes, delete_u, delete_v,
                          insert_u, insert_v, insert_labels, vertices, sig.directed, graph.alive,
                          graph.label, graph.deg, graph.start, graph.nbr, graph.nlab, graph.elab)


class QueryArrays:
    """A typed list of one tuple of arrays per query, rebuilt only when an array changes:
    (cand, nc, leaf_q, leaf_elab, leaf_dir, q_label, q_deg, q_codes) for the kernels above, or
    executor.small_query's tuples for the small-batch search.

    The owner names the state of its arrays with a key that changes whenever one of them
    may have been replaced (a query added or removed, the vertex capacity grown): a batch
    then costs one tuple comparison instead of a key of every array's id (~70 of them for
    ten queries, built several times a batch).  `check` compares the list held with fresh
    parts (tests)."""

    def __init__(self) -> None:
        self._key: object = None
        self._parts: list[tuple] = []
        self._list = None

    def get(self, key, parts: Callable[[], list[tuple]]):
        """The typed list for `parts()` (one tuple per query, in order), None when empty;
        `parts` is called only when `key` differs from the last call's."""
        if key != self._key:
            self._list = None
            built = parts()
            if built:
                for part in built:
                    # Kernels write cand and nc in place: they must be these very arrays.
                    assert all(a.flags.c_contiguous for a in part if isinstance(a, np.ndarray))
                self._list = kernel_list(built)
            self._key, self._parts = key, built
        return self._list

    def check(self, key, parts: list[tuple]) -> None:
        """Assert that if `key` is the key of the list held, the list holds exactly these
        arrays (tests; under another key the next get() rebuilds it)."""
        if key != self._key:
            return
        assert len(parts) == len(self._parts), "QueryArrays is stale: queries changed"
        for fresh, held in zip(parts, self._parts, strict=True):
            assert all(a is b for a, b in zip(fresh, held, strict=True)), \
                "QueryArrays is stale: an array was replaced under the same key"
