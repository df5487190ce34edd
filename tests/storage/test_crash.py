"""kill -9 mid-stream: every acknowledged batch survives whole, nothing survives in part."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from storage import Store
from tests.storage.builders import assert_same_stream, delta, payload, updates_for
from tests.storage.crash_worker import QUERY_IDS, UPDATES_PER_BATCH

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_until_killed(
    data_dir: Path, acks_before_kill: int, extra_delay: float, window: int = 1,
    process: bool = False,
) -> list[int]:
    """Start the worker, SIGKILL it after ``acks_before_kill`` acks (+ a delay), return all
    acks.  With ``process``, the worker's writer process must exit by itself after that."""
    errors = data_dir.parent / "worker.stderr"
    with open(errors, "w") as stderr:
        worker = subprocess.Popen(
            [sys.executable, "-m", "tests.storage.crash_worker", str(data_dir), str(window),
             str(int(process))],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    acked: list[int] = []
    writer_pid = None
    with worker:
        try:
            if process:
                line = worker.stdout.readline()
                assert line.startswith("writer "), (line, errors.read_text())
                writer_pid = int(line.split()[1])
            while len(acked) < acks_before_kill:
                line = worker.stdout.readline()
                assert line, f"worker exited early ({worker.wait()}): {errors.read_text()}"
                acked.append(int(line))
            time.sleep(extra_delay)
        finally:
            worker.kill()  # SIGKILL: no atexit, no close(), no flush of anything unacked
        # Acks printed before the kill, some perhaps already in stdout's read buffer.
        acked += [int(line) for line in worker.stdout.read().split()]
    assert worker.returncode == -9, errors.read_text()
    if writer_pid is not None:
        _until_gone(writer_pid)
    return acked


def _until_gone(pid: int, timeout: float = 30.0) -> None:
    """Wait until process ``pid`` (not our child: the worker's) has exited."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        with contextlib.suppress(FileNotFoundError):
            if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
                return      # exited; its parent (gone) never reaped it
        assert time.monotonic() < deadline, f"writer process {pid} outlived its parent"
        time.sleep(0.01)


def check_consistent(data_dir: Path, acked: list[int], window: int = 1) -> int:
    store = Store.open(data_dir)
    try:
        last = store.last_seq()
        assert acked and last >= max(acked)
        assert last <= max(acked) + window  # at most the batches in flight, each whole
        stored = dict(store.batches_after(0))
        assert sorted(stored) == list(range(1, last + 1))
        for seq, updates in stored.items():
            assert_same_stream(updates, updates_for(seq, UPDATES_PER_BATCH))
        for query_id in QUERY_IDS:
            events = store.events_after(query_id, 0, 10**6)
            touched = [s for s in range(1, last + 1) if any(delta(query_id, s))]
            assert [e.seq for e in events] == touched
            assert all(e.payload == payload(query_id, e.seq) for e in events)
            record = store.query(query_id)
            assert record.batches_seen == last
            assert record.total_positive == sum(delta(query_id, s)[0] for s in range(1, last + 1))
            assert record.last_seq == touched[-1]
        assert store.idempotent(f"request-{last}") == (last, f"hash-{last}", f'{{"seq": {last}}}')
        assert store.idempotent(f"request-{last + 1}") is None
        assert store.labels() == {f"label-{s}": s for s in range(1, last + 1)}
        return last
    finally:
        store.close()


def test_acknowledged_batches_survive_kill_9(tmp_path):
    data_dir = tmp_path / "data"
    acked: list[int] = []
    last = 0
    # Several kills, each landing at a different point of a ~1.5 ms batch, most of
    # it inside the writer's transaction; every restart also proves the store keeps
    # working after recovery.
    for delay in (0.0, 0.0002, 0.0004, 0.0007, 0.001, 0.0013):
        round_acks = run_until_killed(data_dir, acks_before_kill=10, extra_delay=delay)
        assert round_acks[0] == last + 1
        acked += round_acks
        last = check_consistent(data_dir, acked)


@pytest.mark.parametrize("process", [False, True], ids=["thread", "process"])
def test_acknowledged_batches_survive_kill_9_during_group_commits(tmp_path, process):
    """Eight batches wait for their commit at once, so the writer commits them in groups;
    a kill between or inside those commits loses no acknowledged batch and leaves no
    batch in part.  A writer process outlives the killed worker only to finish the
    transaction it is in; the next store waits for it."""
    data_dir = tmp_path / "data"
    acked: list[int] = []
    last = 0
    for delay in (0.0, 0.0003, 0.0008, 0.0015):
        round_acks = run_until_killed(data_dir, acks_before_kill=16, extra_delay=delay,
                                      window=8, process=process)
        assert round_acks[0] == last + 1
        acked += round_acks
        last = check_consistent(data_dir, acked, window=8)
