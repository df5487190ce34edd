"""The OpenAPI document describes the API exactly: schemathesis, in-process against the app,
runs every check (all of them but max_response_time, which is a budget, not conformance)
through its examples, coverage, fuzzing and stateful phases (the last following the links
from POST and GET /v1/queries to the query's routes) with 0 failures.

The default run is bounded (~1,400 cases, a fixed seed); the `slow` variant runs more with
another fixed seed, and `python -m benchmarks.openapi_conformance` the long run of
docs/benchmarks.md (any seed).
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
from tests.service.conftest import BACKEND, DEVICE_GRAPH, wait_ready  # noqa: E402

KEY = "conformance-key-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}

# The graph every run starts from: the vertices the document's examples name (0-9), a ring
# of them, and a standing query, so that the examples' batches and the links' routes have
# something to act on.
START_GRAPH = {"vertices": [[v, v % 3] for v in range(10)],
               "edges": [[v, (v + 1) % 10] for v in range(10)]}
START_QUERY = {"pattern": {"vertices": [{"id": 0, "label": 0}, {"id": 1, "label": 1}],
                           "edges": [{"source": 0, "target": 1}]}}

# The `detail` of a schema error that refuses only values the request's schema refuses too,
# told apart from the rest by the refused input (checked in _not_schema_valid).
NOT_SCHEMA_VALID = r"Input should be (a valid integer|less than or equal to)"
# The largest id or cursor the schemas allow.
MAX_ID = 2**63 - 1

# What schemathesis reports that the API does by design, each with why.  A failure is
# dropped only when the check, the operation (a regex on "METHOD /path"), the status and the
# problem's `detail` (a regex) all match; every other failure fails the test.
#
# Refusals of schema-valid requests (positive_data_acceptance) for what no JSON Schema can
# say: a rule relating two values of one request, or the service's state.
_PATTERN = r"POST /v1/queries(:validate)?"
_CURSOR = (r"GET /v1/queries(/\{query_id\}/(results|events|webhook/dead-letters))?|"
           r"PUT /v1/queries/\{query_id\}/(webhook|kafka)")
DOCUMENTED: tuple[tuple[str, str, int, str, str], ...] = (
    ("RejectedPositiveData", "POST /v1/batches", 422, r"^Idempotency-Key .* was used for a "
     "request with another body", "a key's first body is the service's state"),
    ("RejectedPositiveData", _PATTERN + r"|PUT /v1/graph", 422,
     r"is not connected|uses undeclared|is a self-loop|appears twice|duplicate vertex id|"
     r"duplicate edge|is not declared by a 'v' line|self-loop on vertex|header declares",
     "a pattern's edges relate its vertex ids to one another, a `t` line's counts to the "
     "lines that follow"),
    ("RejectedPositiveData", r"POST /v1/queries", 422,
     r"^max_matches_per_batch: only for deliver=matches$",
     "the query parameters of a text/plain pattern relate to one another (the JSON body's "
     "schema says it: QueryCreate's anyOf)"),
    ("RejectedPositiveData", _PATTERN, 422,
     r"^before\[\d+\]: \(\d+, \d+\) (names an edge the query lacks|orders an edge "
     r"before itself)",
     "`before` pairs index the pattern's edges: a relation between two values of the body"),
    ("RejectedPositiveData", _CURSOR, 422, r"is past the (end|last batch)",
     "a cursor past the last id or batch given out depends on the state"),
    ("RejectedPositiveData", r"PUT /v1/graph", 422, r"apply to edge lists only",
     "num_labels and label_seed are for an edge-list body: a parameter's relation to the "
     "body's type"),
    ("RejectedPositiveData", r"PUT /v1/graph", 422,
     r"is an edge list without labels|is a graph file with its own labels|give num_labels "
     r"or a labels file, not both|label_seed applies to num_labels only|has no label$|"
     r"duplicate label for vertex|graph: the graph has no vertices|body: the graph has no "
     r"vertices",
     "an edge list is labelled by num_labels or by a labels part, for each of its "
     "vertices, a graph file by itself: a relation between the body, its parts and the "
     "parameters; an edge list of self-loops only has no vertex (they are dropped)"),
    ("RejectedPositiveData", r"PUT /v1/queries/\{query_id\}/kafka", 422,
     r"^body\.settings: client settings: ",
     "librdkafka's configuration properties and what they take are the client library's"),
    ("ServerError", r"PUT /v1/queries/\{query_id\}/kafka", 503, r"^Kafka at ",
     "no Kafka broker runs beside this test: the route's documented 503 for a broker it "
     "cannot reach (tests/service/test_kafka.py runs one)"),
    ("RejectedPositiveData", r"POST /v1/batches", 422,
     r"is a self-loop|self-loop on vertex|does not exist and is not added in this batch|"
     r"is added twice with different labels|is both added and deleted in one batch|"
     r"already exists with label|touches a vertex deleted in this batch|"
     r"is inserted twice with different labels",
     "a batch's updates relate to one another and to the graph (README, Semantics)"),
    ("RejectedPositiveData", r".*", 422, NOT_SCHEMA_VALID,
     "not the API's: JSON Schema counts 2.0 as an integer, which the service refuses "
     "deliberately (service/schemas.py, _Strict); and schemathesis's generator passes "
     "integers past 2^53 through floats, so that 2^63 + 191 comes out as `maximum: "
     "2^63 - 1`-valid"),
)

PHASES = ("examples", "coverage", "fuzzing", "stateful")


@dataclass
class Outcome:
    cases: int = 0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    phases: dict[str, str] = field(default_factory=dict)
    links: list[str] = field(default_factory=list)
    seconds_by_scenario: dict[str, float] = field(default_factory=dict)
    dropped: int = 0


def conformance_settings(data_dir: Path) -> Settings:
    """The app under test: a key set (the bearer scheme and 401s in the document), webhook and
    Kafka deliveries given up quickly (the fuzzer points them at hosts that do not exist),
    an event stream's first event (its heartbeat, without results) soon."""
    return Settings(data_dir=data_dir, synchronous="normal", backend=BACKEND,
                    device_graph=DEVICE_GRAPH, api_key=KEY, webhook_attempts=1,
                    webhook_timeout_seconds=0.5, kafka_timeout_seconds=0.2,
                    heartbeat_seconds=0.05)


