"""Owns the result retention's timer: the store pruned every `prune_seconds`, from the lifespan.

A batch group prunes by itself at every multiple of `prune_every` batches; the timer prunes a
log whose stream slowed down or stopped short of the next multiple, so events older than
`result_retention` batches never stay longer than `prune_seconds`.
"""
from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from storage import Store

log = logging.getLogger("motifstream.retention")


def start_pruning(store: Store, seconds: float) -> asyncio.Task | None:
    """A task that prunes `store` every `seconds` (on a worker thread: the call waits for the
    writer), or None for 0 (no timer).  Cancel it with `stop_pruning`."""
    if seconds <= 0:
        return None
    return asyncio.create_task(_prune_every(store, seconds), name="motifstream-pruning")


async def stop_pruning(task: asyncio.Task | None) -> None:
    """Cancel the timer and wait for it to end (a prune already handed to the writer still
    commits: closing the store finishes queued writes)."""
    if task is None:
        return
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def _prune_every(store: Store, seconds: float) -> None:
    while True:
        await asyncio.sleep(seconds)
        try:
            seq = await asyncio.to_thread(store.prune)
        except Exception:  # the next tick tries again; a batch group also prunes by itself
            log.exception("pruning the result log failed")
        else:
            log.debug("pruned the result log as of batch %d", seq)
