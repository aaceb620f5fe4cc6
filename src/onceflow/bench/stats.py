"""Medians: every figure is the median of several runs, so one noisy run does not move it."""

from __future__ import annotations

import statistics
from collections.abc import Callable

__all__ = ["median_of", "medians"]


def median_of(repeat: int, run: Callable[[int], float]) -> float:
    """The median of `run(0)` .. `run(repeat - 1)`; the index lets each run use its own topic."""
    return statistics.median(run(i) for i in range(repeat))


def medians(runs: list[dict[str, float]]) -> dict[str, float]:
    """Per-figure medians of several runs' figures."""
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}
