"""File formats: graph and query files, update streams, edge lists and label files.

    records     what they read into: `LabeledGraph`, `UpdateStream`, `FormatError`, kinds
    graphs      graph and query files, and `load_graph` (a graph file or an edge list)
    streams     update streams, and `split_stream`
    edge_lists  SNAP/CSV edge lists, label files, random labels
    text        the machinery they share: grammars, the fast and reference parsers
"""
