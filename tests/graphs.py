"""Test graphs shared by several test modules: small labeled graphs and patterns with a
brute-force matcher, random batches around hubs, and skewed (hub-heavy) graphs."""
from __future__ import annotations

import functools
import random

import numpy as np

from gpu.io.records import (
    ADD_VERTEX,
    DELETE_EDGE,
    DELETE_VERTEX,
    INSERT_EDGE,
    NO_LABEL,
    LabeledGraph,
    UpdateStream,
)
from gpu.plan.query import QueryGraph


class Data:
    """Vertices {id: label} and edges {frozenset: label}."""

    def __init__(self, vertices: dict[int, int], edges: dict[frozenset, int]):
        self.vertices = dict(vertices)
        self.edges = dict(edges)

    def nbrs(self, v: int) -> list[int]:
        return [next(iter(k - {v})) for k in self.edges if v in k]

    def change(self, dead: set, new: dict[int, int], gone: set, inserted: dict) -> None:
        """Apply a batch's effect: vertices `dead` leave with their edges, edges `gone` go,
        edges `inserted` ({frozenset: label}) and vertices `new` ({id: label}) arrive."""
        for k in gone:
            del self.edges[k]
        self.edges = {k: lab for k, lab in self.edges.items() if not k & dead}
        self.edges.update(inserted)
        for v in dead:
            del self.vertices[v]
        self.vertices.update(new)

    def adj(self) -> dict[int, dict[int, int]]:
        out: dict[int, dict[int, int]] = {v: {} for v in self.vertices}
        for k, lab in self.edges.items():
            a, b = tuple(k)
            out[a][b] = lab
            out[b][a] = lab
        return out

    def labeled(self) -> LabeledGraph:
        ids = sorted(self.vertices)
        keys = [sorted(k) for k in self.edges]
        return LabeledGraph(np.array(ids, np.int64),
                            np.array([self.vertices[v] for v in ids], np.int32),
                            np.array([k[0] for k in keys], np.int64),
                            np.array([k[1] for k in keys], np.int64),
                            np.array([self.edges[frozenset(k)] for k in keys], np.int32))


class Pattern:
    def __init__(self, labels, edges):
        """edges: (a, b) or (a, b, edge label)."""
        self.labels = list(labels)
        self.edges = {(min(e[0], e[1]), max(e[0], e[1])): (e[2] if len(e) > 2 else 0)
                      for e in edges}

    def query(self) -> QueryGraph:
        keys = sorted(self.edges)
        return QueryGraph.build("q", np.arange(len(self.labels)), self.labels, keys,
                                [self.edges[k] for k in keys])


def embeddings(d: Data, p: Pattern) -> frozenset[tuple[int, ...]]:
    """Every injective map preserving vertex labels, edges and edge labels.

    Remembered by the graph's and the pattern's content: tests that run the same seeded
    stream under several engine configurations enumerate each state once."""
    key = (frozenset(d.vertices.items()), frozenset(d.edges.items()), tuple(p.labels),
           frozenset(p.edges.items()))
    return _embeddings(key)


