"""The matching engine's public face: one `Engine`, its config, queries, formats and results.

    from gpu import Engine, EngineConfig, QueryGraph, load_graph, read_query, read_updates

The subpackages, each owning one concern, in the order a batch meets them:

    gpu.io     file formats: graphs, queries, update streams, edge lists, labels
    gpu.graph  the data graph: vertex table, neighbour lists, the packed memory array
    gpu.plan   queries, signatures and candidate bits, matching orders and task types
    gpu.cpu    the Numba executor (the default everywhere)
    gpu.cuda   the CUDA executor: its device graph, launchers and kernels/*.cu

`gpu.engine` ties them together (`Engine.apply`: normalize, match, mutate, match) and every
executor answers in `gpu.results`' types.  Names here load on first use, so importing `gpu`
(or one of its small modules, as the CLI's parsers do) compiles and imports nothing heavy,
and never fails on a machine without a GPU.
"""
from __future__ import annotations

import importlib

# public name -> the module that defines it
_EXPORTS = {
    "Engine": "gpu.engine",
    "UnknownQuery": "gpu.engine",
    "EngineConfig": "gpu.config",
    "BatchRejected": "gpu.batch",
    "BatchResult": "gpu.results",
    "QueryDelta": "gpu.results",
    "MatchList": "gpu.results",
    "QueryGraph": "gpu.plan.query",
    "QueryError": "gpu.plan.query",
    "LabeledGraph": "gpu.io.records",
    "UpdateStream": "gpu.io.records",
    "FormatError": "gpu.io.records",
    "load_graph": "gpu.io.graphs",
    "read_graph": "gpu.io.graphs",
    "read_query": "gpu.io.graphs",
    "read_updates": "gpu.io.streams",
    "parse_graph_text": "gpu.io.graphs",
    "parse_updates_text": "gpu.io.streams",
    "resolve_backend": "gpu.cuda.device",
    "cuda_available": "gpu.cuda.device",
    "NoCudaDevice": "gpu.cuda.device",
    "warm_up": "gpu.warm_up",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gpu' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
