"""Tests for gpu.io: graph/query, update-stream, edge-list and label-file parsers."""
from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu.io import text as io_text
from gpu.io.edge_lists import random_labels, read_edge_list, read_label_file
from gpu.io.graphs import load_graph, parse_graph_text, read_graph, read_query, write_graph
from gpu.io.records import (
    ADD_VERTEX,
    DELETE_EDGE,
    DELETE_VERTEX,
    INSERT_EDGE,
    NO_LABEL,
    NO_TIME,
    FormatError,
    LabeledGraph,
    UpdateStream,
)
from gpu.io.streams import parse_updates_text, read_updates, split_stream, write_updates

GH_EDGES = Path(__file__).resolve().parents[4] / "shared/datasets/github/musae_git_edges.csv"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def raises_at(path, line: int, fragment: str, fn, *args, **kwargs) -> FormatError:
    """Assert fn raises FormatError at path:line with fragment in the message."""
    with pytest.raises(FormatError) as info:
        fn(*args, **kwargs)
    err = info.value
    prefix = f"{path}:{line}: " if line else f"{path}: "
    assert str(err).startswith(prefix), str(err)
    assert fragment in err.reason, err.reason
    assert (err.path, err.line) == (str(path), line)
    return err


def graph(ids, labels, edges, edge_labels=None) -> LabeledGraph:
    edges = np.array(edges, dtype=np.int64).reshape(-1, 2)
    if edge_labels is None:
        edge_labels = np.zeros(len(edges), dtype=np.int32)
    return LabeledGraph(np.array(ids), np.array(labels), edges[:, 0], edges[:, 1], edge_labels)


# --------------------------------------------------------------------------- graph files


def test_graph_file_with_comments_blank_lines_and_trailing_tokens(tmp_path):
    path = write(
        tmp_path, "g.txt",
        "# a comment\n"
        "t 3 2\n"
        "\n"
        "v 10 1 2   # degree after the label is ignored\n"
        "v\t5\t0\n"
        "v 7 3 extra tokens here\n"
        "e 10 5\n"
        "e 5 7 4 99\r\n",
    )
    g = read_graph(path)
    assert g.vertex_ids.tolist() == [10, 5, 7]
    assert g.vertex_labels.tolist() == [1, 0, 3]
    assert g.edge_src.tolist() == [10, 5]
    assert g.edge_dst.tolist() == [5, 7]
    assert g.edge_labels.tolist() == [0, 4]
    assert (g.num_vertices, g.num_edges) == (3, 2)
    assert g.vertex_ids.dtype == np.int64 and g.vertex_labels.dtype == np.int32
    assert g.edge_src.dtype == np.int64 and g.edge_labels.dtype == np.int32


def test_query_uses_the_graph_parser(tmp_path):
    path = write(tmp_path, "q.txt", "v 0 1\nv 1 2\ne 0 1 3\n")
    q = read_query(path)
    assert q.vertex_labels.tolist() == [1, 2] and q.edge_labels.tolist() == [3]


def test_graph_without_header_and_empty_graph():
    assert parse_graph_text("v 1 0\n").num_vertices == 1
    empty = parse_graph_text("# nothing\n\n")
    assert (empty.num_vertices, empty.num_edges) == (0, 0)


def test_write_read_graph_round_trip(tmp_path):
    g = graph([4, 2**62, 0], [3, 0, 2**31 - 1], [(4, 2**62), (0, 4)], np.array([5, 0]))
    path = tmp_path / "out.graph"
    write_graph(g, path)
    assert path.read_text().splitlines()[0] == "t 3 2"
    back = read_graph(path)
    for name in ("vertex_ids", "vertex_labels", "edge_src", "edge_dst", "edge_labels"):
        np.testing.assert_array_equal(getattr(back, name), getattr(g, name), err_msg=name)


