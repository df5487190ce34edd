"""The OpenAPI document describes the API exactly: schemathesis, in-process against the app,
runs every check through its examples, coverage, fuzzing and stateful phases (the last
following the links from POST /v1/queries to the query's routes) with 0 failures.

The default run is bounded (a few hundred cases); the `slow` variant runs more, and
`python -m benchmarks.openapi_conformance --max-examples N` the long run of docs/benchmarks.md.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

schemathesis = pytest.importorskip("schemathesis")

from schemathesis.engine import Status, events, from_schema  # noqa: E402
from schemathesis.engine.run import PhaseName  # noqa: E402
from schemathesis.engine.statistic import Statistic  # noqa: E402
from schemathesis.python import asgi  # noqa: E402

from service.main import create_app  # noqa: E402
from service.settings import Settings  # noqa: E402
from tests.service.conftest import BACKEND, DEVICE_GRAPH  # noqa: E402

KEY = "conformance-key-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}

# The graph every run starts from: the vertices the document's examples name (0-9), a ring
# of them, and a standing query, so that the examples' batches and the links' routes have
# something to act on.
START_GRAPH = {"vertices": [[v, v % 3] for v in range(10)],
               "edges": [[v, (v + 1) % 10] for v in range(10)]}
START_QUERY = {"pattern": {"vertices": [{"id": 0, "label": 0}, {"id": 1, "label": 1}],
                           "edges": [{"source": 0, "target": 1}]}}

# Refusals of schema-valid requests that no JSON Schema can express, because they depend on
# the service's state or relate two values of one request: schemathesis's
# positive_data_acceptance check cannot know them.  Each is (operation, the 422's `detail`
# as a regex, why); any other refusal of schema-valid data still fails the run.
STATEFUL_REFUSALS: tuple[tuple[str, str, str], ...] = ()


@dataclass
class Outcome:
    cases: int = 0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    phases: dict[str, str] = field(default_factory=dict)
    links_covered: int = 0
    dropped: int = 0


def conformance_settings(data_dir: Path) -> Settings:
    """The app under test: a key set (the bearer scheme and 401s in the document), webhook and
    Kafka deliveries given up quickly (the fuzzer points them at hosts that do not exist)."""
    return Settings(data_dir=data_dir, synchronous="normal", backend=BACKEND,
                    device_graph=DEVICE_GRAPH, api_key=KEY, webhook_attempts=1,
                    webhook_timeout_seconds=0.5, kafka_timeout_seconds=1)


def run_conformance(data_dir: Path, *, max_examples: int, seed: int | None = 0,
                    workers: int = 1, max_time: int | None = None) -> Outcome:
    """schemathesis's whole run (every check; examples, coverage, fuzzing, stateful) against
    a fresh app on `data_dir`, its failures and errors as text."""
    app = create_app(conformance_settings(data_dir))
    config = {
        "checks": {"enabled": True},
        "generation": {"mode": "all", "max-examples": max_examples},
        "phases": {name: {"enabled": True}
                   for name in ("examples", "coverage", "fuzzing", "stateful")},
        "auth": {"openapi": {"bearer": {"bearer": KEY}}},
        "workers": workers,
        # The SSE route's stream never ends by itself: read its first event, then hang up.
        "max-stream-events": 1,
        "request-timeout": 30,
    }
    if seed is not None:
        config["seed"] = seed
    if max_time is not None:
        config["max-time"] = max_time
    outcome = Outcome()
    try:
        with asgi.get_client(app) as client:   # starts the app's lifespan
            _seed(client)
            schema = schemathesis.openapi.from_asgi(
                "/openapi.json", app, config=schemathesis.Config.from_dict(config),
                headers=AUTH)
        schema.hook(_refusal_filter(outcome))
        statistic = Statistic()
        started = time.monotonic()
        for event in from_schema(schema).execute():
            if isinstance(event, events.ScenarioFinished):
                statistic.on_scenario_finished(event.recorder)
            elif isinstance(event, events.PhaseFinished):
                outcome.phases[event.phase.name.value] = (
                    event.status.value if event.phase.is_enabled
                    else f"skipped: {event.phase.skip_reason}")
            elif isinstance(event, events.NonFatalError):
                outcome.errors.append(f"{event.label}: {event.info.message}")
            elif isinstance(event, events.FatalError):
                outcome.errors.append(repr(event.exception))
            elif isinstance(event, events.EngineFinished):
                outcome.seconds = time.monotonic() - started
                outcome.failures += [f"run: {f.title}: {f.message}" for f in event.failures]
        outcome.cases = statistic.total_cases
        outcome.links_covered = len(getattr(statistic, "links_covered", ()) or ())
        for label, groups in statistic.failures.items():
            for grouped in groups.values():
                response = grouped.response
                answer = "" if response is None else (
                    f"\n    answered {response.status_code}: {response.content[:300]!r}")
                for failure in grouped.failures:
                    outcome.failures.append(f"{label}: {failure.title}: {failure.message}"
                                            f"{answer}\n    {grouped.code_sample or ''}")
    finally:
        asgi.shutdown_lifespans()
    return outcome


def _seed(client) -> None:
    ready_by = time.monotonic() + 300
    while client.get("/readyz").status_code != 200:
        assert time.monotonic() < ready_by, "the service did not become ready"
        time.sleep(0.05)
    assert client.put("/v1/graph", json=START_GRAPH, headers=AUTH).status_code == 200
    assert client.post("/v1/queries", json=START_QUERY, headers=AUTH).status_code == 201


def _refusal_filter(outcome: Outcome):
    rules = [(operation, re.compile(detail)) for operation, detail, _ in STATEFUL_REFUSALS]

    def filter_failure(context, failure, case, response) -> bool:
        """Keep every failure but a 422 to schema-valid data listed in STATEFUL_REFUSALS."""
        if type(failure).__name__ != "RejectedPositiveData" or response.status_code != 422:
            return True
        try:
            detail = response.json().get("detail", "")
        except ValueError:
            return True
        if any(case.operation.label == operation and pattern.search(detail)
               for operation, pattern in rules):
            outcome.dropped += 1
            return False
        return True

    return filter_failure


def _report(outcome: Outcome) -> str:
    return (f"{len(outcome.failures)} failures, {len(outcome.errors)} errors in "
            f"{outcome.cases} cases; phases {outcome.phases}\n\n"
            + "\n\n".join(outcome.errors + outcome.failures))


def _check(outcome: Outcome, min_cases: int) -> None:
    assert not outcome.errors and not outcome.failures, _report(outcome)
    for phase in ("examples", "coverage", "fuzzing", "stateful"):
        assert outcome.phases.get(phase) == Status.SUCCESS.value, _report(outcome)
    assert outcome.cases >= min_cases, _report(outcome)


def test_schemathesis_finds_nothing(tmp_path):
    outcome = run_conformance(tmp_path / "data", max_examples=5)
    _check(outcome, min_cases=300)


@pytest.mark.slow
def test_schemathesis_finds_nothing_in_a_longer_run(tmp_path):
    outcome = run_conformance(tmp_path / "data", max_examples=50, seed=None)
    _check(outcome, min_cases=3000)
