"""Java properties files, read the way java.util.Properties reads them, so a server.properties
or a client's --command-config file written for Kafka parses the same here."""

from __future__ import annotations

import re
from pathlib import Path

from onceflow.config.spec import ConfigError

_PROPERTIES_WHITESPACE = " \t\f"
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _ends_in_continuation(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _unescape(text: str, where: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "\\" or i + 1 == len(text):
            out.append(char)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u":
            digits = text[i + 2 : i + 6]
            if len(digits) != 4 or not re.fullmatch(r"[0-9A-Fa-f]{4}", digits):
                raise ConfigError(f"{where}: malformed \\uXXXX escape")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
    return "".join(out)


def _split_key_value(line: str) -> tuple[str, str]:
    """Split at the first unescaped '=', ':' or whitespace, as java.util.Properties does."""
    i = 0
    while i < len(line):
        char = line[i]
        if char == "\\":
            i += 2
            continue
        if char in "=:" or char in _PROPERTIES_WHITESPACE:
            break
        i += 1
    key, rest = line[:i], line[i:].lstrip(_PROPERTIES_WHITESPACE)
    if rest[:1] in ("=", ":"):
        rest = rest[1:]
    return key, rest.lstrip(_PROPERTIES_WHITESPACE)


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """Parse Java properties text: comments (# or !), `k=v`, `k: v` or `k v`, continuations.

    Follows java.util.Properties.load: a line ending in an odd number of backslashes continues
    on the next one (whose leading whitespace is dropped), escapes (\\t, \\n, \\uXXXX, \\=, ...)
    are decoded, and a later duplicate key wins. Values keep trailing whitespace here; the
    config parsers trim it, as Kafka's do.
    """
    lines = _LINE_BREAK.split(text)
    result: dict[str, str] = {}
    index = 0
    while index < len(lines):
        lineno = index + 1
        line = lines[index].lstrip(_PROPERTIES_WHITESPACE)
        index += 1
        if not line or line[0] in "#!":
            continue
        while _ends_in_continuation(line):
            line = line[:-1]
            if index == len(lines):
                break
            line += lines[index].lstrip(_PROPERTIES_WHITESPACE)
            index += 1
        key, value = _split_key_value(line)
        where = f"{source}:{lineno}"
        result[_unescape(key, where)] = _unescape(value, where)
    return result


def read_properties(path: str | Path) -> dict[str, str]:
    """Read a properties file; an unreadable or missing file is a ConfigError."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read configuration file {path}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")  # what java.util.Properties reads from a stream
    return parse_properties(text, str(path))