@pytest.mark.parametrize(
    "text, line, fragment",
    [
        ("v 1 0\nv 2 0\nv 1 3\n", 3, "duplicate vertex id 1"),
        (f"v {2**62} 0\nv 1 0\nv {2**62} 1\n", 3, f"duplicate vertex id {2**62}"),
        (f"v {2**62} 0\nv 1 0\ne 1 {2**62}\ne {2**62} 1\n", 4, "duplicate edge"),
        ("v 1 0\nv 2 0\ne 2 2\n", 3, "self-loop on vertex 2"),
        ("v 1 0\ne 1 9\nv 2 0\n", 2, "edge endpoint 9 is not declared"),
        ("v 1 0\nv 2 0\ne 1 2\ne 1 2 5\n", 4, "duplicate edge 1-2"),
        ("v 1 0\nv 2 0\ne 1 2\ne 2 1\n", 4, "duplicate edge 2-1"),
        ("v 1 0\nv 2 0\ne 1 2 x\n", 3, "edge label 'x' is not an integer"),
        ("v 1 0\nv 2 0\ne 1 2.5\n", 3, "edge target '2.5' is not an integer"),
        ("v -1 0\n", 1, "vertex id '-1' is negative"),
        ("v 1 -2\n", 1, "vertex label '-2' is negative"),
        ("v 9223372036854775808 0\n", 1, "vertex id '9223372036854775808' is too large"),
        ("v 1 2147483648\n", 1, "vertex label '2147483648' is too large"),
        ("v 1 0\n\nx 1 2\n", 3, "unknown record type 'x'"),
        ("v 1 0\n-v 1\n", 2, "unknown record type '-v'"),
        ("v 1\n", 1, "missing the vertex label"),
        ("v 1 0\ne 1\n", 2, "missing the edge target"),
        ("t 2\n", 1, "missing the edge count"),
        ("# c\nt 2 1\nv 1 0\nv 2 0\n", 2, "declares 2 vertices and 1 edges, file has 2 and 0"),
        ("v 1 0\nt 1 0\n", 2, "'t' header must precede"),
        ("t 1 0\nt 1 0\nv 1 0\n", 2, "duplicate 't' header"),
    ],
)
def test_graph_errors_name_file_and_line(tmp_path, text, line, fragment):
    path = write(tmp_path, "graph.txt", text)
    raises_at(path, line, fragment, read_graph, path)


def test_syntax_error_reported_before_earlier_semantic_error(tmp_path):
    path = write(tmp_path, "g.txt", "v 1 0\nv 1 0\nv 2 zz\n")
    raises_at(path, 3, "vertex label 'zz'", read_graph, path)


def test_earliest_semantic_error_wins(tmp_path):
    path = write(tmp_path, "g.txt", "v 1 0\nv 2 0\ne 1 2\ne 2 2\ne 2 1\nv 2 0\n")
    raises_at(path, 4, "self-loop", read_graph, path)


def test_error_line_numbers_across_chunks(tmp_path, monkeypatch):
    # Small chunks make the bad line land in a later chunk than the first.
    monkeypatch.setattr(io_text, "_CHUNK_BYTES", 64)
    lines = [f"v {i} {i % 3}" for i in range(200)]
    lines[150] = "v 150 oops"
    path = write(tmp_path, "g.txt", "\n".join(lines) + "\n")
    raises_at(path, 151, "vertex label 'oops'", read_graph, path)
    lines[150] = "v 150 1"
    lines.append("e 3 4  # trailing")
    g = read_graph(write(tmp_path, "ok.txt", "\n".join(lines) + "\n"))
    assert g.num_vertices == 200 and g.vertex_labels[150] == 1 and g.num_edges == 1


def test_values_only_the_slow_path_accepts_still_load():
    # 19-digit ids exceed the fast path's digit budget; '+' signs are integers too.
    g = parse_graph_text("v 1000000000000000000 +4\nv 0007 1\ne 7 1000000000000000000\n")
    assert g.vertex_ids.tolist() == [10**18, 7]
    assert g.vertex_labels.tolist() == [4, 1]


def test_gzip_input(tmp_path):
    path = tmp_path / "g.txt.gz"
    path.write_bytes(gzip.compress(b"v 1 0\nv 2 1\ne 1 2\n"))
    assert read_graph(path).num_edges == 1
    bad = tmp_path / "bad.gz"
    bad.write_bytes(gzip.compress(b"v 1 0\nv 1 1\n"))
    raises_at(bad, 2, "duplicate vertex id 1", read_graph, bad)


