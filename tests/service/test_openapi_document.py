"""The OpenAPI document says what the service checks: the text grammars' expressions accept
exactly what the readers read, 405s list every method of the path, the declared media types
and links are the real ones (schemathesis runs the whole document in
test_openapi_conformance.py; these pin the pieces it relies on)."""
from __future__ import annotations

import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu.io.records import FormatError
from gpu.plan.query import QueryError
from service.ingest import TEXT, InputError, parse_batch, parse_graph, EdgeListLabels
from service.labels import LabelError
from service.patterns import pattern_of
from service.schemas import (GRAPH_TEXT_SCHEMA, QUERY_TEXT_SCHEMA, UPDATE_TEXT_SCHEMA,
                             decimal_at_most)
from tests.service.conftest import running


def _matches(schema: dict, text: str) -> bool:
    return re.search(schema["pattern"], text) is not None


@pytest.mark.parametrize("limit", [0, 7, 10, 99, 100, 1000, 1073741823, 2**63 - 1])
def test_decimal_at_most_is_exactly_0_to_the_limit(limit):
    pattern = re.compile(decimal_at_most(limit))
    rng = random.Random(limit)
    near = [limit - 2, limit - 1, limit, limit + 1, limit + 2, limit * 10, limit // 10]
    for n in near + [rng.randrange(0, 2 * limit + 10) for _ in range(2000)]:
        if n >= 0:
            assert bool(pattern.fullmatch(str(n))) == (n <= limit), n
    assert not pattern.fullmatch("0" + str(limit)) and not pattern.fullmatch("")


# What an update stream's lines are drawn from: a tag, then fields of every kind the reader
# sees (signs, leading zeros, past the ranges, names that look like integers), then
# perhaps a comment.
_TAGS = ["v", "-v", "e", "-e", "t", "x", "", "#c"]
_FIELDS = ["0", "-0", "+7", "007", "-3", "12", "+-", "1-", "-", "+", "--5", "1073741823",
           "1073741824", "9223372036854775807", "9223372036854775808", "person", "5a",
           "a#b", "é", "%"]
_SPACES = [" ", "  ", "\t", "\r", "\x0b", "\x0c"]


@st.composite
def _texts(draw) -> str:
    lines = []
    for _ in range(draw(st.integers(0, 4))):
        tokens = [draw(st.sampled_from(_TAGS))]
        tokens += draw(st.lists(st.sampled_from(_FIELDS), max_size=4))
        if draw(st.booleans()):
            tokens.append("# comment")
        spaces = draw(st.lists(st.sampled_from(_SPACES), min_size=len(tokens) + 1,
                               max_size=len(tokens) + 1))
        lines.append(spaces[0] + "".join(t + s for t, s in zip(tokens, spaces[1:])))
    return "\n".join(lines)


@settings(max_examples=600, deadline=None)
@given(_texts())
def test_update_text_schema_is_exactly_what_the_batch_reader_takes(text):
    try:
        accepted = parse_batch(text.encode(), TEXT, 1_000_000).size > 0
    except (FormatError, InputError, LabelError):
        accepted = False
    assert _matches(UPDATE_TEXT_SCHEMA, text) == accepted, text


# An edge insert's event time: the lines the random texts reach only by chance.
@pytest.mark.parametrize("text, ok", [
    ("e 0 1 0 5", True), ("e 0 1 person 9223372036854775807 # t", True),
    ("e 0 1 0 -0", True), ("e 0 1 0 -3", False), ("e 0 1 0 9223372036854775808", False),
    ("e 0 1 0 5 6", False), ("e 0 1 0 late", False), ("-e 0 1 0 5", False),
    ("v 0 0 5", False)])
def test_update_text_schema_reads_event_times_as_the_reader_does(text, ok):
    try:
        accepted = parse_batch(text.encode(), TEXT, 1_000_000).size > 0
    except (FormatError, InputError, LabelError):
        accepted = False
    assert accepted == ok and _matches(UPDATE_TEXT_SCHEMA, text) == ok


# Query files: what the pattern reader takes, and what only relations between lines refuse
# (a duplicate id, an undeclared endpoint: not the expression's to say).
@pytest.mark.parametrize("text, syntax_ok", [
    ("v 0 0\nv 1 1\ne 0 1\n", True),
    ("t 2 1\n  v 0 person # first\nv\t1 -0 extra tokens\ne 0 1 knows more\n", True),
    ("# c\n\nt 2 0\nv 0 0\nv 1 1", True), ("v 0 1-\nv 1 +", True), ("v 0 -1\nv 1 1", False),
    ("v 0 0\nt 2 1\nv 1 1", False),         # `t` after a `v`
    ("v 0 0\n", False),                      # one vertex
    ("", False), ("e 0 1", False), ("v 0 0\nv 1 1\nx", False),
    ("v 0 1073741824\nv 1 1", False), ("v 0 1073741823\nv 1 1", True),
    ("v 0 0\nv 1 1\ne 0", False), ("v +5 0\nv 007 1", True),
    ("".join(f"v {i} 0\n" for i in range(32)), True),
    ("".join(f"v {i} 0\n" for i in range(33)), False),
])
def test_query_text_schema_follows_the_pattern_reader(text, syntax_ok):
    assert _matches(QUERY_TEXT_SCHEMA, text) == syntax_ok
    try:
        pattern = pattern_of(text)
        read = 2 <= len(pattern.vertices) <= 32
    except (FormatError, QueryError, LabelError):
        read = False
    assert read == syntax_ok



@pytest.mark.parametrize("text, graph_file, edge_list", [
    ("v 0 0\ne 0 0\n", True, False),
    ("1 2\n2 3\n", False, True), ("src,dst\n1,2 # c\n% c\n3, 4, extra", False, True),
    ("% only a comment", False, False), ("a b\n", False, False), ("v,x\n1 2", False, False),
    ("1 -2", False, False), ("1;2", False, False),
])
def test_graph_text_schema_follows_the_graph_reader(text, graph_file, edge_list):
    alternatives = [re.search(a["pattern"], text) is not None
                    for a in GRAPH_TEXT_SCHEMA["anyOf"]]
    assert alternatives == [graph_file, edge_list]
    labels = EdgeListLabels(num_labels=3) if edge_list else EdgeListLabels()
    try:
        parse_graph(text.encode(), TEXT, labels)
        read = True
    except (FormatError, InputError, LabelError):
        read = False
    # A graph file of a self-loop is read and refused for it: a relation, not syntax.
    assert read == (edge_list or (graph_file and "e 0 0" not in text))


# ---- answers ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    with running(tmp_path_factory.mktemp("document") / "d", max_query_vertices=6) as client:
        yield client


def test_an_integer_label_past_the_names_is_refused_in_a_query_file(api):
    # The reader takes integers up to 2^31 - 1; those from 2^30 are the names' ids (it had
    # been a 500).
    r = api.post("/v1/queries", content="v 0 1073741824\nv 1 1\ne 0 1",
                 headers={"content-type": "text/plain"})
    assert r.status_code == 422
    assert r.json()["detail"] == "pattern: vertex label 1073741824 out of range [0, 1073741824)"


@pytest.mark.parametrize("method, path, allowed", [
    ("OPTIONS", "/v1/queries/1", "DELETE, GET"), ("PATCH", "/v1/graph", "GET, PUT"),
    ("GET", "/v1/batches", "POST"), ("POST", "/v1/queries/1/webhook", "DELETE, GET, PUT"),
])
def test_405_says_every_method_of_the_path(api, method, path, allowed):
    r = api.request(method, path)
    assert r.status_code == 405 and r.headers["allow"] == allowed
    assert r.json()["detail"] == f"{method} {path}: this path takes {allowed}"


def test_declared_media_types_are_the_answers(api):
    document = api.get("/openapi.json").json()
    metrics = document["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    assert list(metrics) == [api.get("/metrics").headers["content-type"]]
    events = document["paths"]["/v1/queries/{query_id}/events"]["get"]["responses"]["200"]
    assert list(events["content"]) == ["text/event-stream"]
    assert "schema" not in events["content"]["text/event-stream"]    # itemSchema only


def test_a_new_query_links_to_every_route_of_the_query(api):
    paths = api.get("/openapi.json").json()["paths"]
    links = paths["/v1/queries"]["post"]["responses"]["201"]["links"]
    ids = {(path, method): operation["operationId"] for path, operations in paths.items()
           if path.startswith("/v1/queries/{query_id}")
           for method, operation in operations.items()}
    # A webhook or a Kafka sink is there once its PUT set it: its PUT links to the rest.
    later = {key: ids.pop(key) for key in list(ids)
             if key[0].endswith(("/webhook", "/kafka")) and key[1] != "put"}
    assert set(links) == set(ids.values()) and len(ids) == 7 and len(later) == 4
    for link in links.values():
        assert link["parameters"] == {"query_id": "$response.body#/id"}
    listed = paths["/v1/queries"]["get"]["responses"]["200"]["links"]
    assert set(listed) == set(links)
    for link in listed.values():
        assert link["parameters"] == {"query_id": "$response.body#/queries/0/id"}
    for (path, _), operation_id in later.items():
        set_links = paths[path]["put"]["responses"]["200"]["links"]
        assert set_links[operation_id]["parameters"] == {"query_id": "$request.path.query_id"}


def test_the_pattern_size_is_the_servers(api):
    document = api.get("/openapi.json").json()
    assert document["components"]["schemas"]["Pattern"]["properties"]["vertices"][
        "maxItems"] == 6
    text = document["paths"]["/v1/queries"]["post"]["requestBody"]["content"]["text/plain"]
    assert "{1,5}" in text["schema"]["pattern"]


def test_optional_parameters_are_not_nullable(api):
    document = api.get("/openapi.json").json()
    for operations in document["paths"].values():
        for operation in operations.values():
            for parameter in operation.get("parameters", ()):
                assert "null" not in str(parameter["schema"]), parameter


@pytest.mark.parametrize("body", [
    {"pattern": "v 0 0\nv 1 1\ne 0 1", "backfill": 0},
    {"pattern": "v 0 0\nv 1 1\ne 0 1", "max_matches_per_batch": "5", "deliver": "matches"},
])
def test_request_values_are_of_their_schema_type(api, body):
    r = api.post("/v1/queries:validate", json=body)
    assert r.status_code == 422 and r.json()["code"] == "invalid_input"


def test_a_body_that_is_not_utf8_is_422(api):
    query = api.post("/v1/queries", json={"pattern": "v 0 0\nv 1 1\ne 0 1"}).json()["id"]
    r = api.put(f"/v1/queries/{query}/webhook", content=b"\xff\xfe{",
                headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["code"] == "invalid_input"
    assert r.json()["detail"].startswith("body: not a readable JSON document")


def test_instance_is_a_uri_reference_for_any_path(api):
    r = api.get("/v1/queries/%C3%A9%20x/results")     # the id is no integer: a 422
    assert r.status_code == 422
    assert r.json()["instance"] == "/v1/queries/%C3%A9%20x/results"
