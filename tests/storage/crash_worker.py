"""Appends batches to a store until killed; prints each seq once it is durable.

Run by test_crash.py as ``python -m tests.storage.crash_worker DATA_DIR [WINDOW [PROCESS]]``:
up to WINDOW batches (default 1) wait for their commit at once, so the writer commits them
in groups; PROCESS 1 runs the writer in a child process (storage.writer_process), whose pid
is printed first as ``writer PID``.  Every record comes from tests.storage.builders, so the
test can rebuild what was acked.
"""

from __future__ import annotations

import sys
from collections import deque

from storage import Store
from tests.storage.builders import batch, query

QUERY_IDS = tuple(range(1, 41))  # many statements per transaction
UPDATES_PER_BATCH = 3000  # ~63 KB a batch: a commit spans many pages


def batch_for(seq: int):
    return batch(
        seq,
        QUERY_IDS,
        n=UPDATES_PER_BATCH,
        idempotency=(f"request-{seq}", f"hash-{seq}", f'{{"seq": {seq}}}'),
        new_labels={f"label-{seq}": seq},
    )


def main(data_dir: str, window: int = 1, process: int = 0) -> None:
    store = Store.open(data_dir, synchronous="normal", writer_process=bool(process))
    if process:
        print("writer", store._writer.pid, flush=True)
    if store.next_query_id() == 1:
        for query_id in QUERY_IDS:
            store.register_query(query(query_id), {}, None)
    seq = store.last_seq()
    in_flight: deque = deque()
    while True:
        seq += 1
        in_flight.append((seq, store.append_batch_async(batch_for(seq))))
        if len(in_flight) == window:
            acked, commit = in_flight.popleft()
            commit.result()
            print(acked, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], *map(int, sys.argv[2:]))