def test_format_error_str_and_pickle():
    err = FormatError("a.txt", 0, "whole-file problem")
    assert str(err) == "a.txt: whole-file problem"
    assert isinstance(err, ValueError)
    back = pickle.loads(pickle.dumps(FormatError("a.txt", 3, "bad")))
    assert (back.path, back.line, back.reason, str(back)) == ("a.txt", 3, "bad", "a.txt:3: bad")


# --------------------------------------------------------------------------- update streams


def test_update_stream_records_and_label_defaults(tmp_path):
    path = write(
        tmp_path, "u.txt",
        "v 1 2\n# comment\n\n-v 1\n-v 3 4\ne 1 2\ne 1 2 6 # why\n-e 1 2\n-e 2 1 6\n",
    )
    s = read_updates(path)
    assert len(s) == 7
    assert s.kind.tolist() == [ADD_VERTEX, DELETE_VERTEX, DELETE_VERTEX, INSERT_EDGE,
                               INSERT_EDGE, DELETE_EDGE, DELETE_EDGE]
    assert s.a.tolist() == [1, 1, 3, 1, 1, 1, 2]
    assert s.b.tolist() == [0, 0, 0, 2, 2, 2, 1]
    assert s.label.tolist() == [2, NO_LABEL, 4, 0, 6, NO_LABEL, 6]
    assert s.line.tolist() == [1, 4, 5, 6, 7, 8, 9]
    assert s.source == str(path)
    assert s.kind.dtype == np.int8 and s.label.dtype == np.int32


def test_stream_is_not_deduplicated_or_checked_semantically():
    s = parse_updates_text("e 1 2\ne 1 2\n-v 9\ne 3 3\n")
    assert len(s) == 4


@pytest.mark.parametrize(
    "text, line, fragment",
    [
        ("v 1\n", 1, "'v' record is missing the vertex label"),
        ("e 1 2\nv 1 2 3\n", 2, "unexpected extra token '3'"),
        ("-e 1 2 3 4\n", 1, "unexpected extra token '4'"),
        ("-v\n", 1, "missing the vertex id"),
        ("e 1\n", 1, "missing the edge target"),
        ("e 1 2\n\nt 3 4\n", 3, "unknown record type 't'"),
        ("+e 1 2\n", 1, "unknown record type '+e'"),
        ("e 1 b\n", 1, "edge target 'b' is not an integer"),
        ("-e 1 2 -1\n", 1, "edge label '-1' is negative"),
        ("e 1 2 0 -4\n", 1, "event time '-4' is negative"),
        ("e 1 2 0 7 8\n", 1, "unexpected extra token '8'"),
        ("-e 1 2 0 7\n", 1, "unexpected extra token '7'"),
        ("v 99999999999999999999 1\n", 1, "vertex id '99999999999999999999' is too large"),
    ],
)
def test_stream_errors(tmp_path, text, line, fragment):
    path = write(tmp_path, "updates.txt", text)
    raises_at(path, line, fragment, read_updates, path)


def test_write_read_updates_round_trip(tmp_path):
    s = UpdateStream.from_records(
        [(ADD_VERTEX, 5, 0, 1), (DELETE_VERTEX, 5, 0, NO_LABEL), (DELETE_VERTEX, 6, 0, 2),
         (INSERT_EDGE, 1, 2, 0), (INSERT_EDGE, 2, 3, 9), (DELETE_EDGE, 1, 2, NO_LABEL),
         (DELETE_EDGE, 2, 3, 9)],
        source="mem",
    )
    path = tmp_path / "s.txt.gz"
    write_updates(s, path)
    assert_same_stream(read_updates(path), s)


def test_event_times_after_the_label_read_and_written(tmp_path):
    s = parse_updates_text("e 1 2 0 100\ne 2 3\ne 3 4 5 0\n-e 1 2\nv 9 1\n")
    assert s.time.tolist() == [100, NO_TIME, 0, NO_TIME, NO_TIME]
    assert s.label.tolist() == [0, 0, 5, NO_LABEL, 1]
    assert parse_updates_text("e 1 2 3\n").time is None       # untimed input as before
    path = tmp_path / "timed.txt"
    write_updates(s, path)
    assert path.read_text().splitlines()[:3] == ["e 1 2 0 100", "e 2 3 0", "e 3 4 5 0"]
    back = read_updates(path)
    assert_same_stream(back, s)
    assert back.time.tolist() == s.time.tolist()


