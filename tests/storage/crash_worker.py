"""Appends batches to a store until killed; prints each seq once append_batch returned.

Run by test_crash.py as ``python -m tests.storage.crash_worker DATA_DIR``.  Every
record comes from tests.storage.builders, so the test can rebuild what was acked.
"""

from __future__ import annotations

import sys

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


def main(data_dir: str) -> None:
    store = Store.open(data_dir, synchronous="normal")
    if store.next_query_id() == 1:
        for query_id in QUERY_IDS:
            store.register_query(query(query_id), {}, None)
    seq = store.last_seq()
    while True:
        seq += 1
        store.append_batch(batch_for(seq))
        print(seq, flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
