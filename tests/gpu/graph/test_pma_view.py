"""The packed memory array's read view against the lists it must hold: NumPy here, the
CUDA copy kernel on the device (whose check compares it with the NumPy-style copy)."""
from __future__ import annotations

import numpy as np
import pytest

from gpu.graph.label_index import label_keys
from gpu.graph.pma.array import PackedMemoryArray
from gpu.graph.pma.layout import PMAConfig
from gpu.graph.pma import view as view_module
from gpu.graph.pma.view import ListView

VERTEX_BITS = 29


@pytest.fixture(params=[pytest.param("numpy", id="numpy"),
                        pytest.param("cupy", id="cupy", marks=pytest.mark.gpu)])
def xp(request):
    if request.param == "numpy":
        return np
    import cupy
    return cupy


def _host(xp, array) -> np.ndarray:
    return array if xp is np else array.get()


class Graph:
    """Directed labelled edges as a dict (u, v) -> edge label, with vertex labels."""

    def __init__(self, rng, n: int, labels: int) -> None:
        self.rng, self.n = rng, n
        self.label = rng.integers(0, labels, size=n)
        self.edges: dict[tuple[int, int], int] = {}

    def keys(self, pairs) -> np.ndarray:
        pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        return label_keys(pairs[:, 0], pairs[:, 1], self.label[pairs[:, 1]], VERTEX_BITS)

    def batch(self, inserts: int, deletes: int, around: int | None = None):
        """A batch of new and stored edges; `around`: a hub whose out-edges it grows."""
        stored = list(self.edges)
        gone = [stored[i] for i in self.rng.choice(len(stored), size=min(deletes, len(stored)),
                                                   replace=False)] if stored else []
        new: dict[tuple[int, int], int] = {}
        for _ in range(20 * inserts):
            if len(new) == inserts:
                break
            u, v = (int(x) for x in self.rng.integers(0, self.n, size=2))
            if around is not None:
                u = around
            if u != v and (u, v) not in self.edges and (u, v) not in new:
                new[(u, v)] = int(self.rng.integers(0, 5))
        for edge in gone:
            del self.edges[edge]
        self.edges.update(new)
        return new, gone

    def deg(self) -> np.ndarray:
        deg = np.zeros(self.n, dtype=np.int64)
        for u, _ in self.edges:
            deg[u] += 1
        return deg

    def lists(self, u: int) -> tuple[list, list, list]:
        """u's list as the view must hold it: by (label, neighbour)."""
        out = sorted((int(self.label[v]), v, lab) for (a, v), lab in self.edges.items()
                     if a == u)
        return [v for _, v, _ in out], [lb for lb, _, _ in out], [e for _, _, e in out]


def _compare(xp, view: ListView, pma, graph: Graph) -> None:
    deg = graph.deg()
    view.check(pma, deg)
    nbr, nlab, elab = (_host(xp, getattr(view, name)) for name in ("nbr", "nlab", "elab"))
    for u in range(graph.n):
        s, d = int(view.start[u]), int(deg[u])
        assert (nbr[s:s + d].tolist(), nlab[s:s + d].tolist(), elab[s:s + d].tolist()) \
            == graph.lists(u), u


@pytest.mark.parametrize(("long_list", "long_piece"),
                         [(view_module.LONG_LIST, view_module.LONG_PIECE), (3, 1000), (3, 2)],
                         ids=["warps", "a-block-a-list-of-3", "a-block-every-2-entries"])