def assert_same_stream(got: UpdateStream, want: UpdateStream):
    for name in ("kind", "a", "b", "label", "line"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)


def test_from_records_rejects_bad_records():
    with pytest.raises(FormatError, match=r"^mem:2: label -1 not allowed"):
        UpdateStream.from_records([(ADD_VERTEX, 1, 0, 0), (INSERT_EDGE, 1, 2, NO_LABEL)], "mem")
    with pytest.raises(FormatError, match="unknown record kind 7"):
        UpdateStream.from_records([(7, 1, 0, 0)])
    with pytest.raises(FormatError, match="out of range"):
        UpdateStream.from_records([(INSERT_EDGE, 1, 2**63, 0)])
    # b is meaningless for vertex records and is stored as 0.
    assert UpdateStream.from_records([(DELETE_VERTEX, 1, 8, NO_LABEL)]).b.tolist() == [0]


def test_batches_slice_and_empty():
    s = UpdateStream.from_records([(INSERT_EDGE, i, i + 1, 0) for i in range(10)])
    assert [len(b) for b in s.batches(4)] == [4, 4, 2]
    assert [b.a[0] for b in s.batches(4)] == [0, 4, 8]
    assert [len(b) for b in s.batches(None)] == [10]
    assert [len(b) for b in s.batches(0)] == [10]
    assert [len(b) for b in s.batches(10)] == [10]
    with pytest.raises(ValueError):
        list(s.batches(-1))
    part = s.slice(2, 5)
    assert part.a.tolist() == [2, 3, 4] and part.line.tolist() == [3, 4, 5]
    empty = UpdateStream.empty()
    assert len(empty) == 0 and list(empty.batches(3)) == [] and list(empty.batches(None)) == []
    assert len(parse_updates_text("# only a comment\n")) == 0


def test_mismatched_field_lengths_rejected():
    with pytest.raises(ValueError, match="differ in length"):
        UpdateStream(np.zeros(2), np.zeros(2), np.zeros(2), np.zeros(3), np.zeros(2), "x")


records = st.one_of(
    st.tuples(st.just(ADD_VERTEX), st.integers(0, 2**63 - 1), st.just(0),
              st.integers(0, 2**31 - 1)),
    st.tuples(st.just(DELETE_VERTEX), st.integers(0, 2**63 - 1), st.just(0),
              st.integers(NO_LABEL, 2**31 - 1)),
    st.tuples(st.just(INSERT_EDGE), st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1),
              st.integers(0, 2**31 - 1)),
    st.tuples(st.just(DELETE_EDGE), st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1),
              st.integers(NO_LABEL, 2**31 - 1)),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(records, max_size=30))
def test_random_streams_round_trip(tmp_path_factory, recs):
    s = UpdateStream.from_records(recs)
    path = tmp_path_factory.mktemp("rt") / "s.txt"
    write_updates(s, path)
    assert_same_stream(read_updates(path), s)


tokens = st.sampled_from(
    ["v", "e", "t", "-v", "x", "0", "7", "12", "-3", "+4", "a1", "#", "", "1,2", "5%", "\t",
     "1234567890123456789"]
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(tokens, max_size=5).map(" ".join), max_size=8).map("\n".join))
def test_fast_path_agrees_with_reference_parser(text):
    # Whenever the vectorised pass accepts a chunk, it must match the line parser.
    data = text.encode()
    for grammar in (io_text.GRAPH_GRAMMAR, io_text.STREAM_GRAMMAR, io_text.EDGE_LIST_GRAMMAR):
        try:
            fast = io_text._parse_fast(data, grammar)
        except io_text._NeedsSlowPath:
            continue
        slow = io_text._parse_slow(data, grammar, "<t>", 0)
        for got, want in zip(fast, slow):
            np.testing.assert_array_equal(got, want)


# --------------------------------------------------------------------------- edge lists


