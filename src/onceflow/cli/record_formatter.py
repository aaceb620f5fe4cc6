"""Records as lines, in kafka-console-consumer.sh's DefaultMessageFormatter format.

Scripts written against Kafka's console consumer parse its output, so the `--property`
keys (`print.timestamp`, `print.partition`, `print.offset`, `print.headers`, `print.key`,
`print.value`, `key.separator`, `line.separator`, `headers.separator`, `null.literal`) give
the same fields in the same order with the same separators:
`CreateTime:<ts>\\tPartition:<p>\\tOffset:<o>\\t<h1:v1,h2:v2>\\t<key>\\t<value>`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from onceflow.cli.line_reader import is_true

__all__ = ["FORMATTER_KEYS", "RecordFormatter"]

FORMATTER_KEYS = frozenset(
    {
        "print.timestamp",
        "print.partition",
        "print.offset",
        "print.headers",
        "print.key",
        "print.value",
        "key.separator",
        "line.separator",
        "headers.separator",
        "null.literal",
    }
)
# librdkafka's timestamp types, named as Kafka's TimestampType prints them
_TIMESTAMP_NAMES = {1: "CreateTime", 2: "LogAppendTime"}


@dataclass(frozen=True)
class RecordFormatter:
    print_timestamp: bool = False
    print_partition: bool = False
    print_offset: bool = False
    print_headers: bool = False
    print_key: bool = False
    print_value: bool = True
    key_separator: bytes = b"\t"
    line_separator: bytes = b"\n"
    headers_separator: bytes = b","
    null_literal: bytes = b"null"

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> RecordFormatter:
        get = properties.get
        return cls(
            print_timestamp=is_true(get("print.timestamp")),
            print_partition=is_true(get("print.partition")),
            print_offset=is_true(get("print.offset")),
            print_headers=is_true(get("print.headers")),
            print_key=is_true(get("print.key")),
            print_value=is_true(get("print.value", "true")),
            key_separator=get("key.separator", "\t").encode(),
            line_separator=get("line.separator", "\n").encode(),
            headers_separator=get("headers.separator", ",").encode(),
            null_literal=get("null.literal", "null").encode(),
        )

    def _or_null(self, data: bytes | None) -> bytes:
        return self.null_literal if data is None else data

    def _headers(self, message: Any) -> bytes:
        headers = message.headers() or []
        if not headers:
            return b"NO_HEADERS"
        return self.headers_separator.join(
            name.encode() + b":" + self._or_null(value) for name, value in headers
        )

    def format(self, message: Any) -> bytes:
        """The message's fields, each followed by the key separator, except the last, which
        the line separator ends (nothing at all when every field is off, as in Kafka)."""
        fields: list[bytes] = []
        if self.print_timestamp:
            kind, stamp = message.timestamp()
            name = _TIMESTAMP_NAMES.get(kind)
            fields.append(b"NO_TIMESTAMP" if name is None else f"{name}:{stamp}".encode())
        if self.print_partition:
            fields.append(f"Partition:{message.partition()}".encode())
        if self.print_offset:
            fields.append(f"Offset:{message.offset()}".encode())
        if self.print_headers:
            fields.append(self._headers(message))
        if self.print_key:
            fields.append(self._or_null(message.key()))
        if self.print_value:
            fields.append(self._or_null(message.value()))
        if not fields:
            return b""
        return self.key_separator.join(fields) + self.line_separator
