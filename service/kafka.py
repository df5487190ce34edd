"""Owns Kafka delivery: each Kafka sink produces its query's result events to a topic, one
message per batch, exactly once per batch id, from a durable cursor checked against the broker.

A sink follows its query through a hub subscription (service/hub.py) opened at its cursor, as a
webhook does (service/webhooks.py), so it is served from the result log and then live and never
slows ingest.  Each event is one message: the value is the JSON the result streams carry
(`batch`, `time`, counts...) byte for byte, the key the query id, and the headers
`X-Motifstream-Batch` and `X-Motifstream-Query`.  All of a query's messages go to one partition
(the one its key hashes to when the sink is set), in batch order.

Exactly once per batch id, for consumers that read committed messages (librdkafka's default,
`isolation.level=read_committed` for the Java client):

- the producer is transactional (`transactional.id`, by default `motifstream-query-<id>`): the
  events waiting together (at most CURSOR_COMMIT_EVERY) are produced in one transaction;
- the cursor (the last batch delivered and its message's offset) is committed to the store only
  after the broker committed the transaction;
- a crash between the two leaves the store behind the broker, so every start of a sink (a
  restart, or a retry after any failure) first opens the producer, which fences the producer
  of the same `transactional.id` that may still run and aborts its open transaction, and then
  reads the partition back from the stored offset: the last committed message of this query
  found there moves the cursor on before anything is produced.

What this does not cover: a second writer of the same key into the same partition under another
`transactional.id`, a topic whose retention deleted the messages after the stored offset before
a restart read them back, and consumers reading uncommitted messages (they may see the messages
of an aborted attempt as well).  A failure (broker unreachable, a transaction that could not be
committed) is retried after a backoff that doubles up to `kafka_backoff_max_seconds`,
forever: Kafka is a log, and an event is not skipped.  Pruned events (a broker away for
longer than the result retention) are logged and skipped, as for a webhook.

confluent-kafka (librdkafka) is the optional `kafka` extra: without it the service runs and a
sink cannot be set (KafkaUnavailable).  Its calls block, so they run in threads, off the loop.
"""
from __future__ import annotations

import asyncio
import functools
import importlib.util
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple, Protocol

from service.hub import Hub, SubscriptionGone
from service.query_tasks import QueryTasks
from service.webhooks import BATCH_HEADER, EVERY_RETAINED, QUERY_HEADER
from storage import EventRecord, Store

log = logging.getLogger("motifstream.kafka")

EXTRA_MISSING = ("Kafka sinks need the `kafka` extra (confluent-kafka), which is not installed: "
                 "pip install 'motifstream[kafka]'")
# At most this many waiting events share one transaction and one cursor commit.
CURSOR_COMMIT_EVERY = 64
BACKOFF_SECONDS = 0.5
BACKOFF_MAX_SECONDS = 60.0
# How long one broker call (metadata, a transaction's commit, the read-back) may take.
TIMEOUT_SECONDS = 30.0
# Client settings the sink sets itself: the guarantee above depends on them.
RESERVED_SETTINGS = frozenset({
    "bootstrap.servers", "enable.idempotence", "acks", "isolation.level", "group.id",
    "enable.auto.commit", "enable.partition.eof"})
# The one client setting that is the producer's alone (a consumer would warn about it).
TRANSACTIONAL_ID = "transactional.id"


def kafka_installed() -> bool:
    return importlib.util.find_spec("confluent_kafka") is not None


class KafkaUnavailable(Exception):
    """The `kafka` extra is not installed."""

    def __str__(self) -> str:
        return EXTRA_MISSING


class KafkaSinkError(Exception):
    """The broker refused or could not be reached; `field` names the sink's setting at fault
    when it is one (a topic that does not exist, a client setting librdkafka refuses)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class KafkaSink:
    """A query's Kafka sink as stored (Store.kafka_sink's row, settings decoded)."""

    query_id: int
    bootstrap_servers: str
    topic: str
    client_settings: dict
    partition: int
    delivered_through: int  # the cursor: every event up to this batch was produced
    delivered_offset: int   # the offset of that batch's message (or the partition's end
    created_at: str         # when the sink was set, before its first message)

    @classmethod
    def from_row(cls, row: Sequence) -> KafkaSink:
        query_id, servers, topic, settings, *rest = row
        return cls(query_id, servers, topic, json.loads(settings), *rest)

    @property
    def transactional_id(self) -> str:
        """The producer's transactional id: the setting's when given (two services sharing a
        broker must not share one), else derived from the query id."""
        return self.client_settings.get(TRANSACTIONAL_ID, f"motifstream-query-{self.query_id}")


class Delivered(NamedTuple):
    """A batch's message as the broker holds it."""

    batch: int
    offset: int


