"""Test-session hooks: the suite's default worker processes (pytest-xdist), and skipping
tests marked ``gpu`` when no CUDA device is usable.

The markers themselves are registered in pyproject.toml (whose addopts also deselect
``slow``: `.ci/run` runs those second).  When pytest-xdist is installed, a plain
``python -m pytest`` runs on one worker per core (``-n auto``) with ``--dist loadgroup``;
``-n 0`` or ``-p no:xdist`` runs in this one process, and an explicit ``-n``/``--dist``
wins.  Without pytest-xdist (the device host, unless its wheel is carried) the suite runs
in one process as before.  In a distributed run every ``gpu`` test goes to one worker
(one CUDA context and memory pool, as in a single-process run).
"""

from __future__ import annotations

import pytest


def _cuda_available() -> bool:
    # Imported lazily so collecting CPU-only tests never touches the device
    # module; a missing or half-written module simply means "no device".
    try:
        from gpu.cuda.device import cuda_available
    except ImportError:
        return False
    return bool(cuda_available())


@pytest.hookimpl(wrapper=True)
def pytest_cmdline_main(config):
    # Runs before xdist's own pytest_cmdline_main turns -n into workers; pytest only calls
    # this hook in initial conftests, which this one is for every path under tests/.
    if (config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput")
            and not config.option.collectonly and not config.option.usepdb):
        if config.option.numprocesses is None and not config.option.tx:
            config.option.numprocesses = "auto"
    return (yield)


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items or _cuda_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device")
    for item in gpu_items:
        item.add_marker(skip)
