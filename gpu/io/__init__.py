"""File formats: graph and query files, update streams, edge lists and label files."""
