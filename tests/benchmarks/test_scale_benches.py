"""The PMA and scale benchmarks end to end on tiny R-MAT graphs (NumPy / CPU executor):
every record present, the PMA's invariants checked, the engine's counts exact."""
import json

import numpy as np
import pytest

from benchmarks import pma_bench, scale_bench
from benchmarks.pma_bench import _Rng, canonical, rmat_pairs
from gpu.graph.pma.layout import key_dst, key_src
from tests.graphs import Data, Pattern, embeddings


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_rmat_edges_are_distinct_undirected_and_in_range():
    rng = _Rng(np, 1)
    perm = rng.permutation(1 << 10)
    keys = canonical(np, *rmat_pairs(np, rng, 10, 5000, perm))
    src, dst = key_src(keys), key_dst(keys)
    assert (src < dst).all() and (dst < 1 << 10).all()
    # Skewed: the busiest vertex has far more than the mean degree.
    degree = np.bincount(np.concatenate([src, dst]), minlength=1 << 10)
    assert degree.max() > 10 * degree.mean()


def test_pma_bench_reports_every_kind_and_checks(tmp_path):
    out = tmp_path / "pma.jsonl"
    assert pma_bench.main(["--xp", "numpy", "--scale", "11", "--edges", "6000",
                           "--batch-sizes", "300", "40", "--batches", "2", "--check",
                           "--profile", "--json", str(out)]) == 0
    records = _records(out)
    kinds = [(r["what"], r.get("batch")) for r in records]
    assert kinds == [("load", None)] + [(k, b) for b in (300, 40)
                                        for k in ("insert", "delete", "mixed")] + \
        [("check", None)]
    load = records[0]
    assert load["directed"] == 12000 and load["bytes_per_directed_edge"] < 24
    assert all(r["phase_ms"] for r in records[1:-1])
    assert records[-1]["ok"]


def _state(engine) -> Data:
    """The engine's graph as the brute-force matcher's model, in external ids."""
    g = engine.graph
    alive = np.flatnonzero(g.alive[: g.num_slots])
    vertices = dict(zip(g.ext[alive].tolist(), g.label[alive].tolist(), strict=True))
    us, vs, labels = g.edges()
    edges = {frozenset((int(g.ext[u]), int(g.ext[v]))): int(lab)
             for u, v, lab in zip(us.tolist(), vs.tolist(), labels.tolist(), strict=True)}
    return Data(vertices, edges)


def test_scale_bench_records_and_exact_counts(tmp_path, monkeypatch):
    """Every record is there, and the last timed batch's new matches equal the brute-force
    matcher's embeddings after it less those before it."""
    out = tmp_path / "scale.jsonl"
    seen = []
    real_apply = scale_bench.Engine.apply

    def apply(engine, stream, *args, **kwargs):
        result = real_apply(engine, stream, *args, **kwargs)
        seen.append((engine, stream, result))
        return result

    monkeypatch.setattr(scale_bench.Engine, "apply", apply)
    assert scale_bench.main(["--scale", "8", "--edges", "700", "--backend", "cpu",
                             "--kinds", "sparse", "--size", "3", "--queries", "1",
                             "--update-batch", "20", "--update-batches", "1",
                             "--batch-sizes", "1", "5", "--batches", "2",
                             "--json", str(out)]) == 0
    records = _records(out)
    assert [r["what"] for r in records] == ["load", "update-insert", "update-delete",
                                            "register", "match", "match"]
    assert records[3]["vertices"] == 3
    assert [(r["batch"], r["batches"]) for r in records[-2:]] == [(1, 2), (5, 2)]
    engine, stream, result = seen[-1]
    (qid, delta), = result.queries.items()
    query = engine.plan(qid).query
    pattern = Pattern(query.labels.tolist(),
                      [(a, b, lab) for (a, b), lab in zip(query.edges.tolist(),
                                                          query.edge_labels.tolist(),
                                                          strict=True)])
    after = _state(engine)
    before = Data(after.vertices, {k: lab for k, lab in after.edges.items()
                                   if k not in {frozenset((int(a), int(b)))
                                                for a, b in zip(stream.a, stream.b,
                                                                strict=True)}})
    assert len(before.edges) == len(after.edges) - 5
    assert delta.positive == len(embeddings(after, pattern)) - len(embeddings(before, pattern))
    assert delta.negative == 0
    assert delta.positive > 0, "the batch must create matches for the check to mean anything"


@pytest.mark.gpu
def test_scale_bench_reports_the_device_signature_memory(tmp_path, monkeypatch):
    """The signature table and candidate bits on the device, counted from their layout:
    per vertex slot a label, a degree, an alive flag, a label slot, one count per encoded
    label and the code words; per query one word of candidate bits a slot."""
    out = tmp_path / "scale.jsonl"
    engines = []
    real_init = scale_bench.Engine.__init__

    def init(engine, *args, **kwargs):
        real_init(engine, *args, **kwargs)
        engines.append(engine)

    monkeypatch.setattr(scale_bench.Engine, "__init__", init)
    assert scale_bench.main(["--scale", "8", "--edges", "700", "--backend", "cuda",
                             "--kinds", "sparse", "tree", "--size", "3", "--queries", "1",
                             "--update-batch", "20", "--update-batches", "1",
                             "--batch-sizes", "1", "--batches", "1",
                             "--json", str(out)]) == 0
    records = _records(out)
    (engine,) = engines
    signatures = engine.signatures
    capacity = engine.graph.label.shape[0]
    per_slot = 4 + 4 + 1 + 4 + 4 * len(signatures.labels) + 8 * signatures.words
    registered = [r for r in records if r["what"] == "register"]
    assert len(registered) == 2
    assert registered[-1]["signature_bytes"] == capacity * (per_slot + 4 * 2)
    load = records[0]
    assert load["signature_bytes"] == capacity * (4 + 4 + 1 + 4 + 8)     # no label encoded
    assert load["signature_bytes_per_directed_edge"] == round(
        load["signature_bytes"] / load["directed"], 2)
