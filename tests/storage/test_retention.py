"""Tests for the store's retention applied on demand (Store.prune, the service's timer): it
prunes the result log and the idempotency keys as of the last batch, between the multiples of
prune_every at which a batch group prunes by itself."""

from __future__ import annotations

import pytest

from storage import ResultsPruned, Store
from tests.storage.builders import batch, query


@pytest.mark.parametrize("writer_process", [False, True], ids=["thread", "process"])
def test_prune_applies_the_retention_as_of_the_last_batch(data_dir, writer_process):
    store = Store.open(data_dir, synchronous="normal", result_retention=3,
                       idempotency_retention=2, prune_every=1000,
                       writer_process=writer_process)
    try:
        store.register_query(query(1), {}, None)
        for seq in range(1, 8):
            store.append_batch(batch(seq, (1,), idempotency=(f"key-{seq}", "h", "{}")))
        # prune_every is far away: nothing was pruned by the batches themselves.
        touched = [seq for seq in range(1, 8) if seq % 3]  # builders: every third is zero
        assert [e.seq for e in store.events_after(1, 0, 100)] == touched
        assert all(store.idempotent(f"key-{seq}") for seq in range(1, 8))

        assert store.prune() == 7
        with pytest.raises(ResultsPruned) as caught:
            store.events_after(1, 0, 100)
        assert caught.value.earliest == 4  # events of the last 3 batches (5, 6, 7) are kept
        assert [e.seq for e in store.events_after(1, 4, 100)] == [5, 7]
        assert [s for s in range(1, 8) if store.idempotent(f"key-{s}")] == [6, 7]

        assert store.prune() == 7  # again: nothing more goes
        assert [e.seq for e in store.events_after(1, 4, 100)] == [5, 7]
    finally:
        store.close()


def test_prune_of_a_short_log_removes_nothing(store):
    store.register_query(query(1), {}, None)
    store.append_batch(batch(1, (1,)))
    assert store.prune() == 1
    assert [e.seq for e in store.events_after(1, 0, 10)] == [1]
