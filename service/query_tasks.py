"""Owns the running delivery task of each standing query that pushes its events out (a
webhook, service/webhooks.py; a Kafka sink, service/kafka.py): started, forgotten when it
ends (an unexpected end logged), stopped; and what /metrics says of them (events handed
over, failed attempts, dead letters, each output's cursor)."""
from __future__ import annotations

import asyncio
import logging

from storage.errors import StorageError

log = logging.getLogger("motifstream.service")


class QueryTasks:
    """One delivery task per query id; a subclass gives `_run(target)` (the delivery of a
    target with a `query_id`), `TASK_PREFIX` (the tasks' names), `WHAT` and `LOG` (where
    and how an unexpected end is logged)."""

    TASK_PREFIX = "delivery"
    WHAT = "delivery"
    LOG = log

    def __init__(self) -> None:
        self._tasks: dict[int, asyncio.Task] = {}
        # For /metrics (service/metrics.py): counts since start, and each running
        # output's cursor (the last batch recorded as handled).
        self.delivered = 0          # events the receiver or broker took
        self.failures = 0           # attempts that failed (each retry's cause)
        self.dead_letters = 0       # events given up on
        self.cursors: dict[int, int] = {}

    def lag(self, last_batch: int) -> int:
        """Batches the furthest-behind running output is behind `last_batch` (0: none)."""
        return max((last_batch - c for c in self.cursors.values()), default=0)

    async def _run(self, target) -> None:
        raise NotImplementedError

    def _follow(self, target) -> None:
        query_id = target.query_id
        self.cursors[query_id] = target.delivered_through
        task = asyncio.create_task(self._run(target), name=f"{self.TASK_PREFIX}-{query_id}")
        self._tasks[query_id] = task
        task.add_done_callback(lambda done: self._forget(query_id, done))

    def _forget(self, query_id: int, task: asyncio.Task) -> None:
        if self._tasks.get(query_id) is task:
            del self._tasks[query_id]
            self.cursors.pop(query_id, None)
        if not task.cancelled() and task.exception() is not None:
            self.LOG.error("%s of query %d stopped", self.WHAT, query_id,
                           exc_info=task.exception())

    async def _stop(self, query_id: int) -> None:
        task = self._tasks.pop(query_id, None)
        self.cursors.pop(query_id, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _stop_all(self) -> None:
        for query_id in list(self._tasks):
            await self._stop(query_id)

    async def _record(self, query_id: int, seq: int, write, *args) -> None:
        """Run the store write `write(*args)` that moves the query's cursor to batch `seq`,
        in a thread, and let it land even when this task is cancelled meanwhile: a target
        replaced meanwhile stores its new cursor only after this one.  A StorageError is
        logged, not raised: the batch went out, and a restart before the next write
        delivers it again (or, for Kafka, reads it back)."""
        write_done = asyncio.ensure_future(asyncio.to_thread(write, *args))
        try:
            try:
                await asyncio.shield(write_done)
            except asyncio.CancelledError:
                await asyncio.gather(write_done, return_exceptions=True)
                raise
        except StorageError as exc:
            self.LOG.error("%s of query %d: could not record batch %d: %s", self.WHAT,
                           query_id, seq, exc)
            return
        if query_id in self.cursors:
            self.cursors[query_id] = max(self.cursors[query_id], seq)
