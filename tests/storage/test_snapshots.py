"""Snapshot files: exact round trip, atomic writes, corruption detected by file name."""

from __future__ import annotations

import os

import numpy as np
import pytest

from gpu.io.records import NO_TIME, LabeledGraph
from storage import snapshots
from storage.errors import SnapshotCorrupt
from storage.snapshots import read_snapshot, remove_snapshot, write_snapshot
from tests.storage.builders import assert_same_graph, graph


def test_round_trip_is_exact(tmp_path):
    original = graph(1)
    path = write_snapshot(tmp_path, 7, original)
    assert path == tmp_path / "snapshot-000000000007.npz"
    assert_same_graph(read_snapshot(path), original)


def test_a_timed_graph_round_trips_with_its_times_and_watermark(tmp_path):
    base = graph(3)
    times = np.where(np.arange(base.num_edges) % 3 == 0, NO_TIME,
                     np.arange(base.num_edges, dtype=np.int64) * 10 - 7)
    for watermark in (1_700_000_000_123, None):
        timed = LabeledGraph(base.vertex_ids, base.vertex_labels, base.edge_src,
                             base.edge_dst, base.edge_labels, times, watermark)
        restored = read_snapshot(write_snapshot(tmp_path, 4, timed))
        assert_same_graph(restored, timed)
    # An untimed graph's file is as before: no time arrays in it.
    path = write_snapshot(tmp_path, 5, base)
    with np.load(path) as data:
        assert set(data.files) == set(snapshots.FIELDS) | {snapshots.DIGEST_KEY}
    assert read_snapshot(path).edge_times is None


def test_a_changed_edge_time_fails_the_digest(tmp_path):
    base = graph(4)
    timed = LabeledGraph(base.vertex_ids, base.vertex_labels, base.edge_src, base.edge_dst,
                         base.edge_labels, np.arange(base.num_edges, dtype=np.int64), 9)
    path = write_snapshot(tmp_path, 6, timed)
    with np.load(path) as data:
        arrays = {name: data[name] for name in data.files}
    arrays["edge_times"] = arrays["edge_times"] + 1
    np.savez(path, **arrays)
    with pytest.raises(SnapshotCorrupt, match="digest"):
        read_snapshot(path)


def test_empty_graph_round_trips(tmp_path):
    empty = LabeledGraph([], [], [], [], [])
    restored = read_snapshot(write_snapshot(tmp_path, 0, empty))
    assert restored.num_vertices == 0 and restored.num_edges == 0


def test_write_leaves_only_the_final_file(tmp_path):
    write_snapshot(tmp_path, 1, graph(1))
    write_snapshot(tmp_path, 1, graph(2))  # rewriting replaces the file whole
    assert [p.name for p in tmp_path.iterdir()] == ["snapshot-000000000001.npz"]
    assert_same_graph(read_snapshot(tmp_path / "snapshot-000000000001.npz"), graph(2))


def test_failed_write_leaves_no_file(tmp_path, monkeypatch):
    def failing_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(snapshots.os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="No space"):
        write_snapshot(tmp_path, 3, graph(3))
    assert list(tmp_path.iterdir()) == []


def test_tampered_arrays_fail_the_digest(tmp_path):
    path = write_snapshot(tmp_path, 2, graph(2))
    with np.load(path) as data:
        arrays = {name: data[name].copy() for name in data.files}
    arrays["edge_labels"][5] += 1
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)  # consistent zip, stale digest
    with pytest.raises(SnapshotCorrupt, match="digest") as caught:
        read_snapshot(path)
    assert caught.value.path == path


def test_flipped_byte_is_detected(tmp_path):
    path = write_snapshot(tmp_path, 2, graph(2, vertices=2000, edges=5000))
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside the edge arrays
    path.write_bytes(bytes(data))
    with pytest.raises(SnapshotCorrupt, match=path.name):
        read_snapshot(path)


@pytest.mark.parametrize("keep", [0, 100, 0.5])
def test_truncated_file_names_the_file(tmp_path, keep):
    path = write_snapshot(tmp_path, 4, graph(4))
    data = path.read_bytes()
    cut = keep if isinstance(keep, int) else int(len(data) * keep)
    path.write_bytes(data[:cut])
    with pytest.raises(SnapshotCorrupt, match=path.name):
        read_snapshot(path)


def test_missing_digest_is_corrupt(tmp_path):
    path = tmp_path / "snapshot-000000000005.npz"
    g = graph(5)
    with open(path, "wb") as handle:
        np.savez(handle, **{name: getattr(g, name) for name in snapshots.FIELDS})
    with pytest.raises(SnapshotCorrupt, match="unreadable"):
        read_snapshot(path)


def test_missing_file_is_corrupt(tmp_path):
    with pytest.raises(SnapshotCorrupt, match="missing"):
        read_snapshot(tmp_path / "snapshot-000000000009.npz")


def test_remove_tolerates_a_missing_file(tmp_path):
    path = write_snapshot(tmp_path, 1, graph(1))
    remove_snapshot(path)
    remove_snapshot(path)
    assert not path.exists()


def test_temporary_names_are_recognised(tmp_path, monkeypatch):
    seen = []
    real_replace = os.replace

    def spying_replace(src, dst):
        seen.append(src)
        real_replace(src, dst)

    monkeypatch.setattr(snapshots.os, "replace", spying_replace)
    final = write_snapshot(tmp_path, 1, graph(1))
    assert snapshots.is_temporary(seen[0])
    assert not snapshots.is_temporary(final)
