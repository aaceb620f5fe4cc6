"""The README's compatibility table: Onceflow's advertised versions beside Kafka 4.1's, and why
they differ, generated from `ADVERTISED_VERSIONS`, `KAFKA_4_1` and `GAPS`.

Pure text in, text out; tools/compatibility_table.py rewrites the README's table between the
two marker comments, and tests/unit/test_api_versions_table.py fails while the README's copy
is stale or while a difference has no line in `GAPS`.
"""

from __future__ import annotations

from collections.abc import Mapping

from onceflow.protocol.api_versions import ADVERTISED_VERSIONS, ApiKey
from onceflow.protocol.kafka_versions import GAPS, KAFKA_4_1, KafkaApi

BEGIN = "<!-- compatibility-table: generated, do not edit by hand -->"
END = "<!-- /compatibility-table -->"
REGENERATE = ".venv/bin/python tools/compatibility_table.py"

Ranges = Mapping[int, tuple[int, int]]


def differences(supported: Ranges, kafka: Mapping[int, KafkaApi]) -> set[int]:
    """API keys whose advertised range is not Kafka 4.1's, missing on either side included."""
    ours = dict(supported)
    theirs = {key: (api.min_version, api.max_version) for key, api in kafka.items()}
    return {key for key in ours.keys() | theirs.keys() if ours.get(key) != theirs.get(key)}


def unexplained(
    supported: Ranges, kafka: Mapping[int, KafkaApi], gaps: Mapping[int, str]
) -> list[str]:
    """Each difference without a line in `gaps`, and each line in `gaps` that is no gap."""
    diff = differences(supported, kafka)
    problems = [
        f"{_name(key, kafka)} ({key}): Onceflow {_versions(supported.get(key))}, Kafka 4.1 "
        f"{_versions(_kafka_range(key, kafka))}, and GAPS does not say why"
        for key in sorted(diff - gaps.keys())
    ]
    problems += [
        f"{_name(key, kafka)} ({key}): GAPS says {gaps[key]!r}, but both advertise "
        f"{_versions(supported.get(key))}: delete its line"
        for key in sorted(gaps.keys() - diff)
    ]
    return problems


def render_table(
    supported: Ranges = ADVERTISED_VERSIONS,
    kafka: Mapping[int, KafkaApi] = KAFKA_4_1,
    gaps: Mapping[int, str] = GAPS,
) -> str:
    lines = [
        "The versions of each API that Onceflow advertises in ApiVersions, beside those of a "
        "Kafka 4.1 broker with default settings, generated from "
        "`src/onceflow/protocol/kafka_versions.py`:",
        "",
        "| API (key) | Onceflow | Kafka 4.1 | Why they differ |",
        "| --- | --- | --- | --- |",
    ]
    for key in sorted(supported.keys() | kafka.keys()):
        lines.append(
            f"| {_name(key, kafka)} ({key}) | {_versions(supported.get(key))} "
            f"| {_versions(_kafka_range(key, kafka))} | {gaps.get(key, '')} |"
        )
    return "\n".join(lines) + "\n"


def replace_table(text: str, table: str) -> str:
    """`text` with everything between the markers replaced by `table`."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the markers {BEGIN!r} and {END!r} are missing or out of order")
    return f"{text[: start + len(BEGIN)]}\n{table}{text[end:]}"


def table_in(text: str) -> str:
    """The table between the markers, as `render_table` would write it."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the markers {BEGIN!r} and {END!r} are missing or out of order")
    return text[start + len(BEGIN) + 1 : end]


def _kafka_range(key: int, kafka: Mapping[int, KafkaApi]) -> tuple[int, int] | None:
    api = kafka.get(key)
    return None if api is None else (api.min_version, api.max_version)


def _name(key: int, kafka: Mapping[int, KafkaApi]) -> str:
    if key in kafka:
        return kafka[key].name
    try:
        return ApiKey(key).name.title().replace("_", "")
    except ValueError:
        return f"API {key}"


def _versions(bounds: tuple[int, int] | None) -> str:
    if bounds is None:
        return "none"
    lo, hi = bounds
    return str(lo) if lo == hi else f"{lo}-{hi}"
