"""Engine tunables: capacities, slack and parallel chunking, in one place.

Tests set them tiny (``EngineConfig.tiny()``) so that every growth,
relocation and multi-chunk path runs on graphs of a dozen vertices.
"""
from __future__ import annotations

from dataclasses import dataclass

# Layouts of the CUDA executor's data graph (gpu/cuda/device_graph.py), the default first.
DEVICE_GRAPHS = ("pma", "lists")


@dataclass(frozen=True)
class EngineConfig:
    # Internal vertex slots allocated up front; grows by doubling.
    initial_vertex_capacity: int = 1024
    # Adjacency pool slots (directed edges) allocated up front; grows by doubling.
    initial_edge_capacity: int = 1 << 16
    # Smallest neighbour-list capacity; lists relocate to twice their size when full.
    min_list_capacity: int = 4
    # Update-edge tasks handed to one parallel worker at a time.  Small chunks
    # balance skewed work (one hub edge can own most of a batch's matches).
    task_chunk: int = 16
    # Leaf-rooted tasks sharing the leaf's parent vertex are searched together, once per
    # group, on both executors (off: ablation, and the one-by-one path in tests).
    leaf_groups: bool = True
    # Smallest group searched together; smaller ones go one by one.
    leaf_group_min: int = 2
    # CUDA executor: a counting launch over at least this many update edges makes groups
    # (gpu/cuda/group_launchers.py: two sorts and five launches); a smaller one searches
    # its tasks one by one, seldom two at one vertex.
    device_leaf_group_edges: int = 1024
    # CUDA executor: a plan's trailing run of query leaves is counted from its parents'
    # leaf totals (match.cu leaf_product), not enumerated (off: ablation).  On the lists'
    # layout (the read view) and in counting launches only.
    leaf_counts: bool = True
    # ... for tails whose first leaf's parent has at least this many neighbours: a shorter
    # list is scanned faster than a count's lookups are made.  1,024 (H200, 2026-11-28,
    # docs/benchmarks.md): R-MAT 2^22's tree batch 1.5x faster, GH's sets ~5% slower on
    # average; 64 made GH's trees 26% slower, 4,096 gave up most of R-MAT's gain.
    leaf_count_degree: int = 1024
    # ... while the leaf totals' cache (vertex slots x a launch's leaf columns x 8 bytes)
    # fits in this many bytes; a launch that would need more enumerates its tails.
    leaf_cache_bytes: int = 1 << 30
    # CPU executor: a query's tasks run on the calling thread alone when fewer than this
    # (a parallel region costs more than a few tasks, and stalls on a busy host).
    serial_below_tasks: int = 64
    # CPU executor: the counted queries of a phase share one compiled call (off: each
    # query runs alone through the general path, as listed ones do; tests).
    shared_call: bool = True
    # CPU executor: with at least this many Numba threads (0: never), that call takes a
    # phase of any size and runs the tasks of every query in one parallel region, heavy
    # tasks split over the workers (count_phase); with fewer (a small machine, where the
    # service's threads take the cores a region would wait for), it takes phases of fewer
    # than serial_below_tasks edges and searches them serially (count_small), and larger
    # phases run query by query.
    shared_region_threads: int = 4
    # Batches started one after another (Engine.start, apply_stream: the service's queue)
    # that each only insert, or only delete, edges share one lookup, one update and one
    # search, a batch group of at most this many edges, each batch's counts still its own
    # (0: off; gpu/pipeline.py BatchGroup).
    batch_group_edges: int = 64
    # The same on the CUDA executor, where a group's fixed cost (a lookup, an update of
    # the device graph, a launch per query size) is larger and its search cheaper: on the
    # H100, 100-edge batches streamed at 480/s in groups of 1,024 edges, 1,000/s in groups
    # of 4,096 and 2,200/s in groups of 16,384 (docs/benchmarks.md).  A group takes only
    # what is queued, so a lone batch never waits for others.
    device_batch_group_edges: int = 16384
    # CUDA executor with the `pma` layout and its view: a batch with at least this many
    # edge records is validated and settled on the device (gpu/cuda/batch_prep.py);
    # smaller ones on the host, where a few records cost less than the launches.
    device_prep_records: int = 4096
    # CPU executor: with shared_region_threads Numba threads or more, a batch group of at
    # least this many edges runs in one parallel region (count_phase); a smaller one, and
    # every group on a smaller machine, is searched serially.  On the H100 host's 16 cores
    # the region doubled one-edge batches/s in groups of 64 and gave nothing clear in
    # groups of 8 (docs/benchmarks.md).
    group_region_edges: int = 16
    # Id-map slots allocated up front (power of two); grows at 50 % load.
    initial_idmap_capacity: int = 1 << 12
    # CUDA executor: busy warps hand unexplored candidates to idle ones (off: ablation).
    work_sharing: bool = True
    # CUDA executor: work-sharing records one launch can hand out.
    share_capacity: int = 1 << 20
    # CUDA executor: advance steps between a busy warp's looks at the idle warps.
    share_every: int = 128
    # CUDA executor: the data graph's layout on the device (gpu/cuda/device_graph.py):
    # "pma", the packed memory array, updated on the device from each batch (no host
    # lists), or "lists", the host's pools mirrored per touched vertex (the older layout,
    # kept for comparison); docs/benchmarks.md has the measurements.
    device_graph: str = "pma"
    # CUDA executor on "pma": the kernel reads the array's gap-free read view, the
    # touched vertices' lists copied again after each batch (gpu/graph/pma/view.py: the
    # lists' matching speed for about 16 bytes more per directed edge and slack); off,
    # it reads the array itself.
    pma_view: bool = True
    # CUDA executor on "pma": the array checks each batch again before it changes
    # (duplicates, inserts already stored, deletes not stored: PackedMemoryArray.apply),
    # which the engine's validation has checked against the same edges; on in tests
    # (tiny), off by default (a dozen device operations and a synchronisation a batch).
    pma_checks: bool = False
    # CUDA executor: slots per packed-memory-array segment (a power of two >= 2).
    pma_segment_size: int = 32
    # CUDA executor: (update edge, task type) pairs one launch tests, one int32 of task
    # buffer each; a larger phase runs as launches over slices of its edges.
    launch_pairs: int = 1 << 26
    # CUDA executor on "pma" with its view: a phase of at most this many update edges
    # whose queries are all counted runs through launches prepared once, with buffers
    # kept between batches (gpu/cuda/small_phase.py: a one-edge batch's host work is
    # mostly launch overhead); 0: every phase through the general launches.
    small_phase_edges: int = 256
    # CUDA executor: share_every of those small phases.  A small phase is all tail (a few
    # tasks, most warps idle from the start), so busy warps look at the idle ones more
    # often: 16 took one-edge batches in groups of 16 from ~2,300 to ~3,700-4,400/s
    # against 128, where the general launches of a 10% GH batch were 1.2-3x slower with
    # 16 than with 128 (docs/benchmarks.md, 2026-11-27).
    small_share_every: int = 16
    # CUDA executor: resident blocks of the search per multiprocessor (0: as many as its
    # registers allow, 7 on Hopper) for searches whose levels mostly intersect: more than
    # half the levels past the root edge have two or more backward neighbours, each
    # candidate looked up by binary search in the others' lists.  Those scattered probes
    # thrash the L1 cache as warps are added (GH dense_0 27.8 -> 15.2 ms, dense_3 19.6 ->
    # 12.2 ms with 5 blocks instead of 7), where scans (trees) hide their latency with
    # every warp there is (tree_0 and tree_3 20-23% slower with 5; H200, 2026-11-29,
    # docs/benchmarks.md).
    intersecting_blocks_per_sm: int = 5
    # CUDA executor: windowed queries are searched on the device, over each phase's window
    # subgraph copied up (gpu/cuda/windowed.py); off, on the host's cores over the same
    # subgraph (gpu/cpu/windowed.py: comparison, and what takes queries past the kernel's
    # 16 vertices or 64 edges).
    device_windows: bool = True

    def __post_init__(self) -> None:
        for name in ("initial_vertex_capacity", "initial_edge_capacity",
                     "min_list_capacity", "task_chunk", "initial_idmap_capacity",
                     "share_capacity", "share_every", "small_share_every",
                     "leaf_group_min",
                     "serial_below_tasks", "pma_segment_size", "launch_pairs",
                     "group_region_edges", "device_prep_records",
                     "device_leaf_group_edges"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"EngineConfig.{name} must be a positive integer, got {value!r}")
        for name in ("shared_region_threads", "batch_group_edges", "device_batch_group_edges",
                     "small_phase_edges", "leaf_count_degree", "leaf_cache_bytes",
                     "intersecting_blocks_per_sm"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"EngineConfig.{name} must be a non-negative integer, got "
                                 f"{value!r}")
        if self.device_graph not in DEVICE_GRAPHS:
            raise ValueError(f"EngineConfig.device_graph must be one of {DEVICE_GRAPHS}, got "
                             f"{self.device_graph!r}")
        size = self.pma_segment_size
        if size < 2 or size & (size - 1):
            raise ValueError(f"EngineConfig.pma_segment_size must be a power of two >= 2, "
                             f"got {size}")

    @classmethod
    def tiny(cls) -> "EngineConfig":
        """Smallest settings: forces growth, relocation, one-task chunks, the grouped
        search of every leaf-rooted pair of tasks, deep window trees in the PMA, one
        update edge per CUDA launch, batch groups that fill after three edges, every
        batch's edge records settled on the device, the packed memory array's own
        checks of every batch, prepared launches for phases of one or two edges only
        (the general launches take the others), every counted leaf tail counted, and
        one search block per multiprocessor for intersecting queries."""
        return cls(initial_vertex_capacity=2, initial_edge_capacity=4,
                   min_list_capacity=1, task_chunk=1, initial_idmap_capacity=2,
                   share_capacity=2, share_every=1, small_share_every=1,
                   serial_below_tasks=1,
                   pma_segment_size=2, launch_pairs=1, shared_region_threads=0,
                   batch_group_edges=3, device_batch_group_edges=3, pma_checks=True,
                   device_prep_records=1, small_phase_edges=2, leaf_count_degree=0,
                   intersecting_blocks_per_sm=1, device_leaf_group_edges=1)
