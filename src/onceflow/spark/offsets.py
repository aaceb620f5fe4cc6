"""Per-partition offsets and their JSON form.

Spark keeps a streaming source's offsets as JSON text in the checkpoint's offset log, and
decides "no new data" by comparing that text. The JSON therefore has one fixed key order:
topics sorted, partitions sorted numerically, e.g. `{"a":{"0":5,"1":7,"10":2},"b":{"0":3}}`.
The same form serves the `startingOffsets` and `endingOffsets` options, where -2 means
earliest and -1 latest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = [
    "EARLIEST",
    "LATEST",
    "PartitionOffsets",
    "TopicPartitionKey",
    "from_json_dict",
    "offsets_json",
    "to_json_dict",
]

EARLIEST = -2
LATEST = -1

TopicPartitionKey = tuple[str, int]
PartitionOffsets = dict[TopicPartitionKey, int]


def to_json_dict(offsets: Mapping[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    """`{(topic, partition): offset}` as `{"topic": {"partition": offset}}` in the fixed
    order (Python dicts keep insertion order, and `json.dumps` follows it)."""
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def from_json_dict(data: Mapping[str, Any]) -> PartitionOffsets:
    """The inverse of `to_json_dict`. Raises ValueError on anything else."""
    if not isinstance(data, Mapping):
        raise ValueError(f"offsets must be a JSON object of topics, got {data!r}")
    out: PartitionOffsets = {}
    for topic, parts in data.items():
        if not isinstance(parts, Mapping):
            raise ValueError(f"offsets of topic {topic!r} must be an object, got {parts!r}")
        for partition, offset in parts.items():
            if not isinstance(offset, int) or isinstance(offset, bool):
                raise ValueError(f"offset of {topic}-{partition} is not an integer: {offset!r}")
            out[(str(topic), int(partition))] = offset
    return out


def offsets_json(offsets: Mapping[TopicPartitionKey, int]) -> str:
    """Compact JSON text in the fixed order (for messages and logs)."""
    return json.dumps(to_json_dict(offsets), separators=(",", ":"))
