"""The arithmetic and the table behind `onceflow bench` and the suite."""

from __future__ import annotations

from onceflow.bench import figure_table, median_of, medians, percentile


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]  # 1 .. 100
    assert percentile(values, 0.50) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 0.999) == 100.0
    assert percentile([7.0], 0.999) == 7.0
    assert percentile([1.0, 2.0], 0.0) == 1.0


def test_median_of_passes_the_run_index() -> None:
    seen: list[int] = []

    def run(i: int) -> float:
        seen.append(i)
        return [5.0, 1.0, 3.0][i]

    assert median_of(3, run) == 3.0
    assert seen == [0, 1, 2]


def test_medians_per_figure() -> None:
    runs = [{"a": 1.0, "b": 10.0}, {"a": 3.0, "b": 30.0}, {"a": 2.0, "b": 20.0}]
    assert medians(runs) == {"a": 2.0, "b": 20.0}


def test_figure_table_groups_by_the_first_word_and_aligns_values() -> None:
    table = figure_table(
        {"produce_MBps": 1234.5, "produce_msgps": 2.0, "latency_p50_ms": 1.25}, 3, 2
    )
    lines = table.split("\n")
    assert lines[0].split() == ["figure", "median", "of", "3", "(2", "cores)"]
    assert lines[1] == "" and lines[4] == "", "a blank line before each group"
    assert lines[2].endswith("1,234.500") and lines[5].endswith("1.250")
    assert len({len(line) for line in lines[2:4]}) == 1, "values right-aligned"
