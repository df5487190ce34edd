"""Chaos: SIGKILLs of the server's process group and of its storage writer under sustained
mixed ingest lose, duplicate and change nothing acknowledged (benchmarks/chaos.py runs it;
`python -m benchmarks.chaos --kills 100 --writer-kills 10` is the long run)."""
from __future__ import annotations

import random

import httpx
import numpy as np
import pytest

from benchmarks import chaos
from benchmarks.chaos import ChaosFailure, Config, Run, random_graph
from gpu.batch import BatchRejected
from gpu.engine import Engine
from gpu.io.graphs import parse_graph_text
from service.ingest import parse_batch
from service.main import EXIT_WRITER_LOST


@pytest.mark.slow
def test_twenty_sigkills_lose_nothing(tmp_path):
    """90-165 s on the 2-vCPU VM (as loaded): 18 kills of the process group, 2 of the writer
    alone (each restart 3-5 s), and 2 spells of failing writes."""
    report = Run(Config(kills=18, writer_kills=2, write_faults=2, seed=7), tmp_path).execute()
    assert (report.kills, report.writer_kills, report.write_faults) == (18, 2, 2)
    assert report.unavailable_answers > 0, report     # the failing writes were 503s
    assert report.problems == []
    assert (report.lost, report.duplicates, report.gaps, report.mismatches) == (0, 0, 0, 0)
    # The run did what it claims: many batches, some refused, retries across the kills,
    # events to follow and deliver.
    assert report.acknowledged > 300 and report.rejected > 0, report
    assert report.retries > 0 and report.events > 100, report
    assert report.webhook_deliveries >= report.events, report


@pytest.mark.slow
def test_sigkills_with_retention_and_a_windowed_query_lose_nothing(tmp_path):
    """Timed batches (late ones too) on a store with retention, a windowed query standing:
    recovery from snapshots and the batch log brings back every time, the watermark and
    the expiry, so that per-batch results equal a run that never crashed."""
    report = Run(Config(kills=8, writer_kills=1, write_faults=0, seed=9, retention=40,
                        window=12, webhook=False), tmp_path).execute()
    assert report.kills == 8 and report.problems == []
    assert (report.lost, report.duplicates, report.gaps, report.mismatches) == (0, 0, 0, 0)
    assert report.acknowledged > 100 and report.expired > 0, report


class _ExtraBatch(Run):
    """A run in which one batch reaches the service behind the clients' backs, as an
    unacknowledged batch made visible would."""

    def _check(self, clients, followers, receiver):
        body = self.parts[0].draw(random.Random(5), 3, reject=False)[0]
        r = httpx.post(self.server.url + "/v1/batches", content=body,
                       headers={"content-type": "text/plain"}, timeout=60)
        assert r.status_code == 200, r.text
        super()._check(clients, followers, receiver)


def test_the_checks_find_a_batch_nobody_acknowledged(tmp_path):
    """The harness's checks can fail: a batch no client was answered for is found in the
    service's count, the batch log, the replay and the followers' progress."""
    with pytest.raises(ChaosFailure) as caught:
        _ExtraBatch(Config(kills=1, writer_kills=0, write_faults=0, seed=3,
                           up_seconds=(0.5, 0.5), webhook=False), tmp_path).execute()
    message = str(caught.value)
    assert "was never acknowledged" in message, message
    assert "acknowledged" in message and "the service holds" in message, message
    assert "final graph differs from the run that never crashed" in message, message


def test_the_workload_is_valid_or_refused_as_drawn():
    """Every batch the clients draw as valid is applied by the engine, every one drawn to
    be refused is refused whole, and the clients' model of the graph stays the engine's."""
    cfg = Config(seed=11, clients=1, vertices=60)
    text, (part,) = random_graph(cfg)
    engine = Engine(parse_graph_text(text), backend="cpu")
    rng = random.Random(11)
    refused = 0
    for _ in range(300):
        reject = rng.random() < 0.2
        body, ops = part.draw(rng, cfg.max_updates, reject)
        stream = parse_batch(body.encode(), "text/plain", 10**6).to_stream(None)
        if reject:
            with pytest.raises(BatchRejected):
                engine.apply(stream)
            refused += 1
            continue
        engine.apply(stream)
        part.apply(ops)
    assert refused > 30
    graph = engine.to_labeled()
    assert set(map(int, graph.vertex_ids)) == set(part.labels)
    edges = {(min(u, v), max(u, v)) for u, v in zip(graph.edge_src.tolist(),
                                                      graph.edge_dst.tolist())}
    assert edges == part.edges()
    labels = dict(zip(graph.vertex_ids.tolist(), graph.vertex_labels.tolist()))
    assert labels == part.labels
    assert np.all(graph.edge_labels == 0)


def test_the_harness_expects_the_services_exit_status():
    assert chaos.EXIT_WRITER_LOST == EXIT_WRITER_LOST