@pytest.mark.parametrize("segment_size", [2, 32])
def test_random_batches_keep_every_list(xp, segment_size, long_list, long_piece,
                                        monkeypatch):
    """On the device, lists of `long_list` entries or more go to the block kernel, a block
    per `long_piece` entries: here most lists take it, in one piece or many, and with the
    defaults none (the checks compare each kernel with the NumPy copy)."""
    monkeypatch.setattr(view_module, "LONG_LIST", long_list)
    monkeypatch.setattr(view_module, "LONG_PIECE", long_piece)
    rng = np.random.default_rng(11)
    graph = Graph(rng, n=40, labels=3)
    config = PMAConfig(segment_size=segment_size, vertex_bits=VERTEX_BITS)
    pma = PackedMemoryArray(xp, graph.n, config)
    graph.batch(60, 0)
    keys = graph.keys(list(graph.edges))
    pma.load(xp.asarray(keys), xp.asarray(np.array(list(graph.edges.values()), np.int32)))
    view = ListView(xp, min_capacity=1)
    view.rebuild(pma, graph.deg())
    _compare(xp, view, pma, graph)
    moved = 0
    for step in range(60):
        around = 3 if step % 7 == 0 else None     # a hub outgrows its room, often
        new, gone = graph.batch(int(rng.integers(0, 12)), int(rng.integers(0, 8)), around)
        ik = graph.keys(list(new)) if new else np.empty(0, np.uint64)
        iv = np.array(list(new.values()), dtype=np.int32)
        dk = graph.keys(gone) if gone else np.empty(0, np.uint64)
        pma.apply(xp.asarray(ik), xp.asarray(iv), xp.asarray(dk))
        touched = np.unique(np.array([u for u, _ in list(new) + gone], dtype=np.int64))
        before = view.start.copy()
        view.refresh(pma, graph.deg(), touched)
        moved += int((view.start[:graph.n] != before[:graph.n]).sum())
        _compare(xp, view, pma, graph)
    # Both ways a list gets room again ran: moves to the top, and whole rebuilds.
    assert moved > 0 and view.rebuilds > 2


def test_vertices_beyond_the_first_rebuild_get_lists(xp):
    rng = np.random.default_rng(3)
    graph = Graph(rng, n=30, labels=2)
    config = PMAConfig(segment_size=4, vertex_bits=VERTEX_BITS)
    pma = PackedMemoryArray(xp, 10, config)
    view = ListView(xp, min_capacity=2)
    view.rebuild(pma, np.zeros(10, dtype=np.int64))     # an empty graph of 10 vertices
    pma.ensure_vertices(graph.n)
    graph.n = 30
    new, _ = graph.batch(50, 0)
    pma.apply(xp.asarray(graph.keys(list(new))), xp.asarray(np.array(list(new.values()),
                                                                      np.int32)),
              xp.asarray(np.empty(0, np.uint64)))
    view.refresh(pma, graph.deg(), np.unique([u for u, _ in new]))
    _compare(xp, view, pma, graph)


def _loaded(xp, seed: int):
    """A 12-vertex graph of 30 edges in an array, and a view of it."""
    graph = Graph(np.random.default_rng(seed), n=12, labels=2)
    pma = PackedMemoryArray(xp, graph.n, PMAConfig(segment_size=4, vertex_bits=VERTEX_BITS))
    graph.batch(30, 0)
    pma.load(xp.asarray(graph.keys(list(graph.edges))),
             xp.asarray(np.array(list(graph.edges.values()), np.int32)))
    view = ListView(xp)
    view.rebuild(pma, graph.deg())
    return graph, pma, view


def test_check_finds_a_stale_list(xp):
    graph, pma, view = _loaded(xp, 5)
    new, _ = graph.batch(5, 0)
    pma.apply(xp.asarray(graph.keys(list(new))),
              xp.asarray(np.array(list(new.values()), np.int32)),
              xp.asarray(np.empty(0, np.uint64)))
    with pytest.raises(AssertionError):     # the batch's vertices not refreshed
        view.check(pma, graph.deg())


def test_check_finds_a_wrong_entry(xp):
    graph, pma, view = _loaded(xp, 6)
    view.check(pma, graph.deg())
    u = int(np.argmax(graph.deg()))
    view.elab[int(view.start[u])] += 1
    with pytest.raises(AssertionError, match="elab"):
        view.check(pma, graph.deg())