def test_snap_edge_list_with_comments_dedup_and_self_loops(tmp_path):
    path = write(
        tmp_path, "snap.txt",
        "# Directed graph: x\n% also a comment\n1\t2\n2 1\n3 3\n\n2  5 1700000000\n1 2\n5 1\n",
    )
    g = read_edge_list(path, num_labels=4, seed=1)
    assert list(zip(g.edge_src.tolist(), g.edge_dst.tolist())) == [(1, 2), (2, 5), (5, 1)]
    # 3 only appears in a dropped self-loop, so it is not a vertex.
    assert g.vertex_ids.tolist() == [1, 2, 5]
    assert g.edge_labels.tolist() == [0, 0, 0]


def test_csv_header_detection(tmp_path):
    with_header = write(tmp_path, "a.csv", "id_1,id_2\n0,1\n1,2\n")
    without = write(tmp_path, "b.csv", "0,1\n1,2\n")
    for path in (with_header, without):
        g = read_edge_list(path, num_labels=2)
        assert g.edge_src.tolist() == [0, 1] and g.edge_dst.tolist() == [1, 2]


def test_edge_list_errors_keep_line_numbers_after_header(tmp_path):
    path = write(tmp_path, "e.csv", "src,dst\n0,1\n1,x\n")
    raises_at(path, 3, "edge target 'x' is not an integer", read_edge_list, path, num_labels=2)
    neg = write(tmp_path, "n.txt", "# c\n0 1\n-1 2\n")
    raises_at(neg, 3, "edge source '-1' is negative", read_edge_list, neg, num_labels=2)
    short = write(tmp_path, "s.txt", "0 1\n4\n")
    raises_at(short, 2, "missing the edge target", read_edge_list, short, num_labels=2)


@pytest.mark.parametrize("text, line, fragment", [
    # Another delimiter: the first line was taken for a header, the rest then failed or,
    # on a one-line file, an empty graph loaded.
    ("0;1\n1;2\n", 1, "line '0;1' is missing the edge target"),
    ("# c\n0|1\n", 2, "line '0|1' is missing the edge target"),
    # A first line with an integer in it is data, not a header.
    ("1,x\n2,3\n", 1, "edge target 'x' is not an integer"),
    ("u,1\n", 1, "edge source 'u' is not an integer"),
    # A header and nothing else, or nothing at all, is no graph.
    ("a,b\n", 1, "no edges: only the header line 'a,b'"),
    ("# c\n\nsrc dst\n# d\n", 3, "no edges: only the header line 'src dst'"),
    ("", 0, "no edges"),
    ("# only a comment\n", 0, "no edges"),
])
def test_edge_list_that_cannot_be_parsed_is_refused(tmp_path, text, line, fragment):
    path = write(tmp_path, "e.csv", text)
    raises_at(path, line, fragment, read_edge_list, path, num_labels=2)


def test_label_file_header_rule_is_the_edge_lists(tmp_path):
    labels = write(tmp_path, "l.txt", "1;0\n")
    raises_at(labels, 1, "line '1;0' is missing the vertex label", read_label_file, labels)


def test_label_source_must_be_exactly_one(tmp_path):
    path = write(tmp_path, "e.txt", "0 1\n")
    with pytest.raises(ValueError, match="exactly one"):
        read_edge_list(path)
    with pytest.raises(ValueError, match="exactly one"):
        read_edge_list(path, labels_path=path, num_labels=3)


def test_label_file(tmp_path):
    edges = write(tmp_path, "e.txt", "5 1\n1 3\n")
    labels = write(tmp_path, "l.csv", "id,label\n# c\n3,2\n1,0\n5,7\n9,1\n")
    ids, labs = read_label_file(labels)
    assert ids.tolist() == [3, 1, 5, 9] and labs.tolist() == [2, 0, 7, 1]
    assert labs.dtype == np.int32
    g = read_edge_list(edges, labels_path=labels)
    # 9 is only in the label file: an isolated vertex.
    assert g.vertex_ids.tolist() == [1, 3, 5, 9]
    assert g.vertex_labels.tolist() == [0, 2, 7, 1]


def test_label_file_errors(tmp_path):
    edges = write(tmp_path, "e.txt", "5 1\n1 3\n")
    partial = write(tmp_path, "l.txt", "5 1\n3 0\n")
    raises_at(partial, 0, f"vertex 1 of {edges} has no label",
              read_edge_list, edges, labels_path=partial)
    dup = write(tmp_path, "d.txt", "1 0\n3 0\n1 2\n")
    raises_at(dup, 3, "duplicate label for vertex 1", read_label_file, dup)
    bad = write(tmp_path, "b.txt", "1 0\n3 -4\n")
    raises_at(bad, 2, "vertex label '-4' is negative", read_label_file, bad)


