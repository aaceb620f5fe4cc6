"""Value kinds and range checks: a string parsed the way Kafka's ConfigDef parses it, a value
rendered the way Kafka renders it, and the listener addresses several keys hold.

Shared by every key class, so a new key picks its type here and declares nothing else about
parsing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from onceflow.config.spec import Check, ConfigType, Kind

INT_MIN = -(2**31)
INT_MAX = 2**31 - 1
LONG_MIN = -(2**63)
LONG_MAX = 2**63 - 1

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
WEEK_MS = 168 * HOUR_MS


_WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})
_LISTENER_RE = re.compile(
    r"(?:(?P<name>[A-Za-z0-9_]+)://)?"
    r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]*)"
    r":(?P<port>[0-9]{1,5})",
    re.ASCII,
)
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class Listener:
    """A socket the broker listens on or advertises.

    Accepted forms are Onceflow's `HOST:PORT` (named PLAINTEXT) and Kafka's `NAME://HOST:PORT`.
    An empty host, 0.0.0.0 or :: means every interface; port 0 asks the OS for a free port, and
    the server then advertises the port it was given.
    """

    host: str
    port: int
    name: str = "PLAINTEXT"

    @property
    def address(self) -> str:
        """`host:port`, with brackets around an IPv6 host."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def is_wildcard(self) -> bool:
        """True when the host means "every interface" and is no address a client can use."""
        return self.host in _WILDCARD_HOSTS

    def __str__(self) -> str:
        return f"{self.name}://{self.address}"

    @classmethod
    def parse(cls, text: str) -> Listener:
        """Parse one listener; raises ValueError naming what was expected."""
        match = _LISTENER_RE.fullmatch(text.strip())
        if match is None:
            raise ValueError(_LISTENER_EXPECTED)
        port = int(match["port"])
        if port > 65535:
            raise ValueError(f"{_LISTENER_EXPECTED} with a port from 0 to 65535")
        host = match["host"].removeprefix("[").removesuffix("]")
        name = (match["name"] or "PLAINTEXT").upper()
        return cls(host=host, port=port, name=name)


_LISTENER_EXPECTED = "HOST:PORT or NAME://HOST:PORT (comma-separated for several)"
DEFAULT_LISTENER = Listener("127.0.0.1", 9092)


# --------------------------------------------------------------------------------------------
# Value kinds: parse a string the way Kafka's ConfigDef does, render a value the way Kafka does
# --------------------------------------------------------------------------------------------

_INTEGER_RE = re.compile(r"[+-]?[0-9]+", re.ASCII)
_DOUBLE_RE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)


def _integer_parser(lo: int, hi: int, expected: str) -> Callable[[str], int]:
    def parse(text: str) -> int:
        text = text.strip()
        if not _INTEGER_RE.fullmatch(text):
            raise ValueError(expected)
        value = int(text)
        if not lo <= value <= hi:
            raise ValueError(expected)
        return value

    return parse


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    raise ValueError("true or false")


def _render_bool(value: bool) -> str:
    return "true" if value else "false"


def _parse_double(text: str) -> float:
    text = text.strip()
    if not _DOUBLE_RE.fullmatch(text):
        raise ValueError("a decimal number")
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("a finite decimal number")
    return value


def _render_double(value: float) -> str:
    """Java's Double.toString for the values we use: "0.5", "1.0", "1.0E-5"."""
    text = repr(float(value))
    if "e" in text:
        mantissa, exponent = text.split("e")
        if "." not in mantissa:
            mantissa += ".0"
        return f"{mantissa}E{int(exponent)}"
    return text


def _parse_string(text: str) -> str:
    return text.strip()


def _parse_list(text: str) -> tuple[str, ...]:
    text = text.strip()
    if not text:
        return ()
    items = tuple(item.strip() for item in text.split(","))
    if any(not item for item in items):
        raise ValueError("a comma-separated list without empty items")
    return items


def _render_list(items: tuple[str, ...]) -> str:
    return ",".join(items)


def _parse_listeners(text: str) -> tuple[Listener, ...]:
    return tuple(Listener.parse(item) for item in _parse_list(text))


def render_listeners(listeners: tuple[Listener, ...]) -> str:
    return ",".join(str(listener) for listener in listeners)


