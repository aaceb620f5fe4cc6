"""Lines of stdin into records, read as kafka-console-producer.sh's line reader reads them.

The reader's `--property` keys (`parse.key`, `key.separator`, `parse.headers`,
`headers.delimiter`, `headers.separator`, `headers.key.separator`, `ignore.error`,
`null.marker`) mean what they mean to Kafka's LineMessageReader, so a line written for
Kafka's tool gives the same record here: `h1:v1,h2:v2<TAB>key<TAB>value` with both parse
options on. One difference: `headers.separator` is a plain string here, not a regex.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["READER_KEYS", "LineError", "LineReader", "Record"]

READER_KEYS = frozenset(
    {
        "parse.key",
        "key.separator",
        "parse.headers",
        "headers.delimiter",
        "headers.separator",
        "headers.key.separator",
        "ignore.error",
        "null.marker",
    }
)


class LineError(ValueError):
    """A line the reader cannot split; the message completes "line N ..."."""


@dataclass(frozen=True)
class Record:
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def is_true(text: str | None) -> bool:
    """Kafka's reading of a boolean property: `true` in any case, anything else is false."""
    return text is not None and text.strip().lower() == "true"


@dataclass(frozen=True)
class LineReader:
    parse_key: bool = False
    key_separator: bytes = b"\t"
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    ignore_error: bool = False
    null_marker: bytes | None = None

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> LineReader:
        """The reader the properties describe; separators that would be ambiguous are
        refused as Kafka refuses them (ValueError)."""
        get = properties.get
        marker = get("null.marker")
        reader = cls(
            parse_key=is_true(get("parse.key")),
            key_separator=get("key.separator", "\t").encode(),
            parse_headers=is_true(get("parse.headers")),
            headers_delimiter=get("headers.delimiter", "\t").encode(),
            headers_separator=get("headers.separator", ",").encode(),
            headers_key_separator=get("headers.key.separator", ":").encode(),
            ignore_error=is_true(get("ignore.error")),
            null_marker=None if marker is None else marker.encode(),
        )
        for name in ("key.separator", "headers.delimiter", "headers.separator"):
            if not get(name, "x"):
                raise ValueError(f"{name} may not be empty")
        pairs = [
            ("headers.delimiter", "headers.separator"),
            ("headers.delimiter", "headers.key.separator"),
            ("headers.separator", "headers.key.separator"),
        ]
        if reader.parse_headers:
            for one, other in pairs:
                if reader._separator(one) == reader._separator(other):
                    raise ValueError(f"{one} and {other} may not be equal")
        return reader

    def _separator(self, name: str) -> bytes:
        value: bytes = getattr(self, name.replace(".", "_"))
        return value

    def _null(self, text: bytes | None) -> bytes | None:
        return None if text is None or text == self.null_marker else text

    def _cut(self, line: bytes, separator: bytes, what: str) -> tuple[bytes | None, bytes]:
        head, found, rest = line.partition(separator)
        if found:
            return head, rest
        if self.ignore_error:
            return None, line
        raise LineError(f"has no {what} {separator.decode(errors='replace')!r}")

    def _headers(self, text: bytes) -> list[tuple[str, bytes | None]]:
        headers: list[tuple[str, bytes | None]] = []
        for pair in text.split(self.headers_separator):
            name, found, value = pair.partition(self.headers_key_separator)
            if not found and not self.ignore_error:
                separator = self.headers_key_separator.decode(errors="replace")
                raise LineError(f"has no header key separator {separator!r} in {pair!r}")
            if self.null_marker is not None and name == self.null_marker:
                raise LineError("has a header key equal to the null marker")
            headers.append((name.decode(errors="replace"), self._null(value) if found else None))
        return headers

    def read(self, line: bytes) -> Record:
        """One line (without its line ending) as a record."""
        headers: list[tuple[str, bytes | None]] = []
        key: bytes | None = None
        if self.parse_headers:
            text, line = self._cut(line, self.headers_delimiter, "headers delimiter")
            if text is not None and text != self.null_marker:
                headers = self._headers(text)
        if self.parse_key:
            key, line = self._cut(line, self.key_separator, "key separator")
        return Record(self._null(key), self._null(line), headers)
