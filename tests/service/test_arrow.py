"""POST /v1/batches with Arrow IPC bodies (stream and file): the same batches as .npy, and
every refusal naming the column or row, changing nothing.  Needs pyarrow (the `arrow`
extra, in `test`); without it only the refusal that names the extra runs."""
from __future__ import annotations

import io
import random
import sys

import numpy as np
import pytest

from gpu.io.records import DELETE_EDGE, DELETE_VERTEX, NO_LABEL
from service.ingest import ARROW_FILE, ARROW_STREAM, NPY, parse_batch
from tests.graphs import random_data
from tests.service.conftest import graph_json, graph_state, random_service_batch, running


@pytest.fixture
def pa():
    return pytest.importorskip("pyarrow")


def arrow_body(pa, table, form: str = "stream") -> bytes:
    sink = io.BytesIO()
    opener = pa.ipc.new_stream if form == "stream" else pa.ipc.new_file
    with opener(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def stream_table(pa, stream, types=("int64",) * 4):
    """An UpdateStream as an Arrow table with the given column types; labels NO_LABEL and
    the `v` of vertex rows become nulls, as a DataFrame with missing values writes them."""
    is_vertex = (stream.kind == 0) | (stream.kind == DELETE_VERTEX)
    columns = {"kind": stream.kind.tolist(), "u": stream.a.tolist(),
               "v": [None if vertex else b for vertex, b in zip(is_vertex, stream.b.tolist())],
               "label": [None if lab == NO_LABEL else lab for lab in stream.label.tolist()]}
    return pa.table({name: pa.array(values, getattr(pa, kind)())
                     for (name, values), kind in zip(columns.items(), types)})


def npy_body(stream) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.stack([stream.kind, stream.a, stream.b, stream.label], axis=1)
            .astype(np.int64))
    return buf.getvalue()


# Integer types people write: pandas and polars int64, DuckDB's int32, unsigned ids.
TYPES = [("int64",) * 4, ("int8", "uint32", "uint64", "int16"),
         ("uint8", "int32", "int32", "int32")]


def test_arrow_stream_and_file_parse_as_the_npy_array(pa):
    rng = random.Random(4)
    data = random_data(rng, 20, 3, 2, 0.3)
    for types in TYPES:
        stream = random_service_batch(rng, data, 3, 2, [100])
        want = parse_batch(npy_body(stream), NPY, 1000)._stream
        table = stream_table(pa, stream, types)
        for form, media in (("stream", ARROW_STREAM), ("file", ARROW_FILE),
                            ("file", ARROW_STREAM)):   # told apart by the file's magic
            got = parse_batch(arrow_body(pa, table, form), media, 1000)._stream
            for field in ("kind", "a", "b", "label", "line"):
                np.testing.assert_array_equal(getattr(got, field), getattr(want, field))


def test_several_record_batches_and_an_index_column(pa):
    table = pa.table({"kind": [2, 2, 3], "u": [1, 2, 1], "v": [2, 3, 2], "label": [0, 1, None],
                      "__index_level_0__": [7, 8, 9]})
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=1):
            writer.write_batch(batch)
    got = parse_batch(sink.getvalue(), ARROW_STREAM, 10)._stream
    assert got.kind.tolist() == [2, 2, DELETE_EDGE] and got.b.tolist() == [2, 3, 2]
    assert got.label.tolist() == [0, 1, NO_LABEL]


def test_arrow_batches_give_the_npy_batches_results(tmp_path, pa):
    answers = []
    for media in ("npy", "arrow"):
        with running(tmp_path / media) as client:
            rng = random.Random(9)
            data = random_data(rng, 14, 2, 2, 0.3)
            assert client.put("/v1/graph", json=graph_json(data.labeled())).status_code == 200
            r = client.post("/v1/queries", json={"pattern": "v 0 0\nv 1 0\nv 2 1\ne 0 1\n"
                                                            "e 1 2\ne 0 2\n"})
            assert r.status_code == 201, r.text
            out, next_id = [], [100]
            for i in range(6):
                stream = random_service_batch(rng, data, 2, 2, next_id)
                if media == "npy":
                    body, content_type = npy_body(stream), NPY
                else:
                    form = ("stream", "file")[i % 2]
                    body = arrow_body(pa, stream_table(pa, stream), form)
                    content_type = ARROW_STREAM if form == "stream" else ARROW_FILE
                r = client.post("/v1/batches", content=body,
                                headers={"content-type": content_type})
                assert r.status_code == 200, r.text
                out.append({k: r.json()[k] for k in ("batch", "applied", "ignored", "results")})
            answers.append(out)
    assert answers[0] == answers[1]
    # Batches that changed the graph, and a query that saw matches come and go.
    assert sum(sum(a["applied"].values()) for a in answers[0]) > 0
    assert any(r["positive"] or r["negative"] for a in answers[0] for r in a["results"].values())