class SinkClient(Protocol):
    """The broker as a sink needs it.  Every call blocks, and raises KafkaSinkError."""

    def locate(self) -> tuple[int, int]:
        """The partition the query's key goes to and that partition's end offset."""

    def open(self) -> None:
        """Start the transactional producer: fences any earlier producer of the sink's
        transactional id and aborts the transaction it left open."""

    def last_delivered(self, partition: int, after_offset: int) -> Delivered | None:
        """The last committed message of the sink's query in `partition` after
        `after_offset`, if any."""

    def produce(self, partition: int, events: Sequence[EventRecord]) -> int:
        """Produce one message per event in one transaction, committed; the last one's
        offset."""


ClientFactory = Callable[[KafkaSink], SinkClient]


def _key(query_id: int) -> bytes:
    return str(query_id).encode()


class ConfluentClient:
    """SinkClient on confluent-kafka (librdkafka)."""

    def __init__(self, sink: KafkaSink, timeout: float = TIMEOUT_SECONDS) -> None:
        import confluent_kafka

        self._kafka = confluent_kafka
        self.sink = sink
        self.timeout = timeout
        self._base = {name: value for name, value in sink.client_settings.items()
                      if name != TRANSACTIONAL_ID}
        self._base["bootstrap.servers"] = sink.bootstrap_servers
        self._producer = None

    def _call(self, what: str, call: Callable, *args):
        try:
            return call(*args)
        except self._kafka.KafkaException as exc:
            raise KafkaSinkError(f"{what}: {exc.args[0] if exc.args else exc}") from exc

    def locate(self) -> tuple[int, int]:
        self._new_producer()    # settings the producer refuses are refused now, not later
        consumer = self._consumer()
        try:
            topics = self._call("metadata", consumer.list_topics, self.sink.topic,
                                self.timeout).topics
            meta = topics.get(self.sink.topic)
            if meta is None or meta.error is not None or not meta.partitions:
                raise KafkaSinkError(f"topic {self.sink.topic!r} does not exist on "
                                     f"{self.sink.bootstrap_servers}", field="topic")
            partition = murmur2_partition(_key(self.sink.query_id), len(meta.partitions))
            _, end = self._call("offsets", consumer.get_watermark_offsets,
                                self._kafka.TopicPartition(self.sink.topic, partition),
                                self.timeout)
            return partition, end
        finally:
            consumer.close()

    def open(self) -> None:
        self._producer = self._new_producer()
        self._call("init_transactions", self._producer.init_transactions, self.timeout)

    def _new_producer(self):
        try:
            return self._kafka.Producer({
                **self._base, TRANSACTIONAL_ID: self.sink.transactional_id,
                "enable.idempotence": True, "acks": "all"})
        except self._kafka.KafkaException as exc:
            raise KafkaSinkError(f"client settings: {exc}", field="settings") from exc

    def last_delivered(self, partition: int, after_offset: int) -> Delivered | None:
        consumer = self._consumer()
        last = None
        key = _key(self.sink.query_id)
        try:
            consumer.assign([self._kafka.TopicPartition(self.sink.topic, partition,
                                                        after_offset + 1)])
            deadline = time.monotonic() + self.timeout
            while time.monotonic() < deadline:
                message = consumer.poll(min(1.0, self.timeout))
                if message is None:
                    continue
                error = message.error()
                if error is not None:
                    if error.code() == self._kafka.KafkaError._PARTITION_EOF:
                        return last
                    raise KafkaSinkError(f"reading back {self.sink.topic}[{partition}]: "
                                         f"{error}")
                batch = dict(message.headers() or ()).get(BATCH_HEADER)
                if message.key() == key and batch is not None:
                    last = Delivered(int(batch), message.offset())
            raise KafkaSinkError(f"reading back {self.sink.topic}[{partition}] from offset "
                                 f"{after_offset + 1}: timed out after {self.timeout} s")
        finally:
            consumer.close()

    def produce(self, partition: int, events: Sequence[EventRecord]) -> int:
        producer = self._producer
        assert producer is not None, "open() first"
        offsets: list[int] = []
        failures: list[str] = []

        def acknowledged(error, message) -> None:
            if error is not None:
                failures.append(str(error))
            else:
                offsets.append(message.offset())

        self._call("begin_transaction", producer.begin_transaction)
        try:
            for event in events:
                producer.produce(
                    self.sink.topic, value=event.payload.encode(),
                    key=_key(self.sink.query_id), partition=partition,
                    headers=[(BATCH_HEADER, str(event.seq).encode()),
                             (QUERY_HEADER, str(self.sink.query_id).encode())],
                    on_delivery=acknowledged)
            # commit_transaction flushes, and so serves the delivery callbacks first.
            self._call("commit_transaction", producer.commit_transaction, self.timeout)
        except (KafkaSinkError, self._kafka.KafkaException, BufferError) as exc:
            self._abort()
            raise KafkaSinkError(str(exc)) from exc
        if failures or len(offsets) != len(events):
            raise KafkaSinkError(f"produce: {failures or 'a message was not acknowledged'}")
        return max(offsets)

    def _abort(self) -> None:
        try:
            self._producer.abort_transaction(self.timeout)
        except self._kafka.KafkaException:
            pass    # the next open() fences this producer and aborts what it left

    def _consumer(self):
        try:
            return self._kafka.Consumer({
                **self._base, "group.id": f"motifstream-readback-{self.sink.query_id}",
                "enable.auto.commit": False, "enable.partition.eof": True,
                "isolation.level": "read_committed"})
        except self._kafka.KafkaException as exc:
            raise KafkaSinkError(f"client settings: {exc}", field="settings") from exc


