"""Dense indices of vertex labels, and the device graph's edge keys that carry them.

The packed memory array orders keys as 64-bit integers; putting the destination's label
index between the source and the destination id (``src << 32 | label << vertex_bits |
dst``) makes each vertex's neighbours of one label a contiguous sorted run, as in the host
lists, so the matching kernel finds a label segment by binary search.
"""
from __future__ import annotations

import numpy as np

from gpu.graph.sets import sorted_unique


# Labels `LabelIndex.of` looks up one by one rather than by array operations.
FEW_LABELS = 16


class LabelIndex:
    """Dense indices for vertex labels, assigned in order of first sight (the labels
    first seen in one call in ascending order), never changed afterwards."""

    def __init__(self) -> None:
        self._sorted = np.empty(0, dtype=np.int64)     # known labels, sorted
        self._index = np.empty(0, dtype=np.int64)      # the index of each of those
        self._by_label: dict[int, int] = {}            # the same, for a few labels at once
        self.count = 0

    def of(self, labels) -> np.ndarray:
        """The index of each label (int64), registering unseen labels."""
        labels = np.asarray(labels, dtype=np.int64).ravel()
        if len(labels) <= FEW_LABELS:   # a small batch's: a dozen array calls cost more
            try:
                return np.array([self._by_label[x] for x in labels.tolist()], dtype=np.int64)
            except KeyError:
                pass        # an unseen label: registered below
        pos = np.searchsorted(self._sorted, labels)
        inside = np.minimum(pos, max(len(self._sorted) - 1, 0))
        known = (pos < len(self._sorted)) & (self._sorted[inside] == labels) \
            if len(self._sorted) else np.zeros(len(labels), dtype=bool)
        if not known.all():
            new = sorted_unique(labels[~known])
            merged = np.concatenate([self._sorted, new])
            index = np.concatenate([self._index, np.arange(self.count, self.count + len(new))])
            order = np.argsort(merged, kind="stable")
            self._sorted, self._index = merged[order], index[order]
            self._by_label = dict(zip(self._sorted.tolist(), self._index.tolist()))
            self.count += len(new)
            pos = np.searchsorted(self._sorted, labels)
        return self._index[pos] if len(labels) else np.empty(0, dtype=np.int64)

    def bits(self) -> int:
        """Bits that hold every index."""
        return max(0, self.count - 1).bit_length()

    def count_with(self, labels) -> int:
        """How many labels there would be with these registered too (nothing changes)."""
        labels = sorted_unique(np.asarray(labels, dtype=np.int64))
        if len(labels) == 0:
            return self.count
        return self.count + int((~np.isin(labels, self._sorted)).sum())


def label_keys(us, vs, vs_labels, vertex_bits: int) -> np.ndarray:
    """Keys us -> vs with the destinations' label indices between (host arrays)."""
    us = np.asarray(us, dtype=np.uint64)
    vs = np.asarray(vs, dtype=np.uint64)
    labels = np.asarray(vs_labels, dtype=np.uint64)
    return (us << np.uint64(32)) + (labels << np.uint64(vertex_bits)) + vs