def _parse_optional_address(text: str) -> Listener | None:
    """An HTTP address, HOST:PORT (an empty host or 0.0.0.0: every interface; port 0: a
    free port, logged); empty means off."""
    text = text.strip()
    if not text:
        return None
    expected = "HOST:PORT (e.g. 127.0.0.1:9404), or empty for off"
    if "://" in text:
        raise ValueError(expected)
    try:
        return Listener.parse(text)
    except ValueError:
        raise ValueError(expected) from None


def _render_optional_address(value: Listener | None) -> str:
    return "" if value is None else value.address


def _parse_protocol_map(text: str) -> tuple[tuple[str, str], ...]:
    expected = (
        f"NAME:PROTOCOL pairs, comma-separated, PROTOCOL one of {', '.join(SECURITY_PROTOCOLS)}"
    )
    pairs: dict[str, str] = {}
    for item in _parse_list(text):
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not re.fullmatch(r"[A-Z0-9_]+", name, re.ASCII):
            raise ValueError(expected)
        if protocol not in SECURITY_PROTOCOLS or name in pairs:
            raise ValueError(expected + ", each NAME once")
        pairs[name] = protocol
    return tuple(pairs.items())


def _render_protocol_map(pairs: tuple[tuple[str, str], ...]) -> str:
    return ",".join(f"{name}:{protocol}" for name, protocol in pairs)


def _parse_cleanup_policy(text: str) -> tuple[str, ...]:
    """A set of policies, kept in one canonical order so equal settings compare equal."""
    items = _parse_list(text)
    if not items or any(item not in ("compact", "delete") for item in items):
        raise ValueError('"delete", "compact" or "compact,delete"')
    return tuple(policy for policy in ("compact", "delete") if policy in items)


INT: Kind[int] = Kind(ConfigType.INT, _integer_parser(INT_MIN, INT_MAX, "a 32-bit integer"), str)
LONG: Kind[int] = Kind(
    ConfigType.LONG, _integer_parser(LONG_MIN, LONG_MAX, "a 64-bit integer"), str
)
BOOL: Kind[bool] = Kind(ConfigType.BOOLEAN, _parse_bool, _render_bool)
DOUBLE: Kind[float] = Kind(ConfigType.DOUBLE, _parse_double, _render_double)
STRING: Kind[str] = Kind(ConfigType.STRING, _parse_string, str)
LIST: Kind[tuple[str, ...]] = Kind(ConfigType.LIST, _parse_list, _render_list)
LISTENERS: Kind[tuple[Listener, ...]] = Kind(ConfigType.LIST, _parse_listeners, render_listeners)
PROTOCOL_MAP: Kind[tuple[tuple[str, str], ...]] = Kind(
    ConfigType.STRING, _parse_protocol_map, _render_protocol_map
)
OPTIONAL_ADDRESS: Kind[Listener | None] = Kind(
    ConfigType.STRING, _parse_optional_address, _render_optional_address
)
CLEANUP_POLICY: Kind[tuple[str, ...]] = Kind(ConfigType.LIST, _parse_cleanup_policy, _render_list)
#: A secret: parsed as a string, never rendered (DescribeConfigs marks it sensitive).
PASSWORD: Kind[str] = Kind(ConfigType.PASSWORD, _parse_string, lambda _: "[hidden]")
UPPER_LIST: Kind[tuple[str, ...]] = Kind(
    ConfigType.LIST, lambda text: tuple(item.upper() for item in _parse_list(text)), _render_list
)
OPTIONAL_NAME: Kind[str] = Kind(ConfigType.STRING, lambda text: text.strip().upper(), str)
#: A choice Kafka matches case-insensitively (ConfigDef.CaseInsensitiveValidString).
LOWER_STRING: Kind[str] = Kind(ConfigType.STRING, lambda text: text.strip().lower(), str)


def at_least(lo: int) -> Check:
    return Check(f"a value of at least {lo}", lambda v: v >= lo)


def between(lo: float, hi: float) -> Check:
    return Check(f"a value from {lo} to {hi}", lambda v: lo <= v <= hi)


def one_of(*choices: str) -> Check:
    return Check(f"one of {', '.join(choices)}", lambda v: v in choices)


NON_NEGATIVE = at_least(0)
POSITIVE = at_least(1)
UNLIMITED_OR_NON_NEGATIVE = Check("-1 (unlimited) or a value of at least 0", lambda v: v >= -1)
NON_EMPTY = Check("at least one entry", lambda v: len(v) > 0)