def murmur2_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner (the Java client's, librdkafka's `murmur2`)
    gives `key`: so that a query's messages land where any Kafka producer would put them."""
    seed, m, r = 0x9747B28C, 0x5BD1E995, 24
    mask = 0xFFFFFFFF
    length = len(key)
    h = (seed ^ length) & mask
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(key[i:i + 4], "little")
        k = (k * m) & mask
        k ^= k >> r
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    tail = length % 4
    rest = key[length - tail:]
    if tail == 3:
        h ^= rest[2] << 16
    if tail >= 2:
        h ^= rest[1] << 8
    if tail >= 1:
        h ^= rest[0]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return (h & 0x7FFFFFFF) % partitions


def confluent_client(sink: KafkaSink, timeout: float = TIMEOUT_SECONDS) -> SinkClient:
    if not kafka_installed():
        raise KafkaUnavailable()
    return ConfluentClient(sink, timeout)


class KafkaDeliverer(QueryTasks):
    """Runs one delivery task per Kafka sink; made and closed by the lifespan."""

    TASK_PREFIX = "kafka"
    WHAT = "Kafka sink"
    LOG = log

    def __init__(self, store: Store, hub: Hub, client_factory: ClientFactory | None = None,
                 backoff: float = BACKOFF_SECONDS, backoff_max: float = BACKOFF_MAX_SECONDS,
                 timeout: float = TIMEOUT_SECONDS) -> None:
        """`client_factory` replaces the broker (tests hand in a fake); the times are the
        kafka_* settings."""
        self.store = store
        self.hub = hub
        self.client_factory = client_factory or functools.partial(confluent_client,
                                                                  timeout=timeout)
        self.backoff = backoff
        self.backoff_max = backoff_max
        super().__init__()
        # Held while a sink is replaced or removed: never two tasks for one query's sink.
        self._changing = asyncio.Lock()

    async def start(self) -> None:
        """Resume every stored sink from its cursor."""
        for row in await asyncio.to_thread(self.store.kafka_sinks):
            self._follow(KafkaSink.from_row(row))

    async def set(self, query_id: int, bootstrap_servers: str, topic: str,
                  client_settings: dict, after: int | None) -> KafkaSink:
        """Create or replace the query's sink and (re)start its delivery from `after` (None:
        where it was, or after the last committed batch for a new one).  Raises
        KafkaUnavailable, or KafkaSinkError when the broker or topic cannot be reached (the
        old sink, if any, then goes on)."""
        draft = KafkaSink(query_id, bootstrap_servers, topic, client_settings, 0, 0, 0, "")
        client = self.client_factory(draft)
        async with self._changing:
            # Stopped first (its transaction in flight ended), so that the partition's end
            # read next is past every message it produced.
            await self._stop(query_id)
            try:
                partition, end = await asyncio.to_thread(client.locate)
                await asyncio.to_thread(
                    self.store.set_kafka_sink, query_id, bootstrap_servers, topic,
                    json.dumps(client_settings), partition, end - 1, after)
            finally:    # the old sink goes on if the new one could not be set
                sink = await self.get(query_id)
                if sink is not None:
                    self._follow(sink)
        assert sink is not None
        return sink

    async def get(self, query_id: int) -> KafkaSink | None:
        row = await asyncio.to_thread(self.store.kafka_sink, query_id)
        return None if row is None else KafkaSink.from_row(row)

    async def remove(self, query_id: int) -> bool:
        """Stop and forget the query's sink; False if it had none."""
        async with self._changing:
            await self._stop(query_id)
            return await asyncio.to_thread(self.store.delete_kafka_sink, query_id)

    async def close(self) -> None:
        """Stop every delivery (a restart reads back what was produced meanwhile)."""
        await self._stop_all()

    async def _run(self, sink: KafkaSink) -> None:
        """Deliver the query's events after the cursor until the query is deleted or the
        hub closes; after any failure, start again (reading the broker back) after a
        backoff."""
        delay = self.backoff
        while True:
            try:
                sink = await self._deliver(sink)
                return
            except (KafkaSinkError, KafkaUnavailable) as exc:
                self.failures += 1
                log.warning("Kafka sink of query %d (%s): %s; retrying in %.1f s",
                            sink.query_id, sink.topic, exc, delay)
            await asyncio.sleep(delay)
            stored = await self.get(sink.query_id)
            if stored is None:      # the query (and so its sink) was deleted meanwhile
                return
            sink = stored
            delay = min(max(delay, 1e-3) * 2, self.backoff_max)

    async def _deliver(self, sink: KafkaSink) -> KafkaSink:
        client = self.client_factory(sink)
        await asyncio.to_thread(client.open)
        found = await asyncio.to_thread(client.last_delivered, sink.partition,
                                        sink.delivered_offset)
        if found is not None and found.batch > sink.delivered_through:
            log.info("Kafka sink of query %d: the broker holds batch %d, past the stored "
                     "cursor %d; going on after it", sink.query_id, found.batch,
                     sink.delivered_through)
            sink = await self._advance(sink, found)
        while True:
            cursor = sink.delivered_through
            try:
                async with self.hub.subscribe(
                        sink.query_id, None if cursor == EVERY_RETAINED else cursor) as events:
                    async for event in events:
                        run = [event, *events.ready(CURSOR_COMMIT_EVERY - 1)]
                        sink = await self._produce(client, sink, run)
                        self.delivered += len(run)
                    return sink
            except SubscriptionGone as exc:
                log.error("Kafka sink of query %d: the events after batch %d were pruned "
                          "before they were produced; going on after batch %d",
                          sink.query_id, cursor, exc.earliest)
                sink = replace(sink, delivered_through=exc.earliest)

    async def _produce(self, client: SinkClient, sink: KafkaSink,
                       run: list[EventRecord]) -> KafkaSink:
        produced = asyncio.ensure_future(asyncio.to_thread(client.produce, sink.partition, run))
        try:
            offset = await asyncio.shield(produced)
        except asyncio.CancelledError:
            # Let the transaction end, and record it, before the task does: a sink set anew
            # then reads the partition's end past it (at most TIMEOUT_SECONDS).
            try:
                offset = await produced
            except KafkaSinkError:
                raise asyncio.CancelledError from None
            await self._advance(sink, Delivered(run[-1].seq, offset))
            raise
        return await self._advance(sink, Delivered(run[-1].seq, offset))

    async def _advance(self, sink: KafkaSink, delivered: Delivered) -> KafkaSink:
        # Produced and committed on the broker before this write.
        await self._record(sink.query_id, delivered.batch, self.store.kafka_delivered,
                           sink.query_id, delivered.batch, delivered.offset)
        return replace(sink, delivered_through=delivered.batch,
                       delivered_offset=delivered.offset)
