"""The Numba CPU executor: the DFS search (`search`), a phase's compiled entry points
(`phases`) and the work-sharing region's queue (`work_queue`), the grouped leaf search
(`leaf_groups`), and the boundary (`executor`) that takes a plan's tasks and returns a
`MatchSet`."""