@functools.lru_cache(maxsize=4096)
def _embeddings(key) -> frozenset[tuple[int, ...]]:
    """Plain backtracking over the query vertices in a connected order: a vertex's
    candidates are the neighbours of one matched query neighbour's image over an edge of
    the right label; each must have the vertex's label, be unused, and be joined with the
    right label to the images of all its other matched neighbours."""
    vertex_items, edge_items, labels, pattern_edges = key
    vertices = dict(vertex_items)
    n = len(labels)
    adj: dict[int, dict[int, int]] = {v: {} for v in vertices}
    for k, lab in edge_items:
        a, b = tuple(k)
        adj[a][b] = lab
        adj[b][a] = lab
    qadj: dict[int, dict[int, int]] = {a: {} for a in range(n)}
    for (a, b), lab in pattern_edges:
        qadj[a][b] = lab
        qadj[b][a] = lab
    # a connected order: every vertex after the first has an earlier neighbour
    order = [0]
    while len(order) < n:
        order.append(min(c for c in range(n) if c not in order
                         and any(x in order for x in qadj[c])))
    # per step: the query vertex, its label, and (earlier neighbour, edge label) pairs
    steps = [(c, labels[c], [(y, qadj[c][y]) for y in order[:i] if y in qadj[c]])
             for i, c in enumerate(order)]
    out = set()
    f = [0] * n
    used: set[int] = set()

    def extend(i: int) -> None:
        if i == n:
            out.add(tuple(f))
            return
        c, label, back = steps[i]
        if not back:
            pool = [x for x, lab in vertices.items() if lab == label]
        else:
            anchor, elab = back[0]
            pool = [x for x, lab in adj[f[anchor]].items()
                    if lab == elab and vertices[x] == label]
        for x in pool:
            if x in used:
                continue
            nbrs = adj[x]
            if any(nbrs.get(f[y]) != lab for y, lab in back[1:]):
                continue
            f[c] = x
            used.add(x)
            extend(i + 1)
            used.discard(x)

    extend(0)
    return frozenset(out)


def random_batch(rng: random.Random, d: Data, nlabels: int, nelabels: int,
                 next_id: list[int]) -> UpdateStream:
    recs = []
    alive = sorted(d.vertices)
    dead = set(rng.sample(alive, 1)) if len(alive) > 8 and rng.random() < 0.25 else set()
    for v in dead:
        recs.append((DELETE_VERTEX, v, 0, NO_LABEL))
    new = {}
    if rng.random() < 0.3:
        v = next_id[0]
        next_id[0] += 1
        new[v] = rng.randrange(nlabels)
        recs.append((ADD_VERTEX, v, 0, new[v]))
    keep = [v for v in alive if v not in dead] + list(new)
    present = [k for k in d.edges if not k & dead]
    gone = set(rng.sample(present, min(len(present), rng.randint(0, 5))))
    for k in gone:
        a, b = sorted(k)
        recs.append((DELETE_EDGE, a, b, rng.choice([NO_LABEL, d.edges[k]])))
    ins = {}
    # a hub gets several edges at once sometimes: many update edges around one parent
    hub = rng.choice(keep) if rng.random() < 0.4 else None
    for _ in range(rng.randint(0, 7)):
        a, b = rng.sample(keep, 2)
        if hub is not None and a != hub:
            b = hub
        k = frozenset((a, b))
        if k not in d.edges and k not in ins:
            ins[k] = rng.randrange(nelabels)
            recs.append((INSERT_EDGE, a, b, ins[k]))
    rng.shuffle(recs)
    d.change(dead, new, gone, ins)
    return UpdateStream.from_records(recs)


def random_data(rng: random.Random, n: int, nlabels: int, nelabels: int, p: float) -> Data:
    verts = {v: rng.randrange(nlabels) for v in range(n)}
    edges = {frozenset((a, b)): rng.randrange(nelabels)
             for a in range(n) for b in range(a + 1, n) if rng.random() < p}
    return Data(verts, edges)


def skewed_graph(seed: int, n: int = 400, hubs: int = 4, labels: int = 2) -> LabeledGraph:
    rng = np.random.default_rng(seed)
    src = [rng.integers(0, n, 3 * n)]
    dst = [rng.integers(0, n, 3 * n)]
    for h in range(hubs):
        others = rng.choice(n, n // 2, replace=False)
        src.append(np.full(len(others), h))
        dst.append(others)
    u, v = np.concatenate(src), np.concatenate(dst)
    keep = u != v
    lo, hi = np.minimum(u[keep], v[keep]), np.maximum(u[keep], v[keep])
    pairs = np.unique(lo * n + hi)
    ids = np.arange(n, dtype=np.int64) * 7 + 3      # external ids are not slots
    return LabeledGraph(ids, rng.integers(0, labels, n), ids[pairs // n], ids[pairs % n],
                        rng.integers(0, 2, len(pairs)) * 0)
