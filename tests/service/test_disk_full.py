"""A store that cannot write (its filesystem full, or every write refused): the batch is a
503, nothing of it is visible, and the service goes on once writing works again.

The faults are real ones, met by SQLite itself in the storage writer process, with no hook
in the service: a small tmpfs filled to the last byte (ENOSPC: SQLITE_FULL; needs root to
mount, as in CI's container) and a writer process whose file-size limit is set to 0
(RLIMIT_FSIZE: every write fails with EFBIG, SQLite's disk I/O error; any Linux user).
A failing fsync is another matter (the transaction is written, its durability unknown):
tests/service/test_fsync_failure.py.
"""
from __future__ import annotations

import errno
import os
import random
import resource
import subprocess

import pytest

from tests.graphs import random_data
from tests.service.conftest import (
    batch_json,
    graph_json,
    graph_state,
    pattern_json,
    random_service_batch,
    running,
)
from tests.service.test_batches import PATTERNS


class WritesRefused:
    """The store's writer process may write no byte (RLIMIT_FSIZE 0) until `restore`."""
    sqlite_error = "disk I/O error"      # SQLITE_IOERR_WRITE

    def __init__(self, client, data_dir) -> None:
        self.pid = client.app.state.motifstream.store._writer.pid
        self.limits = resource.prlimit(self.pid, resource.RLIMIT_FSIZE)

    def fail(self) -> None:
        resource.prlimit(self.pid, resource.RLIMIT_FSIZE, (0, self.limits[1]))

    def restore(self) -> None:
        resource.prlimit(self.pid, resource.RLIMIT_FSIZE, self.limits)


class DiskFull:
    """The data directory's filesystem filled by a ballast file until `restore` deletes it."""
    sqlite_error = "database or disk is full"        # SQLITE_FULL

    def __init__(self, client, data_dir) -> None:
        self.ballast = data_dir / "ballast"

    def fail(self) -> None:
        chunk = b"\0" * (1 << 16)
        with open(self.ballast, "wb", buffering=0) as f:
            while True:
                try:
                    f.write(chunk)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    chunk = chunk[:len(chunk) // 2]   # the last bytes too
                    if not chunk:
                        return

    def restore(self) -> None:
        self.ballast.unlink()




@pytest.fixture
def small_filesystem(tmp_path):
    """A 32 MiB tmpfs (root only: mount(2) needs CAP_SYS_ADMIN)."""
    mount = tmp_path / "fs"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (the RLIMIT_FSIZE case runs anyway)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(mount)],
                          check=False, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def _stream(seed: int, batches: int):
    rng = random.Random(seed)
    data = random_data(rng, 14, 2, 2, 0.3)
    start = data.labeled()
    next_id = [100]
    return start, [batch_json(random_service_batch(rng, data, 2, 2, next_id))
                   for _ in range(batches)]


def _setup(client, start) -> list[int]:
    assert client.put("/v1/graph", json=graph_json(start)).status_code == 200
    return [client.post("/v1/queries", json={"pattern": pattern_json(p), "name": n,
                                             "deliver": "matches"}).json()["id"]
            for n, p in PATTERNS.items()]


def _visible(client, ids) -> dict:
    """Everything a client can see of the batches: the graph, every query's result log
    and statistics."""
    logs = {qid: client.get(f"/v1/queries/{qid}/results", params={"after": 0}).json()["events"]
            for qid in ids}
    stats = {qid: {k: v for k, v in client.get(f"/v1/queries/{qid}").json()["stats"].items()
                   if k in ("batches_seen", "total_positive", "total_negative", "last_batch")}
             for qid in ids}
    return {"graph": graph_state(client), "logs": logs, "stats": stats}


def _untimed(visible: dict) -> dict:
    return {**visible, "logs": {qid: [{**e, "data": {k: v for k, v in e["data"].items()
                                                     if k != "time"}} for e in events]
                                for qid, events in visible["logs"].items()}}


def _until_progress(ws, through: int) -> list[tuple[int, dict]]:
    """The batch events a WebSocket sends until it says it is complete through `through`
    (progress comes every heartbeat, so this never waits long)."""
    events = []
    while True:
        message = ws.receive_json()
        if message["event"] == "progress":
            if message["data"]["through"] >= through:
                return events
        else:
            assert message["event"] == "batch", message
            events.append((message["id"], {k: v for k, v in message["data"].items()
                                           if k != "time"}))


def _write_fault_loses_nothing(tmp_path, data_dir, fault_kind, **settings) -> None:
    start, batches = _stream(seed=21, batches=5)
    with running(tmp_path / "ref") as client:           # the run that never failed
        ids = _setup(client, start)
        reference = [client.post("/v1/batches", json=b).json() for b in batches]
        want = _untimed(_visible(client, ids))
    with running(data_dir, heartbeat_seconds=0.05, **settings) as client:
        assert _setup(client, start) == ids
        assert client.post("/v1/batches", json=batches[0]).status_code == 200
        before = _visible(client, ids)
        fault = fault_kind(client, data_dir)
        with client.websocket_connect(f"/v1/queries/{ids[1]}/ws?after=1") as ws:
            fault.fail()
            try:
                for _ in range(2):      # a retry with the same key, still failing
                    r = client.post("/v1/batches", json=batches[1],
                                    headers={"Idempotency-Key": "second"})
                    assert r.status_code == 503, r.text
                    assert r.headers["content-type"] == "application/problem+json"
                    problem = r.json()
                    assert problem["code"] == "unavailable", problem
                    assert "not applied" in problem["detail"], problem
                    assert fault.sqlite_error in problem["detail"], problem
                # Nothing of it is visible, and reads go on.
                assert _visible(client, ids) == before
            finally:
                fault.restore()
            # Writing works again: the same request (same key) is applied now, as batch 2,
            # and everything after goes on as in the run that never failed.
            r = client.post("/v1/batches", json=batches[1], headers={"Idempotency-Key": "second"})
            assert r.status_code == 200, r.text
            assert "idempotent-replayed" not in r.headers
            assert r.json()["batch"] == 2
            assert r.json()["results"] == reference[1]["results"]
            for b, ref in zip(batches[2:], reference[2:]):
                answer = client.post("/v1/batches", json=b).json()
                assert (answer["batch"], answer["results"]) == (ref["batch"], ref["results"])
            # A follower subscribed through it all got the events of the batches applied,
            # each once, and nothing of the one refused.
            streamed = _until_progress(ws, len(batches))
        assert _untimed(_visible(client, ids)) == want
        logged = [(e["id"], e["data"]) for e in want["logs"][ids[1]] if e["id"] > 1]
        assert streamed == logged
    # And after a restart the store holds exactly that.
    with running(data_dir) as client:
        assert _untimed(_visible(client, ids)) == want


def test_a_write_error_is_a_503_and_the_service_goes_on_when_writes_work(tmp_path):
    _write_fault_loses_nothing(tmp_path, tmp_path / "data", WritesRefused)


def test_a_full_disk_is_a_503_and_the_service_goes_on_when_space_returns(tmp_path,
                                                                         small_filesystem):
    _write_fault_loses_nothing(tmp_path, small_filesystem / "data", DiskFull)

