"""How a configuration key is declared: once, as a dataclass field that carries its Kafka name.

A broker key is a field of one of the per-concern key classes (`ServerKeys`, `LogKeys`, ...):

    log_retention_ms: int = key(
        "log.retention.ms", LONG, WEEK_MS, UNLIMITED_OR_NON_NEGATIVE,
        "Segments older than this are deleted; -1 keeps them forever.",
        Synonym("log.retention.hours", "log.retention.ms in hours, ...", INT, scale=HOUR_MS),
    )

`key()` returns the default (typed, so mypy checks it against the annotation) wrapped in a
dataclass field whose metadata holds the rest: the Kafka name, how a value parses and renders,
its range check, its documentation and its synonyms in coarser units. `keys_of()` reads the
fields back into rows, which loading, the constructor checks, DescribeConfigs and the
documentation all use, so nothing about a key is written anywhere else.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

__all__ = [
    "Check",
    "ConfigError",
    "ConfigType",
    "Key",
    "Kind",
    "Synonym",
    "group_keys",
    "invalid",
    "key",
    "keys_of",
    "parse_checked",
    "render",
    "suggestion",
]

T = TypeVar("T")

_METADATA = "onceflow.config.key"


class ConfigError(Exception):
    """A configuration value Onceflow cannot use, or a configuration file it cannot read.

    `key` is the offending Kafka key when there is one, so callers can report it per entry.
    """

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


def invalid(key: str, value: str, expected: str) -> ConfigError:
    """The one wording of a bad value: the key, the value and what was expected."""
    return ConfigError(f"Invalid value {value!r} for configuration {key}: expected {expected}", key)


def suggestion(key: str, known: Iterable[str]) -> str:
    """ " (did you mean ...?)" for a near miss of a known key, else ""."""
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.8)
    return f" (did you mean {close[0]}?)" if close else ""


class ConfigType(enum.IntEnum):
    """A value's type, with Kafka's DescribeConfigs (v3+) numeric codes."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


@dataclass(frozen=True)
class Kind(Generic[T]):
    """How one type of value is parsed (raising ValueError with what was expected) and shown."""

    config_type: ConfigType
    parse: Callable[[str], T]
    render: Callable[[T], str]


@dataclass(frozen=True)
class Check:
    """A constraint on a parsed value and the words that describe it in an error."""

    expected: str
    ok: Callable[[Any], bool]


def render(kind: Kind[Any], value: Any) -> str | None:
    """Kafka's rendering, with an empty list or no value shown as unset (null) as Kafka
    shows it."""
    if value is None or (isinstance(value, tuple) and not value):
        return None
    return kind.render(value)


@dataclass(frozen=True)
class Synonym:
    """Another Kafka key for the same attribute, usually in coarser units (log.retention.hours
    for log.retention.ms). `scale` converts its value to the attribute's unit; `kind` defaults
    to the main key's."""

    name: str
    doc: str
    kind: Kind[Any] | None = None
    scale: int = 1


@dataclass(frozen=True)
class _Declared:
    """What `key()` stores in a field's metadata; the attribute name comes from the field."""

    name: str
    kind: Kind[Any]
    check: Check | None
    doc: str
    synonyms: tuple[Synonym, ...]


def key(
    name: str,
    kind: Kind[T],
    default: T,
    check: Check | None,
    doc: str,
    *synonyms: Synonym,
) -> T:
    """Declare a broker key as a dataclass field: the only place its name, type, default,
    range check, documentation and synonyms are written. Synonyms come in precedence order
    after `name`, which wins over all of them."""
    declared = _Declared(name, kind, check, doc, synonyms)
    value: T = dataclasses.field(default=default, metadata={_METADATA: declared})
    return value


@dataclass(frozen=True)
class Key:
    """One Kafka broker key: which attribute it sets, how it parses, what it means.

    Keys that share an attribute form a synonym group; the first (`primary`) wins when several
    are set and alone carries the default. `scale` converts a synonym in coarser units (hours)
    to the attribute's.
    """

    name: str
    attr: str
    kind: Kind[Any]
    check: Check | None
    doc: str
    default: Any
    primary: bool = True
    scale: int = 1

    def parse(self, raw: str) -> Any:
        """The parsed, range-checked value of `raw`; ConfigError naming this key otherwise."""
        return parse_checked(self.name, self.kind, self.check, raw)

    def effective(self, value: Any) -> Any:
        """The attribute value this key's parsed value stands for (-1 stays -1: unlimited)."""
        if self.scale != 1 and value >= 0:
            return value * self.scale
        return value


def parse_checked(name: str, kind: Kind[Any], check: Check | None, raw: str) -> Any:
    """Parse `raw` as `kind` and apply `check`; the ConfigError names `name`."""
    try:
        value = kind.parse(raw)
    except ValueError as exc:
        raise invalid(name, raw, str(exc)) from None
    if check is not None and not check.ok(value):
        raise invalid(name, raw, check.expected)
    return value


def keys_of(cls: type[Any]) -> tuple[Key, ...]:
    """The keys declared on a dataclass with `key()`, in field order, each followed by its
    synonyms. Fields without a key (bookkeeping such as `settings`) are skipped."""
    rows: list[Key] = []
    for f in dataclasses.fields(cls):
        declared = f.metadata.get(_METADATA)
        if not isinstance(declared, _Declared):
            continue
        rows.append(
            Key(declared.name, f.name, declared.kind, declared.check, declared.doc, f.default)
        )
        rows.extend(
            Key(
                syn.name,
                f.name,
                syn.kind or declared.kind,
                declared.check,
                syn.doc,
                None,
                primary=False,
                scale=syn.scale,
            )
            for syn in declared.synonyms
        )
    return tuple(rows)


def group_keys(keys: Iterable[Key]) -> dict[str, tuple[Key, ...]]:
    """Attribute -> its keys, highest precedence first, in declaration order."""
    groups: dict[str, tuple[Key, ...]] = {}
    for row in keys:
        groups[row.attr] = (*groups.get(row.attr, ()), row)
    return groups
