"""Settings that shape the engine thread: its Numba threads and the CPU pipeline."""
from __future__ import annotations

import os

import numba
import pytest
from pydantic import ValidationError

from service.settings import DEMO_GRAPH, Settings


def test_engine_threads_default_to_three_quarters_of_the_cpus_within_numbas_pool():
    most = max(1, (os.cpu_count() or 1) * 3 // 4)
    assert Settings().numba_threads() == min(most, numba.config.NUMBA_NUM_THREADS)
    assert Settings(engine_threads=1).numba_threads() == 1
    assert Settings(engine_threads=10_000).numba_threads() == numba.config.NUMBA_NUM_THREADS


def test_engine_threads_from_the_environment(monkeypatch):
    monkeypatch.setenv("MOTIFSTREAM_ENGINE_THREADS", "")       # compose's "not set"
    assert Settings().engine_threads is None
    monkeypatch.setenv("MOTIFSTREAM_ENGINE_THREADS", "1")
    assert Settings().numba_threads() == 1
    monkeypatch.setenv("MOTIFSTREAM_ENGINE_THREADS", "0")
    with pytest.raises(ValidationError, match="engine_threads"):
        Settings()


def test_batch_groups_setting_from_the_environment(monkeypatch):
    assert Settings().cpu_batch_groups is True
    monkeypatch.setenv("MOTIFSTREAM_CPU_BATCH_GROUPS", "false")
    assert Settings().cpu_batch_groups is False


def test_the_engine_thread_runs_with_engine_threads(tmp_path):
    """Numba's thread count is per thread: the engine thread, where every engine call
    runs, has the setting's; other threads keep theirs."""
    from tests.service.conftest import running

    before = numba.get_num_threads()
    with running(tmp_path / "data", engine_threads=1) as client:
        engine = client.app.state.motifstream.engine
        assert engine._pool.submit(numba.get_num_threads).result() == 1
    assert numba.get_num_threads() == before


def test_only_the_server_process_freezes_what_start_up_left(tmp_path):
    """serve()'s app freezes the objects start-up left alive before it says ready; an app
    built otherwise (tests, embedding) leaves the collector alone."""
    import gc

    from fastapi.testclient import TestClient

    from service.main import create_app
    from tests.service.conftest import running, wait_ready

    # Relative to what was frozen before: not by this code, but 375 objects were in the
    # device host's run of the service tests on CUDA (2026-11-23).  It may shrink: frozen
    # objects of an earlier test in this process are freed when they die (87 of them during
    # this block in a run on the device host, 2026-11-29); a freeze would add ~10^5.
    before = gc.get_freeze_count()
    with running(tmp_path / "plain"):
        assert gc.get_freeze_count() <= before
    settings = Settings(data_dir=tmp_path / "frozen", synchronous="normal", backend="cpu")
    try:
        with TestClient(create_app(settings, freeze_gc_when_ready=True)) as client:
            wait_ready(client)
            assert gc.get_freeze_count() > before + 10_000
            assert client.post("/v1/batches", json={"insert_vertices": [[1, 0], [2, 0]],
                                                    "insert_edges": [[1, 2]]}).status_code == 200
    finally:
        gc.unfreeze()


def test_demo_loads_the_embedded_demo_graph_and_nothing_else(monkeypatch):
    assert Settings().graph is None
    assert Settings(demo=True).graph == DEMO_GRAPH and DEMO_GRAPH.is_file()
    for other in ({"graph": "g.txt"}, {"labels": "l.txt"}, {"num_labels": 3}):
        with pytest.raises(ValidationError, match="demo"):
            Settings(demo=True, **other)
    monkeypatch.setenv("MOTIFSTREAM_DEMO", "true")
    assert Settings().graph == DEMO_GRAPH


def test_serve_demo_bulk_loads_the_demo_graph(tmp_path):
    from gpu.io.graphs import load_graph
    from tests.service.conftest import running

    demo = load_graph(DEMO_GRAPH)
    with running(tmp_path / "data", demo=True) as client:
        info = client.get("/v1/graph").json()
        assert (info["vertices"], info["edges"]) == (demo.num_vertices, demo.num_edges)


def test_cors_origins_from_the_environment(monkeypatch):
    assert Settings().cors_origins == []                        # off by default
    monkeypatch.setenv("MOTIFSTREAM_CORS_ORIGINS", "")          # compose's "not set"
    assert Settings().cors_origins == []
    monkeypatch.setenv("MOTIFSTREAM_CORS_ORIGINS", "https://a.example, http://b.example:8080/")
    assert Settings().cors_origins == ["https://a.example", "http://b.example:8080"]
    monkeypatch.setenv("MOTIFSTREAM_CORS_ORIGINS", '["https://c.example", "*"]')
    assert Settings().cors_origins == ["https://c.example", "*"]


@pytest.mark.parametrize("origin", ["a.example", "ftp://a.example", "https://a.example/app",
                                    "https://a.example?x=1", "https://"])
def test_settings_refuse_what_is_not_an_origin(origin):
    with pytest.raises(ValidationError, match=r"cors_origins: .* is not an origin"):
        Settings(cors_origins=[origin])


def test_log_format_is_json_or_text():
    assert Settings().log_format == "json"
    assert Settings(log_format="text").log_format == "text"
    with pytest.raises(ValidationError, match="log_format"):
        Settings(log_format="xml")


def test_subscriber_limits_from_the_environment(monkeypatch):
    settings = Settings()
    assert (settings.subscriber_stall_seconds, settings.subscriber_max_lag,
            settings.socket_send_buffer) == (30.0, None, 128 * 1024)
    monkeypatch.setenv("MOTIFSTREAM_SUBSCRIBER_MAX_LAG", "")       # compose's "not set"
    monkeypatch.setenv("MOTIFSTREAM_SOCKET_SEND_BUFFER", "")       # the kernel's autotuning
    assert (Settings().subscriber_max_lag, Settings().socket_send_buffer) == (None, None)
    for name, bad in (("SUBSCRIBER_STALL_SECONDS", "0"), ("SUBSCRIBER_MAX_LAG", "0"),
                      ("SOCKET_SEND_BUFFER", "1024")):
        monkeypatch.setenv(f"MOTIFSTREAM_{name}", bad)
        with pytest.raises(ValidationError, match=name.lower()):
            Settings()
        monkeypatch.delenv(f"MOTIFSTREAM_{name}")
