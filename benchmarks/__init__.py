"""Benchmark drivers: query-set generation and the GAMMA-style GH experiment."""