def test_random_labels_deterministic_and_in_range():
    ids = np.arange(5000)
    a = random_labels(ids, 7, seed=3)
    assert a.dtype == np.int32 and a.shape == (5000,)
    assert a.min() == 0 and a.max() == 6
    np.testing.assert_array_equal(a, random_labels(ids, 7, seed=3))
    assert not np.array_equal(a, random_labels(ids, 7, seed=4))
    expected = np.random.default_rng(3).integers(0, 7, size=5000)
    np.testing.assert_array_equal(a, expected)
    with pytest.raises(ValueError):
        random_labels(ids, 0, seed=0)


def test_edge_list_random_labels_follow_sorted_ids(tmp_path):
    path = write(tmp_path, "e.txt", "9 4\n4 1\n")
    g = read_edge_list(path, num_labels=50, seed=11)
    assert g.vertex_ids.tolist() == [1, 4, 9]
    np.testing.assert_array_equal(g.vertex_labels, random_labels(g.vertex_ids, 50, 11))


def test_load_graph_dispatch(tmp_path):
    graph_file = write(tmp_path, "g.txt", "# header comment\n\nt 2 1\nv 1 0\nv 2 1\ne 1 2\n")
    g = load_graph(graph_file)
    assert g.vertex_labels.tolist() == [0, 1]
    with pytest.raises(ValueError, match="own labels"):
        load_graph(graph_file, num_labels=3)
    edge_file = write(tmp_path, "e.txt", "# v 1 2 is only a comment\n1 2\n")
    e = load_graph(edge_file, num_labels=3)
    assert e.vertex_ids.tolist() == [1, 2] and e.num_edges == 1


@pytest.mark.skipif(not GH_EDGES.exists(), reason=f"GitHub dataset not present at {GH_EDGES}")
def test_real_github_edge_list():
    g = load_graph(GH_EDGES, num_labels=4, seed=0)
    assert g.num_vertices == 37_700
    assert g.num_edges == 289_003
    assert g.vertex_ids.tolist() == list(range(37_700))


# --------------------------------------------------------------------------- split_stream


def test_split_stream():
    n, m = 200, 1000
    rng = np.random.default_rng(0)
    pairs = set()
    while len(pairs) < m:
        u, v = sorted(rng.integers(0, n, 2).tolist())
        if u != v:
            pairs.add((u, v))
    edges = sorted(pairs)
    g = graph(np.arange(n), np.zeros(n), edges, np.arange(m) % 5)
    initial, stream = split_stream(g, 0.1, seed=5)
    assert len(stream) == 100 and initial.num_edges == 900
    assert initial.num_vertices == n
    assert set(stream.kind.tolist()) == {INSERT_EDGE}
    held = set(zip(stream.a.tolist(), stream.b.tolist()))
    kept = list(zip(initial.edge_src.tolist(), initial.edge_dst.tolist()))
    assert held.isdisjoint(kept) and held | set(kept) == pairs
    assert kept == sorted(kept)  # initial graph keeps the original edge order
    label_of = dict(zip(edges, (np.arange(m) % 5).tolist()))
    assert stream.label.tolist() == [label_of[e] for e in zip(stream.a.tolist(), stream.b.tolist())]
    assert list(zip(stream.a.tolist(), stream.b.tolist())) != sorted(held)  # random order
    again_initial, again = split_stream(g, 0.1, seed=5)
    assert_same_stream(again, stream)
    np.testing.assert_array_equal(again_initial.edge_src, initial.edge_src)
    other = split_stream(g, 0.1, seed=6)[1]
    assert not np.array_equal(other.a, stream.a)
    assert len(split_stream(g, 0.0, seed=1)[1]) == 0


@pytest.mark.parametrize("fraction", [1.0, -0.1, 1.5, float("nan")])
def test_split_stream_rejects_bad_fraction(fraction):
    g = graph([1, 2], [0, 0], [(1, 2)])
    with pytest.raises(ValueError, match="fraction"):
        split_stream(g, fraction, seed=0)
