"""Fixtures for the storage tests: a store in a fresh data directory, closed afterwards."""

from __future__ import annotations

import pytest

from storage import Store


@pytest.fixture
def data_dir(tmp_path):
    return tmp_path / "data"


@pytest.fixture
def store(data_dir):
    # NORMAL: no fsync per commit, so the tests stay fast; FULL is covered in test_wal.
    opened = Store.open(data_dir, synchronous="normal")
    yield opened
    opened.close()
