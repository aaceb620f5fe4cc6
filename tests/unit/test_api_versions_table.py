"""Onceflow's advertised API versions held against Kafka 4.1's: every difference is a line in
`GAPS` saying why, every line in `GAPS` is a difference, and the README's table is the one
generated from them."""

from __future__ import annotations

from pathlib import Path

import pytest
from kio.schema.index import api_key_map, schema_name_map

from onceflow.protocol.api_versions import ADVERTISED_VERSIONS, SUPPORTED_VERSIONS
from onceflow.protocol.compatibility import (
    BEGIN,
    END,
    REGENERATE,
    render_table,
    replace_table,
    table_in,
    unexplained,
)
from onceflow.protocol.kafka_versions import GAPS, KAFKA_4_1, KafkaApi
from onceflow.protocol.onceflow_apis import REQUESTS

OWN_APIS = {key for key, _ in REQUESTS}

README = Path(__file__).resolve().parents[2] / "README.md"


def test_every_difference_from_kafka_4_1_is_a_deliberate_line_in_gaps() -> None:
    problems = unexplained(ADVERTISED_VERSIONS, KAFKA_4_1, GAPS)
    assert not problems, (
        "Onceflow's advertised versions (protocol/api_versions.py) and GAPS "
        "(protocol/kafka_versions.py) disagree:\n  " + "\n  ".join(problems)
    )


def test_a_range_change_without_its_gaps_line_fails_and_a_stale_line_fails() -> None:
    kafka = {0: KafkaApi("Produce", 0, 13), 1: KafkaApi("Fetch", 4, 18)}
    gaps = {0: "why Produce differs"}
    assert unexplained({0: (3, 8), 1: (4, 18)}, kafka, gaps) == []
    narrower = unexplained({0: (3, 8), 1: (4, 17)}, kafka, gaps)
    assert narrower == ["Fetch (1): Onceflow 4-17, Kafka 4.1 4-18, and GAPS does not say why"]
    missing = unexplained({0: (3, 8)}, kafka, gaps)
    assert missing == ["Fetch (1): Onceflow none, Kafka 4.1 4-18, and GAPS does not say why"]
    extra = unexplained({0: (3, 8), 1: (4, 18), 27: (1, 2)}, kafka, gaps)
    assert extra == [
        "WriteTxnMarkers (27): Onceflow 1-2, Kafka 4.1 none, and GAPS does not say why"
    ]
    stale = unexplained({0: (0, 13), 1: (4, 18)}, kafka, gaps)
    assert stale == [
        "Produce (0): GAPS says 'why Produce differs', but both advertise 0-13: delete its line"
    ]


def test_every_advertised_version_has_a_kio_schema() -> None:
    """Onceflow decodes each advertised version with kio's schemas; Kafka 4.1's ranges lie
    within kio's (generated from a later Kafka), but for Produce v0-2, advertised only."""
    for key, (lo, hi) in SUPPORTED_VERSIONS.items():
        if key in OWN_APIS:
            continue  # Onceflow's own, declared in protocol/onceflow_apis.py
        versions = schema_name_map[api_key_map[key]]
        assert set(range(lo, hi + 1)) <= set(versions), f"API {key}: {lo}-{hi}"
    for key, api in KAFKA_4_1.items():
        versions = schema_name_map[api_key_map[key]]
        lo = 3 if key == 0 else api.min_version
        assert set(range(lo, api.max_version + 1)) <= set(versions), f"{api.name} ({key})"


def test_readme_compatibility_table_is_the_generated_one() -> None:
    text = README.read_text(encoding="utf-8")
    assert BEGIN in text and END in text, f"README.md lacks the markers {BEGIN} and {END}"
    assert table_in(text) == render_table(), (
        f"README.md's compatibility table is stale: regenerate it with `{REGENERATE}`"
    )


def test_the_table_is_written_between_the_markers_only() -> None:
    doc = f"# Title\n\nbefore\n{BEGIN}\nold table\n{END}\nafter\n"
    written = replace_table(doc, "| new |\n")
    assert written == f"# Title\n\nbefore\n{BEGIN}\n| new |\n{END}\nafter\n"
    assert table_in(written) == "| new |\n"
    with pytest.raises(ValueError, match="markers"):
        replace_table("no markers here\n", "| new |\n")


def test_the_table_has_one_row_per_api_with_both_ranges_and_the_reason() -> None:
    table = render_table(
        {0: (3, 8), 27: (1, 2)},
        {0: KafkaApi("Produce", 0, 13), 47: KafkaApi("OffsetDelete", 0, 0)},
        {0: "p", 27: "w", 47: "o"},
    )
    assert table.splitlines()[4:] == [
        "| Produce (0) | 3-8 | 0-13 | p |",
        "| WriteTxnMarkers (27) | 1-2 | none | w |",
        "| OffsetDelete (47) | none | 0 | o |",
    ]
