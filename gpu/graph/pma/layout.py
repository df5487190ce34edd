"""The packed memory array's vocabulary: edge keys, reserved values, tunables, stats, errors.

Every directed edge is one 64-bit key ``src << 32 | dst`` with a 32-bit value (its edge
label); `DEAD` marks a slot deleted earlier in the batch being applied, which is why no
edge may carry it.  `PendingBatch` is a batch while it is written into the array.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

DEAD = np.int32(np.iinfo(np.int32).min)     # value of a slot deleted earlier in the batch
MAX_VERTEX = (1 << 31) - 1
KEY_SHIFT = np.uint64(32)
# gpu/cuda/kernels/pma.cu's WINDOW_MAX (shared memory of one block) and LARGE_BLOCK (threads
# of a block of the large-window kernels, one per slot of a chunk).
BLOCK_WINDOW_MAX = 1024
MERGE_CHUNK_MAX = 256


class PMAUpdateError(ValueError):
    """A batch the PMA refuses (nothing changed): names the offending edge."""


@dataclass(frozen=True)
class PMAConfig:
    segment_size: int = 32          # slots per leaf segment (a power of two)
    leaf_upper: float = 1.0         # density thresholds at the leaves and at the root,
    root_upper: float = 0.85        # interpolated linearly over the levels between
    leaf_lower: float = 0.125
    root_lower: float = 0.5
    target: float = 0.67            # density a rebuild (growth or shrink) leaves
    min_segments: int = 1
    # Low bits of a key's destination word that name the vertex; the bits above them are
    # an ordering prefix the caller chose (gpu/cuda/device_graph.py puts the destination's
    # label there, so each source's keys are grouped by neighbour label).
    vertex_bits: int = 32
    # On CuPy, apply batches with the CUDA kernels of gpu/cuda/kernels/pma.cu instead of the
    # generic array path (off: the reference the kernels are tested against, and the
    # comparison in the benchmark).
    kernels: bool = True
    # With the kernels: windows of up to `block_window` slots merge in one block through
    # shared memory, larger ones over several blocks that compact `merge_chunk` slots
    # each.  Tests set both tiny so that small graphs take every path.
    block_window: int = 1024
    merge_chunk: int = 256

    def __post_init__(self) -> None:
        s = self.segment_size
        if s < 2 or s & (s - 1):
            raise ValueError(f"PMAConfig.segment_size must be a power of two >= 2, got {s}")
        if not 1 <= self.vertex_bits <= 32:
            raise ValueError(f"PMAConfig.vertex_bits must be 1..32, got {self.vertex_bits}")
        if not (0 <= self.leaf_lower < self.root_lower < self.target < self.root_upper
                <= self.leaf_upper <= 1.0):
            raise ValueError("PMAConfig thresholds must satisfy leaf_lower < root_lower < "
                             "target < root_upper <= leaf_upper <= 1")
        if self.min_segments < 1:
            raise ValueError("PMAConfig.min_segments must be positive")
        if not 0 <= self.block_window <= BLOCK_WINDOW_MAX:
            raise ValueError(f"PMAConfig.block_window must be 0..{BLOCK_WINDOW_MAX}, got "
                             f"{self.block_window}")
        if not 1 <= self.merge_chunk <= MERGE_CHUNK_MAX:
            raise ValueError(f"PMAConfig.merge_chunk must be 1..{MERGE_CHUNK_MAX}, got "
                             f"{self.merge_chunk}")


@dataclass
class PMAStats:
    """What the last batch did (the benchmark reports these)."""
    levels: int = 0                 # highest level rewritten (-1: nothing)
    windows: int = 0                # windows rewritten, all levels
    slots: int = 0                  # slots rewritten, all levels
    rebuilt: bool = False
    fixup: bool = False             # the whole-array gap repair ran (empty segments)
    one_launch: bool = False        # a small batch merged into its leaves in one launch
    per_level: list = field(default_factory=list)


@dataclass
class PendingBatch:
    """A batch while it is written into the array: its sorted inserts, a flag per insert
    set until a window took it, and its sorted deletes (None for a bulk load)."""
    keys: object
    vals: object
    pending: object
    deletes: object = None


def edge_keys(xp, src, dst):
    """Keys of the directed edges src -> dst (uint64)."""
    return (xp.asarray(src).astype(np.uint64) << KEY_SHIFT) | xp.asarray(dst).astype(np.uint64)


def key_src(keys):
    return (keys >> KEY_SHIFT).astype(np.int64)


def key_dst(keys):
    return (keys & np.uint64(0xFFFFFFFF)).astype(np.int64)
