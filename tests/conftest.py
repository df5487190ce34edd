"""Test-session hooks: skips tests marked ``gpu`` when no CUDA device is usable, and keeps
the CLI's first-run compiling in the foreground.

The ``gpu`` marker itself is registered in pyproject.toml; this file only
decides whether such tests can run here.
"""

from __future__ import annotations

import os

import pytest

# The CLI compiles in the foreground here: no detached compile process per test run
# (gpu/compile_ahead.py; its own tests turn the background on).
os.environ.setdefault("MOTIFSTREAM_FIRST_RUN", "compile")


def _cuda_available() -> bool:
    # Imported lazily so collecting CPU-only tests never touches the device
    # module; a missing or half-written module simply means "no device".
    try:
        from gpu.cuda.device import cuda_available
    except ImportError:
        return False
    return bool(cuda_available())


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items or _cuda_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device")
    for item in gpu_items:
        item.add_marker(skip)