def refusals(pa):
    """(body, media type, what the detail must name), one per kind of bad Arrow body."""
    good = pa.table({"kind": [0, 2], "u": [50, 50], "v": [None, 0], "label": [1, 0]})
    body = arrow_body(pa, good)
    return [
        (arrow_body(pa, good.drop_columns(["label"])), ARROW_STREAM, "column 'label' is missing"),
        (arrow_body(pa, good.append_column("weight", pa.array([1, 2]))), ARROW_STREAM,
         "unknown column 'weight'"),
        (arrow_body(pa, good.set_column(1, "u", pa.array([50.0, 50.0]))), ARROW_STREAM,
         "column 'u' has type double"),
        (arrow_body(pa, good.set_column(0, "kind", pa.array(["add", "insert"]))), ARROW_FILE,
         "column 'kind' has type string"),
        (arrow_body(pa, good.set_column(1, "u", pa.array([50, None]))), ARROW_STREAM,
         "row 1: u is null"),
        (arrow_body(pa, good.set_column(2, "v", pa.array([None, None], pa.int64()))),
         ARROW_STREAM, "row 1: v is null on an edge row"),
        (arrow_body(pa, good.set_column(3, "label", pa.array([None, 0], pa.int64()))),
         ARROW_STREAM, "row 0: label is null on an insertion"),
        (arrow_body(pa, good.set_column(3, "label", pa.array([1, -1]))), ARROW_STREAM,
         "row 1: label out of range"),
        (arrow_body(pa, good.set_column(0, "kind", pa.array([0, 7]))), ARROW_STREAM,
         "row 1: kind must be"),
        (arrow_body(pa, good.set_column(2, "v", pa.array([None, 50], pa.int64()))),
         ARROW_STREAM, "row 1: self-loop"),
        (arrow_body(pa, good.set_column(1, "u", pa.array([50, 2**63], pa.uint64()))),
         ARROW_STREAM, "row 1: u out of range"),
        (arrow_body(pa, good.set_column(2, "v", pa.array([None, 999], pa.int64()))),
         ARROW_STREAM, "row 1"),                          # the engine's refusal, by row
        (arrow_body(pa, pa.concat_tables([good] * 3)), ARROW_FILE,
         "the batch has 6 updates; the limit is 5"),
        (arrow_body(pa, good.slice(0, 0)), ARROW_STREAM, "the table has no rows"),
        (body[: len(body) // 2], ARROW_STREAM, "not a readable Arrow IPC stream"),
        (b"ARROW1\0\0 not really", ARROW_FILE, "not a readable Arrow IPC file"),
        (b"kind,u,v,label\n2,1,2,0\n", ARROW_STREAM, "not a readable Arrow IPC stream"),
    ]


def test_bad_arrow_bodies_are_refused_naming_the_column_or_row(tmp_path, pa):
    with running(tmp_path / "data", max_batch_updates=5) as client:
        assert client.put("/v1/graph", json={"vertices": [[0, 0], [1, 0]],
                                             "edges": [[0, 1]]}).status_code == 200
        before = graph_state(client)
        for body, media, named in refusals(pa):
            r = client.post("/v1/batches", content=body, headers={"content-type": media})
            assert r.status_code == 422, (named, r.text)
            assert r.headers["content-type"] == "application/problem+json"
            assert named in r.json()["detail"], (named, r.json()["detail"])
        assert graph_state(client) == before
        r = client.post("/v1/batches", content=arrow_body(pa, pa.table(
            {"kind": [0], "u": [50], "v": pa.array([None], pa.null()), "label": [1]})),
            headers={"content-type": ARROW_STREAM})
        assert r.status_code == 200 and r.json()["batch"] == before["batches"] + 1, r.text


def test_arrow_without_pyarrow_is_a_415_naming_the_extra(client, monkeypatch):
    # None in sys.modules makes `import pyarrow` raise ImportError, as on a server
    # installed without the extra; the service itself never imports it at start.
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.ipc", None)
    r = client.post("/v1/batches", content=b"ARROW1\0\0", headers={"content-type": ARROW_FILE})
    assert r.status_code == 415, r.text
    assert "motifstream[arrow]" in r.json()["detail"]
    assert client.get("/v1/graph").json()["batches"] == 0


def test_openapi_lists_the_arrow_bodies(client):
    content = client.get("/openapi.json").json()["paths"]["/v1/batches"]["post"][
        "requestBody"]["content"]
    assert {ARROW_STREAM, ARROW_FILE} <= set(content)
