"""Benchmarks: not tests. They print figures and write benchmarks/results/latest.json."""
