"""Medians (every figure is the median of several runs, so one noisy run does not move it)
and the table both `onceflow bench` and the suite print."""

from __future__ import annotations

import statistics
from collections.abc import Callable

__all__ = ["figure_table", "median_of", "medians"]


def median_of(repeat: int, run: Callable[[int], float]) -> float:
    """The median of `run(0)` .. `run(repeat - 1)`; the index lets each run use its own topic."""
    return statistics.median(run(i) for i in range(repeat))


def medians(runs: list[dict[str, float]]) -> dict[str, float]:
    """Per-figure medians of several runs' figures."""
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def figure_table(figures: dict[str, float], repeat: int, cores: int | None) -> str:
    """Name and value per line, a blank line between groups (the name's first word)."""
    width = max([len("figure"), *(len(k) for k in figures)])
    lines = [f"{'figure':<{width}}  {'median of ' + str(repeat):>16}   ({cores} cores)"]
    group = ""
    for key, value in figures.items():
        prefix = key.split("_")[0]
        if prefix != group:
            lines.append("")
            group = prefix
        lines.append(f"{key:<{width}}  {value:>16,.3f}")
    return "\n".join(lines)
