"""Owns standing-query patterns: JSON or query-file text (labels integers or names) in, the
engine's QueryGraph out."""
from __future__ import annotations

from gpu.io.graphs import parse_graph_text
from gpu.plan.query import QueryError, QueryGraph
from service.labels import GRAPH_LABEL_TOKENS, STRING_LABEL_BASE, StagedLabels, parse_named
from service.schemas import Pattern, PatternEdge, PatternVertex


def pattern_of(spec: Pattern | str) -> Pattern:
    """The JSON form of a pattern given as JSON or as query-file text (t/v/e lines)."""
    if isinstance(spec, Pattern):
        return spec
    graph, names = parse_named(parse_graph_text, spec.encode(), GRAPH_LABEL_TOKENS, "pattern")
    if graph.num_vertices == 0:
        raise QueryError("pattern: the query text has no vertices")
    if not names.names:     # integers only: the reader took labels up to 2^31 - 1
        for kind, labels in (("vertex", graph.vertex_labels), ("edge", graph.edge_labels)):
            if len(labels) and int(labels.max()) >= STRING_LABEL_BASE:
                raise QueryError(f"pattern: {kind} label {int(labels.max())} out of range "
                                 f"[0, {STRING_LABEL_BASE})")
    return Pattern(
        vertices=[PatternVertex(id=int(i), label=names.name_of(lab))
                  for i, lab in zip(graph.vertex_ids.tolist(), graph.vertex_labels.tolist())],
        edges=[PatternEdge(source=int(u), target=int(v), label=names.name_of(lab))
               for u, v, lab in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(),
                                    graph.edge_labels.tolist())])


def to_query(pattern: Pattern, name: str, staged: StagedLabels,
             max_vertices: int, directed: bool = False) -> QueryGraph:
    """Validate `pattern` and build its QueryGraph (edges as arcs source -> target on a
    directed graph); raises QueryError or LabelError."""
    if len(pattern.vertices) > max_vertices:
        raise QueryError(f"pattern.vertices: {len(pattern.vertices)} vertices; the limit is "
                         f"{max_vertices} (max_query_vertices)")
    labels = [staged.resolve(v.label, f"pattern.vertices[{i}].label")
              for i, v in enumerate(pattern.vertices)]
    edge_labels = [staged.resolve(e.label, f"pattern.edges[{i}].label")
                   for i, e in enumerate(pattern.edges)]
    return QueryGraph.build(name, [v.id for v in pattern.vertices], labels,
                            [(e.source, e.target) for e in pattern.edges], edge_labels,
                            directed=directed)
