"""Fixtures for the storage tests: a store in a fresh data directory, closed afterwards."""

from __future__ import annotations

import pytest

from storage import Store


@pytest.fixture
def data_dir(tmp_path):
    return tmp_path / "data"


@pytest.fixture(params=[False, True], ids=["thread", "process"])
def store(data_dir, request):
    """A store whose writer is a thread, or a child process (storage.writer_process)."""
    # NORMAL: no fsync per commit, so the tests stay fast; FULL is covered in test_wal.
    opened = Store.open(data_dir, synchronous="normal", writer_process=request.param)
    yield opened
    opened.close()