def run_conformance(data_dir: Path, *, max_examples: int, seed: int | None = 0,
                    workers: int = 1, max_time: int | None = None,
                    phases: tuple[str, ...] = PHASES,
                    stateful_examples: int | None = None, shrink: bool = True) -> Outcome:
    """schemathesis's whole run (every check; the `phases`, by default examples, coverage,
    fuzzing and stateful) against a fresh app on `data_dir`, its failures and errors as
    text.  `stateful_examples`: the stateful phase's scenarios, when not `max_examples`;
    `shrink`: failing cases are reduced to a smallest one (slow on a long run)."""
    app = create_app(conformance_settings(data_dir))
    config = {
        "checks": {"enabled": True},
        "generation": {"mode": "all", "max-examples": max_examples, "no-shrink": not shrink},
        "phases": {name: {"enabled": name in phases} for name in PHASES},
        "auth": {"openapi": {"bearer": {"bearer": KEY}}},
        "workers": workers,
        # The SSE route's stream never ends by itself: read its first event, then hang up.
        "max-stream-events": 1,
        "request-timeout": 30,
    }
    # The stateful phase follows the document's links only: schemathesis's inferred ones
    # (from Location headers and response schemas) take a query's webhook and Kafka sink
    # for the query itself, which are 404s until their PUT.
    config["phases"]["stateful"]["inference"] = {"algorithms": []}
    if stateful_examples is not None:
        config["phases"]["stateful"]["generation"] = {"max-examples": stateful_examples}
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
        links: set[str] = set()
        started = time.monotonic()
        for event in from_schema(schema).execute():
            if isinstance(event, events.ScenarioFinished):
                statistic.on_scenario_finished(event.recorder)
                label = f"{event.phase.value} {event.recorder.label}"
                outcome.seconds_by_scenario[label] = \
                    outcome.seconds_by_scenario.get(label, 0.0) + event.elapsed_time
                if event.phase == PhaseName.STATEFUL_TESTING:
                    links |= {case.transition.id for case in event.recorder.cases.values()
                              if case.transition is not None and case.is_transition_applied}
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
        outcome.links = sorted(links)
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
    wait_ready(client, timeout=300)
    assert client.put("/v1/graph", json=START_GRAPH, headers=AUTH).status_code == 200
    assert client.post("/v1/queries", json=START_QUERY, headers=AUTH).status_code == 201


