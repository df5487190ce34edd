"""The Numba CPU executor: the DFS search, grouped leaf search, the work-sharing region, and
the boundary (`executor.py`) that takes a plan's tasks and returns a `MatchSet`."""