def _refusal_filter(outcome: Outcome):
    rules = [(check, re.compile(operation), status, re.compile(detail))
             for check, operation, status, detail, _ in DOCUMENTED]

    def filter_failure(context, failure, case, response) -> bool:
        """Keep every failure but those DOCUMENTED."""
        try:
            detail = response.json().get("detail", "")
        except (ValueError, AttributeError):
            return True
        if any(type(failure).__name__ == check and operation.fullmatch(case.operation.label)
               and response.status_code == status and pattern.search(detail)
               and (pattern.pattern != NOT_SCHEMA_VALID or _not_schema_valid(case, response))
               for check, operation, status, pattern in rules):
            outcome.dropped += 1
            return False
        return True

    return filter_failure


def _not_schema_valid(case, response) -> bool:
    """Whether every schema error of `response` refuses, in the request's JSON body, a
    float with no fraction (`2.0`) for an integer or an integer above MAX_ID (whatever
    branch of a union the error names)."""
    errors = response.json().get("errors") or []
    found = False
    for error in errors:
        loc = error["loc"]
        if loc[0] != "body" or not isinstance(case.body, (dict, list)):
            return False
        value = case.body
        for step in loc[1:]:
            if isinstance(value, dict) and step in value:
                value = value[step]
            elif isinstance(value, list) and isinstance(step, int) and step < len(value):
                value = value[step]
            elif isinstance(step, str):     # a union's branch (`int`, `str`): the same value
                continue
            else:
                return False
        if error["type"] == "string_type" and not isinstance(value, str):
            continue    # a union's string branch, refusing what another branch is for
        integral_float = isinstance(value, float) and value.is_integer()
        too_large = type(value) is int and value > MAX_ID
        if not (integral_float or too_large):
            return False
        found = True
    return found


def _report(outcome: Outcome) -> str:
    return (f"{len(outcome.failures)} failures, {len(outcome.errors)} errors in "
            f"{outcome.cases} cases; phases {outcome.phases}\n\n"
            + "\n\n".join(outcome.errors + outcome.failures))


def _check(outcome: Outcome, min_cases: int, *, links: bool = True) -> None:
    assert not outcome.errors and not outcome.failures, _report(outcome)
    for phase in ("examples", "coverage", "fuzzing", "stateful"):
        assert outcome.phases.get(phase) == Status.SUCCESS.value, _report(outcome)
    assert outcome.cases >= min_cases, _report(outcome)
    if links:
        # The stateful phase went from a query (listed or registered) to one of its routes
        # through the document's links (which ones depends on the cases the seed draws).
        assert any(link.startswith(("GET /v1/queries -> [20", "POST /v1/queries -> [20"))
                   and " /v1/queries/{query_id}" in link for link in outcome.links), \
            outcome.links


def test_schemathesis_finds_nothing(tmp_path):
    # ~1,400 cases, ~40 s on two cores, with a fixed seed: the same cases every run, among
    # them a stateful step from a query to its routes.
    outcome = run_conformance(tmp_path / "data", max_examples=3, stateful_examples=10)
    _check(outcome, min_cases=1000)


@pytest.mark.slow
def test_schemathesis_finds_nothing_in_a_longer_run(tmp_path):
    # 40 examples an operation, another fixed seed: 2,000-4,000 cases, a minute or two on
    # two cores.  Fixed, so that CI's verdict is the code's, not a draw's (a random seed once
    # reached only the snapshot link in its stateful phase); the long run of
    # benchmarks/openapi_conformance.py is the place for new seeds.  Which links a seed's
    # stateful phase reaches is the default run's check.
    outcome = run_conformance(tmp_path / "data", max_examples=40, seed=1)
    _check(outcome, min_cases=1000, links=False)
