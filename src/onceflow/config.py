"""Broker and topic configuration, keyed by Kafka's own names.

A `server.properties` written for Apache Kafka mostly works unchanged: the keys are Kafka's,
the defaults are Kafka's, values are parsed the way Kafka's ConfigDef parses them, and keys
that only matter to a Kafka cluster (controller quorum, thread pools, replication of the
internal topics) are accepted and ignored instead of being reported as typos.

Everything is driven by two tables, `_BROKER_KEYS` and `_TOPIC_KEYS`. Each row maps a Kafka key
to a dataclass attribute, a value kind (parse and render) and a range check. Loading, the
constructor checks, DescribeConfigs and the generated documentation all read those tables, so
adding a key is adding a row and a dataclass field.

Why the shape:

* `BrokerConfig` holds *effective* values only. Kafka keys that are synonyms in coarser units
  (`log.retention.hours` for `log.retention.ms`) resolve into one attribute at load time, with
  Kafka's precedence: the first key of a group in the table wins.
* `TopicConfig` remembers which keys were overridden (`overrides`), because the broker
  persists overrides rather than effective values: a topic that never overrode `retention.ms`
  follows the broker default when the operator changes it.
* `ConfigError` always names the key, the bad value and what was expected. The broker turns it
  into INVALID_CONFIG for CreateTopics and AlterConfigs.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import math
import re
import socket
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, NamedTuple, TypeVar

from onceflow.security.authorizer import AUTHORIZER_CLASS_NAMES
from onceflow.security.sasl import SUPPORTED_MECHANISMS

__all__ = [
    "BROKER_CONFIG_KEYS",
    "CONFIG_DOCS",
    "DYNAMIC_BROKER_KEYS",
    "IGNORED_BROKER_KEYS",
    "TOPIC_CONFIG_DOCS",
    "TOPIC_CONFIG_KEYS",
    "AlterConfigOp",
    "BrokerConfig",
    "ConfigDoc",
    "ConfigEntry",
    "ConfigError",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "Listener",
    "TopicConfig",
    "alter_broker_settings",
    "alter_topic_overrides",
    "broker_config_from_properties",
    "check_dynamic_broker_config",
    "describe_broker_config",
    "describe_default_broker_config",
    "describe_topic_config",
    "load_broker_config",
    "parse_properties",
    "read_properties",
]

T = TypeVar("T")

INT_MIN = -(2**31)
INT_MAX = 2**31 - 1
LONG_MIN = -(2**63)
LONG_MAX = 2**63 - 1

_MINUTE_MS = 60_000
_HOUR_MS = 60 * _MINUTE_MS
_WEEK_MS = 168 * _HOUR_MS


class ConfigError(Exception):
    """A configuration value Onceflow cannot use, or a configuration file it cannot read.

    `key` is the offending Kafka key when there is one, so callers can report it per entry.
    """

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


def _invalid(key: str, value: str, expected: str) -> ConfigError:
    return ConfigError(f"Invalid value {value!r} for configuration {key}: expected {expected}", key)


# --------------------------------------------------------------------------------------------
# DescribeConfigs vocabulary
# --------------------------------------------------------------------------------------------


class ConfigSource(enum.IntEnum):
    """Where a value came from, with Kafka's DescribeConfigs numeric codes."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6


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


class ConfigSynonym(NamedTuple):
    """One (name, value, source) synonym of a described config, highest precedence first."""

    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True)
class ConfigEntry:
    """One row of a DescribeConfigs answer, values rendered as Kafka renders them."""

    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    is_default: bool
    is_sensitive: bool = False
    synonyms: tuple[ConfigSynonym, ...] = ()
    config_type: ConfigType = ConfigType.UNKNOWN
    documentation: str | None = None


class ConfigDoc(NamedTuple):
    """A documentation row: Kafka key, rendered default (None: unset) and what it does."""

    key: str
    default: str | None
    doc: str


# --------------------------------------------------------------------------------------------
# Listeners
# --------------------------------------------------------------------------------------------

_WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})
_LISTENER_RE = re.compile(
    r"(?:(?P<name>[A-Za-z0-9_]+)://)?"
    r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]*)"
    r":(?P<port>[0-9]{1,5})",
    re.ASCII,
)
_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


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
_DEFAULT_LISTENER = Listener("127.0.0.1", 9092)


def _local_hostname() -> str:
    """What a wildcard listener advertises when advertised.listeners is unset (as Kafka does)."""
    return socket.gethostname()


# --------------------------------------------------------------------------------------------
# Value kinds: parse a string the way Kafka's ConfigDef does, render a value the way Kafka does
# --------------------------------------------------------------------------------------------

_INTEGER_RE = re.compile(r"[+-]?[0-9]+", re.ASCII)
_DOUBLE_RE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)


@dataclass(frozen=True)
class _Kind(Generic[T]):
    """How one type of value is parsed (raising ValueError with what was expected) and shown."""

    config_type: ConfigType
    parse: Callable[[str], T]
    render: Callable[[T], str]


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


def _render_listeners(listeners: tuple[Listener, ...]) -> str:
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
        f"NAME:PROTOCOL pairs, comma-separated, PROTOCOL one of {', '.join(_SECURITY_PROTOCOLS)}"
    )
    pairs: dict[str, str] = {}
    for item in _parse_list(text):
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not re.fullmatch(r"[A-Z0-9_]+", name, re.ASCII):
            raise ValueError(expected)
        if protocol not in _SECURITY_PROTOCOLS or name in pairs:
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


_INT: _Kind[int] = _Kind(ConfigType.INT, _integer_parser(INT_MIN, INT_MAX, "a 32-bit integer"), str)
_LONG: _Kind[int] = _Kind(
    ConfigType.LONG, _integer_parser(LONG_MIN, LONG_MAX, "a 64-bit integer"), str
)
_BOOL: _Kind[bool] = _Kind(ConfigType.BOOLEAN, _parse_bool, _render_bool)
_DOUBLE: _Kind[float] = _Kind(ConfigType.DOUBLE, _parse_double, _render_double)
_STRING: _Kind[str] = _Kind(ConfigType.STRING, _parse_string, str)
_LIST: _Kind[tuple[str, ...]] = _Kind(ConfigType.LIST, _parse_list, _render_list)
_LISTENERS: _Kind[tuple[Listener, ...]] = _Kind(
    ConfigType.LIST, _parse_listeners, _render_listeners
)
_PROTOCOL_MAP: _Kind[tuple[tuple[str, str], ...]] = _Kind(
    ConfigType.STRING, _parse_protocol_map, _render_protocol_map
)
_OPTIONAL_ADDRESS: _Kind[Listener | None] = _Kind(
    ConfigType.STRING, _parse_optional_address, _render_optional_address
)
_CLEANUP_POLICY: _Kind[tuple[str, ...]] = _Kind(
    ConfigType.LIST, _parse_cleanup_policy, _render_list
)
#: A secret: parsed as a string, never rendered (DescribeConfigs marks it sensitive).
_PASSWORD: _Kind[str] = _Kind(ConfigType.PASSWORD, _parse_string, lambda _: "[hidden]")
_UPPER_LIST: _Kind[tuple[str, ...]] = _Kind(
    ConfigType.LIST, lambda text: tuple(item.upper() for item in _parse_list(text)), _render_list
)
_OPTIONAL_NAME: _Kind[str] = _Kind(ConfigType.STRING, lambda text: text.strip().upper(), str)
#: A choice Kafka matches case-insensitively (ConfigDef.CaseInsensitiveValidString).
_LOWER_STRING: _Kind[str] = _Kind(ConfigType.STRING, lambda text: text.strip().lower(), str)


# --------------------------------------------------------------------------------------------
# Range checks
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Check:
    """A constraint on a parsed value and the words that describe it in an error."""

    expected: str
    ok: Callable[[Any], bool]


def _at_least(lo: int) -> _Check:
    return _Check(f"a value of at least {lo}", lambda v: v >= lo)


def _between(lo: float, hi: float) -> _Check:
    return _Check(f"a value from {lo} to {hi}", lambda v: lo <= v <= hi)


def _one_of(*choices: str) -> _Check:
    return _Check(f"one of {', '.join(choices)}", lambda v: v in choices)


_NON_NEGATIVE = _at_least(0)
_POSITIVE = _at_least(1)
_UNLIMITED_OR_NON_NEGATIVE = _Check("-1 (unlimited) or a value of at least 0", lambda v: v >= -1)
_NON_EMPTY = _Check("at least one entry", lambda v: len(v) > 0)
_COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_PEM_ONLY = _Check("PEM (convert JKS or PKCS12 stores to PEM files)", lambda v: v.upper() == "PEM")
_TLS_PROTOCOLS = ("TLSv1.2", "TLSv1.3")
_PRINCIPAL_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*:.+")
_SUPER_USERS = _Check(
    "principals such as User:admin, semicolon-separated",
    lambda v: all(_PRINCIPAL_RE.fullmatch(p.strip()) for p in v.split(";") if p.strip()),
)
_AUTHORIZERS = _Check(
    "the built-in authorizer (empty, or one of " + ", ".join(sorted(AUTHORIZER_CLASS_NAMES)) + ")",
    lambda v: v == "" or v in AUTHORIZER_CLASS_NAMES,
)
_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


# --------------------------------------------------------------------------------------------
# The broker table
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Key:
    """One Kafka broker key: which attribute it sets, how it parses, what it means.

    Keys that share an attribute form a synonym group; the first in table order wins when
    several are set. `scale` converts a synonym in coarser units (hours) to the attribute's.
    """

    name: str
    attr: str
    kind: _Kind[Any]
    check: _Check | None
    doc: str
    scale: int = 1

    def parse(self, raw: str) -> Any:
        try:
            value = self.kind.parse(raw)
        except ValueError as exc:
            raise _invalid(self.name, raw, str(exc)) from None
        if self.check is not None and not self.check.ok(value):
            raise _invalid(self.name, raw, self.check.expected)
        return value

    def effective(self, value: Any) -> Any:
        """The attribute value this key's parsed value stands for (-1 stays -1: unlimited)."""
        if self.scale != 1 and value >= 0:
            return value * self.scale
        return value


_K = _Key
# fmt: off
_BROKER_KEYS: tuple[_Key, ...] = (
    # --- server ---
    _K("node.id", "node_id", _INT, _NON_NEGATIVE,
       "This broker's id, as clients see it in Metadata."),
    _K("broker.id", "node_id", _INT, _NON_NEGATIVE,
       "Legacy synonym of node.id; must agree with it if both are set."),
    _K("listeners", "listeners", _LISTENERS, _NON_EMPTY,
       "Sockets to listen on: HOST:PORT or Kafka's NAME://HOST:PORT, comma-separated. An empty "
       "host or 0.0.0.0 listens on every interface; listeners named in controller.listener.names "
       "are ignored."),
    _K("advertised.listeners", "advertised_listeners", _LISTENERS, None,
       "Addresses given to clients in Metadata, matched to listeners by name. Unset: the listeners "
       "themselves, with this machine's host name in place of a wildcard host."),
    _K("listener.security.protocol.map", "listener_security_protocol_map", _PROTOCOL_MAP, None,
       "Listener name to security protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."),
    _K("controller.listener.names", "controller_listener_names", _LIST, None,
       "KRaft controller listeners. Onceflow runs no controller quorum; listeners with these names "
       "are skipped so a KRaft server.properties loads unchanged."),
    _K("socket.request.max.bytes", "socket_request_max_bytes", _INT, _POSITIVE,
       "Largest request the broker reads; a bigger size prefix closes the connection."),
    _K("queued.max.requests", "queued_max_requests", _INT, _POSITIVE,
       "Requests queued per broker before the server stops reading from sockets."),
    _K("connections.max.idle.ms", "connections_max_idle_ms", _LONG, _POSITIVE,
       "Idle connections are closed after this long."),
    # --- security: TLS, SASL, ACLs (each ssl.* and sasl.* key may be set per listener as
    # listener.name.<listener>.<key>; JAAS configs only per listener and mechanism) ---
    _K("inter.broker.listener.name", "inter_broker_listener_name", _OPTIONAL_NAME, None,
       "The listener brokers of a cluster use to reach each other (and authenticate on). "
       "Unset: the one whose security protocol is security.inter.broker.protocol."),
    _K("security.inter.broker.protocol", "security_inter_broker_protocol", _STRING,
       _one_of(*_SECURITY_PROTOCOLS),
       "Security protocol of the inter-broker listener when inter.broker.listener.name is "
       "unset."),
    _K("ssl.keystore.type", "ssl_keystore_type", _STRING, _PEM_ONLY,
       "Format of the broker's key and certificate: PEM."),
    _K("ssl.keystore.location", "ssl_keystore_location", _STRING, None,
       "PEM file with the broker's private key and certificate chain."),
    _K("ssl.keystore.certificate.chain", "ssl_keystore_certificate_chain", _PASSWORD, None,
       "The broker's certificate chain as PEM text (instead of ssl.keystore.location)."),
    _K("ssl.keystore.key", "ssl_keystore_key", _PASSWORD, None,
       "The broker's private key as PEM text (instead of ssl.keystore.location)."),
    _K("ssl.key.password", "ssl_key_password", _PASSWORD, None,
       "Password of an encrypted private key."),
    _K("ssl.keystore.password", "ssl_keystore_password", _PASSWORD, None,
       "Accepted for compatibility; a PEM keystore's key is decrypted with ssl.key.password."),
    _K("ssl.truststore.type", "ssl_truststore_type", _STRING, _PEM_ONLY,
       "Format of the trusted certificates: PEM."),
    _K("ssl.truststore.location", "ssl_truststore_location", _STRING, None,
       "PEM file of the CA certificates client certificates (and, between brokers, broker "
       "certificates) must be signed by."),
    _K("ssl.truststore.certificates", "ssl_truststore_certificates", _PASSWORD, None,
       "Trusted CA certificates as PEM text (instead of ssl.truststore.location)."),
    _K("ssl.truststore.password", "ssl_truststore_password", _PASSWORD, None,
       "Accepted for compatibility; PEM truststores have no password."),
    _K("ssl.client.auth", "ssl_client_auth", _STRING, _one_of("none", "requested", "required"),
       "Client certificates on SSL listeners: required, requested (used when sent) or none. "
       "The principal of a certificate is User:<its subject>, after ssl.principal.mapping.rules."),
    _K("ssl.enabled.protocols", "ssl_enabled_protocols", _LIST,
       _Check("TLSv1.2 and/or TLSv1.3", lambda v: bool(v) and set(v) <= set(_TLS_PROTOCOLS)),
       "TLS versions accepted; nothing older than TLS 1.2."),
    _K("ssl.protocol", "ssl_protocol", _STRING, _one_of("TLSv1.2", "TLSv1.3", "TLS"),
       "Accepted for compatibility; the versions are ssl.enabled.protocols."),
    _K("ssl.cipher.suites", "ssl_cipher_suites", _LIST, None,
       "OpenSSL cipher names for TLS 1.2 (empty: OpenSSL's secure defaults)."),
    _K("ssl.endpoint.identification.algorithm",
       "ssl_endpoint_identification_algorithm", _STRING, _one_of("https", ""),
       "https: a broker connecting to another checks the host name in its certificate."),
    _K("ssl.principal.mapping.rules", "ssl_principal_mapping_rules", _STRING, None,
       "Rules mapping a certificate's subject to a user name (Kafka's RULE:pattern/replace/[LU] "
       "syntax, comma-separated, DEFAULT keeps the whole subject)."),
    _K("sasl.enabled.mechanisms", "sasl_enabled_mechanisms", _UPPER_LIST, None,
       "SASL mechanisms of SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (GSSAPI and "
       "OAUTHBEARER are not supported)."),
    _K("sasl.mechanism.inter.broker.protocol",
       "sasl_mechanism_inter_broker_protocol", _OPTIONAL_NAME, None,
       "Mechanism brokers use to authenticate to each other on a SASL inter-broker listener; "
       "the credentials are the username and password of that listener's JAAS config."),
    _K("connections.max.reauth.ms", "connections_max_reauth_ms", _LONG, _NON_NEGATIVE,
       "Lifetime of a SASL session (KIP-368): a client must re-authenticate before it ends or "
       "its connection is closed. 0: sessions never expire."),
    _K("authorizer.class.name", "authorizer_class_name", _STRING, _AUTHORIZERS,
       "Switches ACLs on. Kafka's AclAuthorizer and StandardAuthorizer class names (and "
       "onceflow.security.authorizer.Authorizer) all mean the built-in authorizer. Empty: every "
       "request is allowed."),
    _K("super.users", "super_users", _STRING, _SUPER_USERS,
       "Principals allowed everything, semicolon-separated (User:admin;User:broker)."),
    _K("allow.everyone.if.no.acl.found", "allow_everyone_if_no_acl_found", _BOOL, None,
       "Allow any principal on a resource that has no ACL at all."),
    # --- topics and logs ---
    _K("log.dirs", "log_dirs", _LIST, _NON_EMPTY,
       "Data directories, comma-separated; each partition lives in one of them."),
    _K("log.dir", "log_dirs", _LIST, _NON_EMPTY,
       "Legacy single data directory, used when log.dirs is unset."),
    _K("num.partitions", "num_partitions", _INT, _POSITIVE,
       "Partitions of an auto-created topic."),
    _K("auto.create.topics.enable", "auto_create_topics_enable", _BOOL, None,
       "Create a topic when a producer or Metadata request names an unknown one."),
    _K("default.replication.factor", "default_replication_factor", _INT, _POSITIVE,
       "Replication factor of auto-created topics and of CreateTopics without one; a broker "
       "without zookeeper.connect runs alone, so there it must be 1."),
    _K("delete.topic.enable", "delete_topic_enable", _BOOL, None,
       "Allow DeleteTopics."),
    _K("min.insync.replicas", "min_insync_replicas", _INT, _POSITIVE,
       "In-sync replicas that must hold a write for acks=all: with fewer in the ISR the write "
       "is refused (NOT_ENOUGH_REPLICAS), or fails after its append if the ISR shrank while it "
       "waited (NOT_ENOUGH_REPLICAS_AFTER_APPEND)."),
    _K("message.max.bytes", "message_max_bytes", _INT, _NON_NEGATIVE,
       "Largest record batch a topic accepts (topic key: max.message.bytes)."),
    _K("compression.type", "compression_type", _STRING, _one_of(*_COMPRESSION_TYPES),
       "Final compression of a topic's batches; 'producer' keeps what the producer sent."),
    _K("log.segment.bytes", "log_segment_bytes", _INT, _at_least(14),
       "A segment is rolled when the next batch would take it past this size."),
    _K("log.roll.ms", "log_roll_ms", _LONG, _POSITIVE,
       "A segment is rolled once its first record is this old."),
    _K("log.roll.hours", "log_roll_ms", _INT, _POSITIVE,
       "log.roll.ms in hours, used when log.roll.ms is unset.", scale=_HOUR_MS),
    _K("log.roll.jitter.ms", "log_roll_jitter_ms", _LONG, _NON_NEGATIVE,
       "Random amount subtracted from the roll time so segments do not roll together."),
    _K("log.roll.jitter.hours", "log_roll_jitter_ms", _INT, _NON_NEGATIVE,
       "log.roll.jitter.ms in hours, used when log.roll.jitter.ms is unset.", scale=_HOUR_MS),
    _K("log.index.interval.bytes", "log_index_interval_bytes", _INT, _NON_NEGATIVE,
       "Bytes of log between two offset index entries."),
    _K("log.index.size.max.bytes", "log_index_size_max_bytes", _INT, _at_least(4),
       "Largest offset or time index file; a full index rolls the segment."),
    _K("log.retention.ms", "log_retention_ms", _LONG, _UNLIMITED_OR_NON_NEGATIVE,
       "Segments older than this are deleted; -1 keeps them forever."),
    _K("log.retention.minutes", "log_retention_ms", _INT, _UNLIMITED_OR_NON_NEGATIVE,
       "log.retention.ms in minutes, used when log.retention.ms is unset.", scale=_MINUTE_MS),
    _K("log.retention.hours", "log_retention_ms", _INT, _UNLIMITED_OR_NON_NEGATIVE,
       "log.retention.ms in hours, used when neither log.retention.ms nor .minutes is set.",
       scale=_HOUR_MS),
    _K("log.retention.bytes", "log_retention_bytes", _LONG, _UNLIMITED_OR_NON_NEGATIVE,
       "Oldest segments are deleted while a partition is larger than this; -1 means no limit."),
    _K("log.retention.check.interval.ms", "log_retention_check_interval_ms", _LONG, _POSITIVE,
       "How often retention is enforced."),
    _K("log.segment.delete.delay.ms", "log_segment_delete_delay_ms", _LONG, _NON_NEGATIVE,
       "How long a segment removed by retention stays on disk before its files are deleted."),
    _K("log.cleanup.policy", "log_cleanup_policy", _CLEANUP_POLICY, None,
       "delete (retention), compact (keep the latest record per key) or compact,delete."),
    _K("log.cleaner.enable", "log_cleaner_enable", _BOOL, None,
       "Run the compaction cleaner."),
    _K("log.cleaner.delete.retention.ms", "log_cleaner_delete_retention_ms", _LONG, _NON_NEGATIVE,
       "How long compaction keeps tombstones and transaction markers."),
    _K("log.cleaner.min.compaction.lag.ms",
       "log_cleaner_min_compaction_lag_ms", _LONG, _NON_NEGATIVE,
       "A record stays uncompacted for at least this long."),
    _K("log.cleaner.max.compaction.lag.ms", "log_cleaner_max_compaction_lag_ms", _LONG, _POSITIVE,
       "A record becomes eligible for compaction after at most this long."),
    _K("log.cleaner.min.cleanable.ratio",
       "log_cleaner_min_cleanable_ratio", _DOUBLE, _between(0, 1),
       "Dirty share of a log above which it is compacted."),
    _K("log.cleaner.backoff.ms", "log_cleaner_backoff_ms", _LONG, _NON_NEGATIVE,
       "Cleaner sleep when no log needs cleaning."),
    _K("log.flush.interval.messages", "log_flush_interval_messages", _LONG, _POSITIVE,
       "Kafka's fsync every N messages; the default never flushes by count. Onceflow's guarantee "
       "comes from onceflow.fsync.on.ack."),
    _K("log.flush.interval.ms", "log_flush_interval_ms", _LONG, _NON_NEGATIVE,
       "Kafka's fsync after a message has waited this long; the default never flushes by time."),
    _K("log.message.timestamp.type",
       "log_message_timestamp_type", _STRING, _one_of(*_TIMESTAMP_TYPES),
       "CreateTime keeps the producer's timestamps; LogAppendTime stamps the broker's clock."),
    _K("log.message.timestamp.before.max.ms",
       "log_message_timestamp_before_max_ms", _LONG, _NON_NEGATIVE,
       "How far in the past a CreateTime timestamp may be."),
    _K("log.message.timestamp.after.max.ms",
       "log_message_timestamp_after_max_ms", _LONG, _NON_NEGATIVE,
       "How far in the future a CreateTime timestamp may be."),
    _K("onceflow.fsync.on.ack", "onceflow_fsync_on_ack", _BOOL, None,
       "Answer acks=all produce requests only after the data is fsynced. false is Kafka's page- "
       "cache behaviour: faster, but an acknowledged write can be lost in a power cut."),
    _K("onceflow.log.dir.min.free.bytes", "onceflow_log_dir_min_free_bytes", _LONG,
       _NON_NEGATIVE,
       "Produce requests are refused (KAFKA_STORAGE_ERROR, retriable) while the log dir has "
       "less free space than the smaller of this and onceflow.log.dir.min.free.percent; the "
       "broker's own writes (markers, transaction log, offset commits) go on in the space "
       "below. 0 switches the check off."),
    _K("onceflow.log.dir.min.free.percent", "onceflow_log_dir_min_free_percent", _DOUBLE,
       _between(0, 100),
       "The free-space threshold as a percentage of the log dir's file system; the smaller "
       "of the two thresholds applies. 0 switches the check off."),
    _K("onceflow.log.dir.ballast.bytes", "onceflow_log_dir_ballast_bytes", _LONG, _NON_NEGATIVE,
       "Space reserved in the log dir (the file onceflow-ballast) and released the moment a "
       "write finds the disk full anyway, so the broker's own writes can finish in-flight "
       "transactions; made again once free space is back above the threshold. 0: none."),
    _K("onceflow.metrics.listener", "onceflow_metrics_listener", _OPTIONAL_ADDRESS, None,
       "HOST:PORT where the broker serves Prometheus metrics at http://HOST:PORT/metrics. "
       "Unset (the default): no metrics endpoint."),
    # --- cluster (ZooKeeper) ---
    _K("zookeeper.connect", "zookeeper_connect", _STRING, None,
       "ZooKeeper servers (HOST:PORT,...[/chroot]) holding the cluster's metadata. Unset: the "
       "broker runs alone, as a cluster of one, with no ZooKeeper."),
    _K("zookeeper.session.timeout.ms", "zookeeper_session_timeout_ms", _INT, _POSITIVE,
       "ZooKeeper session timeout: a broker silent this long is taken for dead and its "
       "partitions get new leaders."),
    _K("zookeeper.connection.timeout.ms", "zookeeper_connection_timeout_ms", _INT, _POSITIVE,
       "How long startup waits to connect to ZooKeeper before it gives up with an error."),
    _K("replica.lag.time.max.ms", "replica_lag_time_max_ms", _LONG, _POSITIVE,
       "A follower that has not caught up with the leader's log end for this long leaves the "
       "ISR; it rejoins once caught up."),
    _K("replica.fetch.max.bytes", "replica_fetch_max_bytes", _INT, _POSITIVE,
       "Bytes a follower asks for per partition in one fetch (at least one batch comes back)."),
    _K("replica.fetch.response.max.bytes", "replica_fetch_response_max_bytes", _INT, _POSITIVE,
       "Bytes a follower asks for in one whole fetch response."),
    _K("replica.fetch.wait.max.ms", "replica_fetch_wait_max_ms", _INT, _POSITIVE,
       "How long a leader may hold a follower's fetch while it has nothing new."),
    _K("replica.fetch.backoff.ms", "replica_fetch_backoff_ms", _INT, _NON_NEGATIVE,
       "Pause of a follower after a fetch that failed."),
    _K("replica.socket.timeout.ms", "replica_socket_timeout_ms", _INT, _POSITIVE,
       "A follower's fetch that gets no answer this long is retried on a new connection."),
    _K("unclean.leader.election.enable", "unclean_leader_election_enable", _BOOL, None,
       "Let a replica outside the ISR lead when no ISR member is alive, at the cost of "
       "acknowledged records. Off, as in Kafka: the partition waits for an ISR member."),
    _K("controlled.shutdown.enable", "controlled_shutdown_enable", _BOOL, None,
       "On SIGTERM, ask the controller to move leadership away before exiting."),
    _K("controlled.shutdown.max.retries", "controlled_shutdown_max_retries", _INT, _NON_NEGATIVE,
       "Attempts of a controlled shutdown before the broker exits anyway."),
    _K("controlled.shutdown.retry.backoff.ms",
       "controlled_shutdown_retry_backoff_ms", _LONG, _NON_NEGATIVE,
       "Pause between attempts of a controlled shutdown."),
    _K("auto.leader.rebalance.enable", "auto_leader_rebalance_enable", _BOOL, None,
       "Move leadership back to each partition's preferred (first) replica when it is in sync."),
    _K("leader.imbalance.check.interval.seconds",
       "leader_imbalance_check_interval_seconds", _LONG, _POSITIVE,
       "How often the controller looks for partitions led by other than their preferred replica."),
    _K("leader.imbalance.per.broker.percentage",
       "leader_imbalance_per_broker_percentage", _INT, _between(0, 100),
       "A broker's share of partitions led by others above which leadership is moved back."),
    _K("offsets.topic.replication.factor", "offsets_topic_replication_factor", _INT, _POSITIVE,
       "Replicas of __consumer_offsets. It is created once this many brokers are alive; until "
       "then FindCoordinator answers COORDINATOR_NOT_AVAILABLE. Alone, 1."),
    _K("transaction.state.log.replication.factor",
       "transaction_state_log_replication_factor", _INT, _POSITIVE,
       "Replicas of __transaction_state, created once this many brokers are alive. Alone, 1."),
    _K("transaction.state.log.min.isr", "transaction_state_log_min_isr", _INT, _POSITIVE,
       "min.insync.replicas of __transaction_state."),
    # --- group coordinator ---
    _K("offsets.topic.num.partitions", "offsets_topic_num_partitions", _INT, _POSITIVE,
       "Partitions of __consumer_offsets; fixed once the topic exists."),
    _K("offsets.topic.segment.bytes", "offsets_topic_segment_bytes", _INT, _POSITIVE,
       "Segment size of __consumer_offsets."),
    _K("offsets.retention.minutes", "offsets_retention_minutes", _INT, _POSITIVE,
       "Committed offsets of an empty group expire after this long."),
    _K("offsets.retention.check.interval.ms",
       "offsets_retention_check_interval_ms", _LONG, _POSITIVE,
       "How often expired offsets are removed."),
    _K("offsets.commit.timeout.ms", "offsets_commit_timeout_ms", _INT, _POSITIVE,
       "An offset commit fails if its append to __consumer_offsets takes longer."),
    _K("group.min.session.timeout.ms", "group_min_session_timeout_ms", _INT, _NON_NEGATIVE,
       "Shortest session timeout a consumer may ask for."),
    _K("group.max.session.timeout.ms", "group_max_session_timeout_ms", _INT, _NON_NEGATIVE,
       "Longest session timeout a consumer may ask for."),
    _K("group.initial.rebalance.delay.ms", "group_initial_rebalance_delay_ms", _INT, _NON_NEGATIVE,
       "How long a new group waits for more members before its first rebalance."),
    _K("group.max.size", "group_max_size", _INT, _POSITIVE,
       "Most members a classic group may have."),
    _K("group.consumer.session.timeout.ms", "group_consumer_session_timeout_ms", _INT, _POSITIVE,
       "A consumer-protocol member (KIP-848) that has not heartbeated for this long is "
       "removed and its partitions reassigned."),
    _K("group.consumer.min.session.timeout.ms",
       "group_consumer_min_session_timeout_ms", _INT, _POSITIVE,
       "Lower bound of group.consumer.session.timeout.ms."),
    _K("group.consumer.max.session.timeout.ms",
       "group_consumer_max_session_timeout_ms", _INT, _POSITIVE,
       "Upper bound of group.consumer.session.timeout.ms."),
    _K("group.consumer.heartbeat.interval.ms",
       "group_consumer_heartbeat_interval_ms", _INT, _POSITIVE,
       "How often consumer-protocol members heartbeat (told in every heartbeat response)."),
    _K("group.consumer.min.heartbeat.interval.ms",
       "group_consumer_min_heartbeat_interval_ms", _INT, _POSITIVE,
       "Lower bound of group.consumer.heartbeat.interval.ms."),
    _K("group.consumer.max.heartbeat.interval.ms",
       "group_consumer_max_heartbeat_interval_ms", _INT, _POSITIVE,
       "Upper bound of group.consumer.heartbeat.interval.ms."),
    _K("group.consumer.assignors", "group_consumer_assignors", _LIST, _NON_EMPTY,
       "Server-side assignors of consumer-protocol groups (uniform, range); the first is "
       "the default, a member picks another with group.remote.assignor."),
    _K("group.consumer.max.size", "group_consumer_max_size", _INT, _POSITIVE,
       "Most members a consumer-protocol group may have."),
    _K("group.consumer.migration.policy", "group_consumer_migration_policy", _LOWER_STRING,
       _one_of("disabled", "upgrade", "downgrade", "bidirectional"),
       "Whether a non-empty group may change protocol online: upgrade (a classic group "
       "becomes a consumer-protocol group when a KIP-848 member joins), downgrade (back "
       "when its last KIP-848 member leaves), bidirectional (both) or disabled."),
    # --- transaction coordinator ---
    _K("transaction.state.log.num.partitions",
       "transaction_state_log_num_partitions", _INT, _POSITIVE,
       "Partitions of __transaction_state; fixed once the topic exists."),
    _K("transaction.state.log.segment.bytes",
       "transaction_state_log_segment_bytes", _INT, _POSITIVE,
       "Segment size of __transaction_state."),
    _K("transaction.max.timeout.ms", "transaction_max_timeout_ms", _INT, _POSITIVE,
       "Longest transaction.timeout.ms a producer may ask for in InitProducerId."),
    _K("transactional.id.expiration.ms", "transactional_id_expiration_ms", _INT, _POSITIVE,
       "A transactional id with no transaction for this long is forgotten."),
    _K("transaction.abort.timed.out.transaction.cleanup.interval.ms",
       "transaction_abort_timed_out_transaction_cleanup_interval_ms", _INT, _POSITIVE,
       "How often the coordinator aborts transactions past their timeout."),
    _K("transaction.remove.expired.transaction.cleanup.interval.ms",
       "transaction_remove_expired_transaction_cleanup_interval_ms", _INT, _POSITIVE,
       "How often expired transactional ids are removed."),
    _K("transaction.partition.verification.enable",
       "transaction_partition_verification_enable", _BOOL, None,
       "Check with the coordinator that a transactional write's partition was added to the "
       "transaction before appending it (KIP-890)."),
    _K("onceflow.transaction.version", "onceflow_transaction_version", _INT, _between(0, 2),
       "The finalized level of Kafka's transaction.version feature that ApiVersions "
       "advertises (Kafka sets it with kafka-features.sh). At 2, Java clients 4.x use "
       "transaction version 2 (KIP-890 part 2): Produce v12 adds its partition, EndTxn v5 "
       "bumps the producer epoch at every transaction end. Set it the same on every broker "
       "of a cluster."),
    _K("producer.id.expiration.ms", "producer_id_expiration_ms", _INT, _POSITIVE,
       "A partition forgets an idle producer's sequence state after this long."),
    _K("producer.id.expiration.check.interval.ms",
       "producer_id_expiration_check_interval_ms", _INT, _POSITIVE,
       "How often expired producer ids are removed."),
)
# fmt: on
del _K

_BROKER_BY_NAME: dict[str, _Key] = {key.name: key for key in _BROKER_KEYS}
_BROKER_GROUPS: dict[str, tuple[_Key, ...]] = {}
for _key in _BROKER_KEYS:
    _BROKER_GROUPS[_key.attr] = (*_BROKER_GROUPS.get(_key.attr, ()), _key)
del _key

#: Kafka keys accepted and ignored, with the reason: they configure parts of a Kafka cluster
#: Onceflow does not have. They raise no warning, so a stock server.properties loads quietly.
IGNORED_BROKER_KEYS: Mapping[str, str] = {
    "process.roles": "Onceflow runs no KRaft controller",
    "controller.quorum.voters": "Onceflow runs no KRaft controller",
    "controller.quorum.bootstrap.servers": "Onceflow runs no KRaft controller",
    "inter.broker.protocol.version": "every broker speaks the same versions",
    "num.network.threads": "the server is one asyncio loop",
    "num.io.threads": "the server is one asyncio loop",
    "background.threads": "the server is one asyncio loop",
    "num.recovery.threads.per.data.dir": "recovery runs in the server's own loop",
    "num.replica.fetchers": "one fetcher per leader broker, in the server's own loop",
    "socket.send.buffer.bytes": "the OS defaults are used",
    "socket.receive.buffer.bytes": "the OS defaults are used",
    "share.coordinator.state.topic.replication.factor": "share groups are not supported",
    "share.coordinator.state.topic.min.isr": "share groups are not supported",
    "log.flush.scheduler.interval.ms": "flushing follows onceflow.fsync.on.ack",
    "log.flush.offset.checkpoint.interval.ms": "checkpoints are written by the log itself",
    "log.preallocate": "segments are not preallocated",
    "log.cleaner.threads": "the cleaner runs in the server's own loop",
    "log.cleaner.dedupe.buffer.size": "the cleaner sizes its own map",
    "group.coordinator.rebalance.protocols": "only the classic group protocol is supported",
    "broker.rack": "replicas are assigned rack-unaware",
}

#: Every broker key Onceflow understands.
BROKER_CONFIG_KEYS: frozenset[str] = frozenset(_BROKER_BY_NAME)


def _render(kind: _Kind[Any], value: Any) -> str | None:
    """Kafka's rendering, with an empty list or no value shown as unset (null) as Kafka
    shows it."""
    if value is None or (isinstance(value, tuple) and not value):
        return None
    return kind.render(value)


# --------------------------------------------------------------------------------------------
# BrokerConfig
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerConfig:
    """The broker's static configuration; see `CONFIG_DOCS` for each attribute's Kafka key.

    Build one with `load_broker_config()`. Constructing it directly (in tests) is fine too:
    every value is range-checked here, and the error names the Kafka key. Attributes hold
    effective values: `log_retention_ms` is the answer whichever of log.retention.ms, .minutes
    or .hours was set.
    """

    # server
    node_id: int = 0
    listeners: tuple[Listener, ...] = (_DEFAULT_LISTENER,)
    advertised_listeners: tuple[Listener, ...] = ()  # empty: same as listeners
    listener_security_protocol_map: tuple[tuple[str, str], ...] = (
        ("CONTROLLER", "PLAINTEXT"),
        ("PLAINTEXT", "PLAINTEXT"),
        ("SSL", "SSL"),
        ("SASL_PLAINTEXT", "SASL_PLAINTEXT"),
        ("SASL_SSL", "SASL_SSL"),
    )
    controller_listener_names: tuple[str, ...] = ()
    socket_request_max_bytes: int = 104_857_600
    queued_max_requests: int = 500
    connections_max_idle_ms: int = 600_000
    # security
    inter_broker_listener_name: str = ""
    security_inter_broker_protocol: str = "PLAINTEXT"
    ssl_keystore_type: str = "PEM"
    ssl_keystore_location: str = ""
    ssl_keystore_certificate_chain: str = ""
    ssl_keystore_key: str = ""
    ssl_key_password: str = ""
    ssl_keystore_password: str = ""
    ssl_truststore_type: str = "PEM"
    ssl_truststore_location: str = ""
    ssl_truststore_certificates: str = ""
    ssl_truststore_password: str = ""
    ssl_client_auth: str = "none"
    ssl_enabled_protocols: tuple[str, ...] = _TLS_PROTOCOLS
    ssl_protocol: str = "TLSv1.3"
    ssl_cipher_suites: tuple[str, ...] = ()
    ssl_endpoint_identification_algorithm: str = "https"
    ssl_principal_mapping_rules: str = "DEFAULT"
    sasl_enabled_mechanisms: tuple[str, ...] = ("GSSAPI",)
    sasl_mechanism_inter_broker_protocol: str = "GSSAPI"
    connections_max_reauth_ms: int = 0
    authorizer_class_name: str = ""
    super_users: str = ""
    allow_everyone_if_no_acl_found: bool = False
    #: listener.name.<listener>.<key> settings: (listener, key, parsed value); JAAS configs
    #: are kept raw, keyed <mechanism>.sasl.jaas.config.
    listener_settings: tuple[tuple[str, str, Any], ...] = field(default=(), repr=False)
    # topics and logs
    log_dirs: tuple[str, ...] = ("./data",)
    num_partitions: int = 1
    auto_create_topics_enable: bool = True
    default_replication_factor: int = 1
    delete_topic_enable: bool = True
    min_insync_replicas: int = 1
    message_max_bytes: int = 1_048_588
    compression_type: str = "producer"
    log_segment_bytes: int = 1 << 30
    log_roll_ms: int = _WEEK_MS
    log_roll_jitter_ms: int = 0
    log_index_interval_bytes: int = 4096
    log_index_size_max_bytes: int = 10 << 20
    log_retention_ms: int = _WEEK_MS
    log_retention_bytes: int = -1
    log_retention_check_interval_ms: int = 300_000
    log_segment_delete_delay_ms: int = 60_000
    log_cleanup_policy: tuple[str, ...] = ("delete",)
    log_cleaner_enable: bool = True
    log_cleaner_delete_retention_ms: int = 86_400_000
    log_cleaner_min_compaction_lag_ms: int = 0
    log_cleaner_max_compaction_lag_ms: int = LONG_MAX
    log_cleaner_min_cleanable_ratio: float = 0.5
    log_cleaner_backoff_ms: int = 15_000
    log_flush_interval_messages: int = LONG_MAX
    log_flush_interval_ms: int = LONG_MAX
    log_message_timestamp_type: str = "CreateTime"
    log_message_timestamp_before_max_ms: int = LONG_MAX
    log_message_timestamp_after_max_ms: int = _HOUR_MS
    onceflow_fsync_on_ack: bool = True
    onceflow_log_dir_min_free_bytes: int = 1 << 30
    onceflow_log_dir_min_free_percent: float = 5.0
    onceflow_log_dir_ballast_bytes: int = 16 << 20
    onceflow_metrics_listener: Listener | None = None
    # cluster (ZooKeeper)
    zookeeper_connect: str = ""
    zookeeper_session_timeout_ms: int = 18_000
    zookeeper_connection_timeout_ms: int = 18_000
    replica_lag_time_max_ms: int = 30_000
    replica_fetch_max_bytes: int = 1_048_576
    replica_fetch_response_max_bytes: int = 10_485_760
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_backoff_ms: int = 1000
    replica_socket_timeout_ms: int = 30_000
    unclean_leader_election_enable: bool = False
    controlled_shutdown_enable: bool = True
    controlled_shutdown_max_retries: int = 3
    controlled_shutdown_retry_backoff_ms: int = 5000
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    offsets_topic_replication_factor: int = 3
    transaction_state_log_replication_factor: int = 3
    transaction_state_log_min_isr: int = 2
    # group coordinator
    offsets_topic_num_partitions: int = 50
    offsets_topic_segment_bytes: int = 104_857_600
    offsets_retention_minutes: int = 10_080
    offsets_retention_check_interval_ms: int = 600_000
    offsets_commit_timeout_ms: int = 5000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = INT_MAX
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_min_session_timeout_ms: int = 45_000
    group_consumer_max_session_timeout_ms: int = 60_000
    group_consumer_heartbeat_interval_ms: int = 5_000
    group_consumer_min_heartbeat_interval_ms: int = 5_000
    group_consumer_max_heartbeat_interval_ms: int = 15_000
    group_consumer_assignors: tuple[str, ...] = ("uniform", "range")
    group_consumer_max_size: int = INT_MAX
    group_consumer_migration_policy: str = "bidirectional"
    # transaction coordinator
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_segment_bytes: int = 104_857_600
    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 604_800_000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    transaction_partition_verification_enable: bool = True
    onceflow_transaction_version: int = 0
    producer_id_expiration_ms: int = 86_400_000
    producer_id_expiration_check_interval_ms: int = 600_000
    #: The Kafka keys this config was loaded from and their values (normalised), for
    #: DescribeConfigs. Not part of equality: two configs with the same values are equal.
    settings: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)
    #: The dynamic broker configs on top (AlterConfigs): cluster-wide, then this broker's.
    dynamic_default: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)
    dynamic_broker: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        for attr, group in _BROKER_GROUPS.items():
            primary = group[0]
            value = getattr(self, attr)
            if primary.check is not None and not primary.check.ok(value):
                shown = _render(primary.kind, value) or ""
                raise _invalid(primary.name, shown, primary.check.expected)
        for rule in _BROKER_RULES:
            rule(self)

    def effective_advertised_listeners(self) -> tuple[Listener, ...]:
        """advertised.listeners, or the listeners with this host's name for wildcard hosts."""
        if self.advertised_listeners:
            return tuple(
                dataclasses.replace(ad, host=_local_hostname()) if ad.host == "" else ad
                for ad in self.advertised_listeners
            )
        return tuple(
            dataclasses.replace(listener, host=_local_hostname())
            if listener.is_wildcard
            else listener
            for listener in self.listeners
        )

    def advertised_listener_for(self, listener_name: str) -> Listener:
        """The address to give clients that connected through the listener `listener_name`."""
        advertised = self.effective_advertised_listeners()
        for listener in advertised:
            if listener.name == listener_name.upper():
                return listener
        return advertised[0]

    def security_protocol(self, listener_name: str) -> str:
        """The security protocol of a listener (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)."""
        return dict(self.listener_security_protocol_map)[listener_name.upper()]

    def listener_value(self, listener_name: str, key: str) -> Any:
        """A security key's value for one listener: listener.name.<listener>.<key> if set,
        else the broker-wide key."""
        name = listener_name.upper()
        for listener, set_key, value in self.listener_settings:
            if listener == name and set_key == key:
                return value
        return getattr(self, _BROKER_BY_NAME[key].attr)

    def jaas_config(self, listener_name: str, mechanism: str) -> str | None:
        """listener.name.<listener>.<mechanism>.sasl.jaas.config, raw, if set."""
        wanted = f"{mechanism.lower()}.sasl.jaas.config"
        for listener, key, value in self.listener_settings:
            if listener == listener_name.upper() and key == wanted:
                return str(value)
        return None

    def inter_broker_listener(self) -> Listener:
        """The listener brokers connect to each other on (inter.broker.listener.name, else
        the first with security.inter.broker.protocol, else the first listener)."""
        protocols = dict(self.listener_security_protocol_map)
        for listener in self.listeners:
            if self.inter_broker_listener_name:
                if listener.name == self.inter_broker_listener_name:
                    return listener
            elif protocols.get(listener.name) == self.security_inter_broker_protocol:
                return listener
        return self.listeners[0]

    def topic_defaults(self) -> TopicConfig:
        """The config of a topic with no overrides: the broker's log.* values."""
        return TopicConfig(**{spec.attr: getattr(self, spec.broker_attr) for spec in _TOPIC_KEYS})

    def topic_config(self, overrides: Mapping[str, str | None]) -> TopicConfig:
        """The config of a topic with these (persisted) overrides; raises ConfigError."""
        return self.topic_defaults().with_overrides(overrides)

    def with_dynamic(self, default: Mapping[str, str], broker: Mapping[str, str]) -> BrokerConfig:
        """This (static) config under dynamic broker configs, Kafka's precedence: this
        broker's, then the cluster-wide default, then static; within one of them the first
        synonym of a group (log.retention.ms before .hours). Raises ConfigError."""
        check_dynamic_broker_config(default)
        check_dynamic_broker_config(broker)
        changes: dict[str, Any] = {}
        for attr in _DYNAMIC_ATTRS:
            for layer in (broker, default):
                spec = next((s for s in _BROKER_GROUPS[attr] if s.name in layer), None)
                if spec is not None:
                    changes[attr] = spec.effective(spec.parse(layer[spec.name]))
                    break
        return dataclasses.replace(
            self,
            **changes,
            dynamic_default=tuple(sorted(default.items())),
            dynamic_broker=tuple(sorted(broker.items())),
        )


def _check_listeners(cfg: BrokerConfig) -> None:
    protocols = dict(cfg.listener_security_protocol_map)
    seen_names: set[str] = set()
    seen_sockets: set[tuple[str, int]] = set()
    for listener in cfg.listeners:
        if listener.name not in protocols:
            reason = (
                f"no security protocol for listener name {listener.name} in "
                "listener.security.protocol.map"
            )
            raise _invalid("listeners", _render_listeners(cfg.listeners), reason)
        if listener.name in seen_names:
            raise _invalid("listeners", _render_listeners(cfg.listeners), "each listener name once")
        if listener.port != 0 and (listener.host, listener.port) in seen_sockets:
            raise _invalid("listeners", _render_listeners(cfg.listeners), "each HOST:PORT once")
        seen_names.add(listener.name)
        seen_sockets.add((listener.host, listener.port))
    for ad in cfg.advertised_listeners:
        shown = _render_listeners(cfg.advertised_listeners)
        if ad.name not in seen_names:
            raise _invalid(
                "advertised.listeners",
                shown,
                f"only listener names defined in listeners ({', '.join(sorted(seen_names))})",
            )
        if ad.host in ("0.0.0.0", "::"):
            raise _invalid(
                "advertised.listeners", shown, "an address clients can connect to, not a wildcard"
            )
        if ad.port == 0:
            raise _invalid("advertised.listeners", shown, "a port from 1 to 65535")


def _check_security(cfg: BrokerConfig) -> None:
    """What each listener's security protocol needs, checked before anything binds."""
    names = {listener.name for listener in cfg.listeners}
    if cfg.inter_broker_listener_name:
        if cfg.inter_broker_listener_name not in names:
            raise _invalid(
                "inter.broker.listener.name",
                cfg.inter_broker_listener_name,
                f"a listener name defined in listeners ({', '.join(sorted(names))})",
            )
        if any(key == "security.inter.broker.protocol" for key, _ in cfg.settings):
            raise _invalid(
                "security.inter.broker.protocol",
                cfg.security_inter_broker_protocol,
                "not set together with inter.broker.listener.name",
            )
    for listener in cfg.listeners:
        protocol = cfg.security_protocol(listener.name)
        if protocol in ("SSL", "SASL_SSL"):
            location = cfg.listener_value(listener.name, "ssl.keystore.location")
            chain = cfg.listener_value(listener.name, "ssl.keystore.certificate.chain")
            key = cfg.listener_value(listener.name, "ssl.keystore.key")
            if not location and not (chain and key):
                raise _invalid(
                    "ssl.keystore.location",
                    "",
                    f"a PEM key and certificate for the {protocol} listener {listener.name} "
                    "(or ssl.keystore.certificate.chain with ssl.keystore.key)",
                )
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            mechanisms = cfg.listener_value(listener.name, "sasl.enabled.mechanisms")
            unsupported = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
            if not mechanisms or unsupported:
                raise _invalid(
                    "sasl.enabled.mechanisms",
                    ",".join(mechanisms),
                    f"mechanisms Onceflow supports ({', '.join(SUPPORTED_MECHANISMS)}) for the "
                    f"{protocol} listener {listener.name}",
                )
    inter = cfg.inter_broker_listener()
    if cfg.zookeeper_connect and cfg.security_protocol(inter.name).startswith("SASL"):
        mechanism = cfg.sasl_mechanism_inter_broker_protocol
        enabled = cfg.listener_value(inter.name, "sasl.enabled.mechanisms")
        if mechanism not in enabled:
            raise _invalid(
                "sasl.mechanism.inter.broker.protocol",
                mechanism,
                f"a mechanism enabled on the inter-broker listener {inter.name} "
                f"({', '.join(enabled)})",
            )


def _check_metrics_listener(cfg: BrokerConfig) -> None:
    metrics = cfg.onceflow_metrics_listener
    if metrics is None or metrics.port == 0:
        return
    for listener in cfg.listeners:
        same_host = listener.is_wildcard or metrics.is_wildcard or listener.host == metrics.host
        if listener.port == metrics.port and same_host:
            raise _invalid(
                "onceflow.metrics.listener",
                metrics.address,
                f"a port other than the Kafka listener's ({listener.address})",
            )


def _check_session_timeouts(cfg: BrokerConfig) -> None:
    if cfg.group_min_session_timeout_ms > cfg.group_max_session_timeout_ms:
        raise _invalid(
            "group.min.session.timeout.ms",
            str(cfg.group_min_session_timeout_ms),
            f"at most group.max.session.timeout.ms ({cfg.group_max_session_timeout_ms})",
        )


def _check_consumer_group_timeouts(cfg: BrokerConfig) -> None:
    """Kafka's bounds of the consumer protocol's session timeout and heartbeat interval."""
    for name, low, value, high in (
        (
            "session.timeout.ms",
            cfg.group_consumer_min_session_timeout_ms,
            cfg.group_consumer_session_timeout_ms,
            cfg.group_consumer_max_session_timeout_ms,
        ),
        (
            "heartbeat.interval.ms",
            cfg.group_consumer_min_heartbeat_interval_ms,
            cfg.group_consumer_heartbeat_interval_ms,
            cfg.group_consumer_max_heartbeat_interval_ms,
        ),
    ):
        if not low <= value <= high:
            raise _invalid(
                f"group.consumer.{name}",
                str(value),
                f"between group.consumer.min.{name} ({low}) and group.consumer.max.{name} ({high})",
            )
    if cfg.group_consumer_heartbeat_interval_ms >= cfg.group_consumer_session_timeout_ms:
        raise _invalid(
            "group.consumer.heartbeat.interval.ms",
            str(cfg.group_consumer_heartbeat_interval_ms),
            "less than group.consumer.session.timeout.ms "
            f"({cfg.group_consumer_session_timeout_ms})",
        )
    unknown = [a for a in cfg.group_consumer_assignors if a not in ("uniform", "range")]
    if unknown:
        raise _invalid("group.consumer.assignors", ",".join(unknown), "uniform or range")


def _check_compaction_lag(cfg: BrokerConfig) -> None:
    if cfg.log_cleaner_min_compaction_lag_ms > cfg.log_cleaner_max_compaction_lag_ms:
        raise _invalid(
            "log.cleaner.min.compaction.lag.ms",
            str(cfg.log_cleaner_min_compaction_lag_ms),
            f"at most log.cleaner.max.compaction.lag.ms ({cfg.log_cleaner_max_compaction_lag_ms})",
        )


def _check_standalone(cfg: BrokerConfig) -> None:
    """A broker without ZooKeeper runs alone: a topic cannot have replicas elsewhere."""
    if not cfg.zookeeper_connect and cfg.default_replication_factor != 1:
        raise _invalid(
            "default.replication.factor",
            str(cfg.default_replication_factor),
            "1 on a single broker (set zookeeper.connect to run a cluster)",
        )


_BROKER_RULES: tuple[Callable[[BrokerConfig], None], ...] = (
    _check_listeners,
    _check_security,
    _check_metrics_listener,
    _check_session_timeouts,
    _check_consumer_group_timeouts,
    _check_compaction_lag,
    _check_standalone,
)


# --------------------------------------------------------------------------------------------
# TopicConfig
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _TopicKey:
    """One topic-level key and the broker attribute that supplies its default."""

    name: str
    attr: str
    broker_attr: str
    doc: str

    @property
    def broker_keys(self) -> tuple[_Key, ...]:
        """The broker keys this topic key falls back to, highest precedence first."""
        return _BROKER_GROUPS[self.broker_attr]

    @property
    def kind(self) -> _Kind[Any]:
        return self.broker_keys[0].kind

    @property
    def check(self) -> _Check | None:
        return self.broker_keys[0].check

    def parse(self, raw: str) -> Any:
        try:
            value = self.kind.parse(raw)
        except ValueError as exc:
            raise _invalid(self.name, raw, str(exc)) from None
        if self.check is not None and not self.check.ok(value):
            raise _invalid(self.name, raw, self.check.expected)
        return value


_T = _TopicKey
# fmt: off
_TOPIC_KEYS: tuple[_TopicKey, ...] = (
    _T("cleanup.policy", "cleanup_policy", "log_cleanup_policy",
       "delete (retention), compact (latest record per key) or compact,delete."),
    _T("compression.type", "compression_type", "compression_type",
       "Final compression of stored batches; 'producer' keeps the producer's."),
    _T("delete.retention.ms", "delete_retention_ms", "log_cleaner_delete_retention_ms",
       "How long compaction keeps tombstones and transaction markers."),
    _T("file.delete.delay.ms", "file_delete_delay_ms", "log_segment_delete_delay_ms",
       "Delay before a removed segment's files are deleted."),
    _T("flush.messages", "flush_messages", "log_flush_interval_messages",
       "fsync every N messages (Kafka's knob; see onceflow.fsync.on.ack)."),
    _T("flush.ms", "flush_ms", "log_flush_interval_ms",
       "fsync after a message waited this long (Kafka's knob; see onceflow.fsync.on.ack)."),
    _T("index.interval.bytes", "index_interval_bytes", "log_index_interval_bytes",
       "Bytes of log between offset index entries."),
    _T("max.compaction.lag.ms", "max_compaction_lag_ms", "log_cleaner_max_compaction_lag_ms",
       "A record becomes eligible for compaction after at most this long."),
    _T("max.message.bytes", "max_message_bytes", "message_max_bytes",
       "Largest record batch the topic accepts."),
    _T("message.timestamp.after.max.ms",
       "message_timestamp_after_max_ms", "log_message_timestamp_after_max_ms",
       "How far in the future a CreateTime may be."),
    _T("message.timestamp.before.max.ms",
       "message_timestamp_before_max_ms", "log_message_timestamp_before_max_ms",
       "How far in the past a CreateTime may be."),
    _T("message.timestamp.type", "message_timestamp_type", "log_message_timestamp_type",
       "CreateTime (producer's clock) or LogAppendTime (broker's clock)."),
    _T("min.cleanable.dirty.ratio", "min_cleanable_dirty_ratio", "log_cleaner_min_cleanable_ratio",
       "Dirty share of the log above which it is compacted."),
    _T("min.compaction.lag.ms", "min_compaction_lag_ms", "log_cleaner_min_compaction_lag_ms",
       "A record stays uncompacted for at least this long."),
    _T("min.insync.replicas", "min_insync_replicas", "min_insync_replicas",
       "Replicas that must hold a write for acks=all."),
    _T("retention.bytes", "retention_bytes", "log_retention_bytes",
       "Per-partition size above which the oldest segments are deleted; -1: no limit."),
    _T("retention.ms", "retention_ms", "log_retention_ms",
       "Age after which segments are deleted; -1: keep forever."),
    _T("segment.bytes", "segment_bytes", "log_segment_bytes",
       "Segment size that triggers a roll."),
    _T("segment.index.bytes", "segment_index_bytes", "log_index_size_max_bytes",
       "Largest offset or time index file of a segment."),
    _T("segment.jitter.ms", "segment_jitter_ms", "log_roll_jitter_ms",
       "Random amount subtracted from segment.ms."),
    _T("segment.ms", "segment_ms", "log_roll_ms",
       "Age of a segment's first record that triggers a roll."),
)
# fmt: on
del _T

_TOPIC_BY_NAME: dict[str, _TopicKey] = {key.name: key for key in _TOPIC_KEYS}

#: Every topic-level key Onceflow understands.
TOPIC_CONFIG_KEYS: frozenset[str] = frozenset(_TOPIC_BY_NAME)


@dataclass(frozen=True)
class TopicConfig:
    """A topic's effective configuration; see `TOPIC_CONFIG_DOCS` for each key.

    `overrides` holds the topic-level keys set on this topic (normalised, sorted by key). That
    is what the broker persists; `BrokerConfig.topic_config(overrides_dict())` rebuilds an equal
    TopicConfig, picking up the current broker defaults for everything else.
    """

    cleanup_policy: tuple[str, ...] = ("delete",)
    compression_type: str = "producer"
    delete_retention_ms: int = 86_400_000
    file_delete_delay_ms: int = 60_000
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    index_interval_bytes: int = 4096
    max_compaction_lag_ms: int = LONG_MAX
    max_message_bytes: int = 1_048_588
    message_timestamp_after_max_ms: int = _HOUR_MS
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_type: str = "CreateTime"
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    min_insync_replicas: int = 1
    retention_bytes: int = -1
    retention_ms: int = _WEEK_MS
    segment_bytes: int = 1 << 30
    segment_index_bytes: int = 10 << 20
    segment_jitter_ms: int = 0
    segment_ms: int = _WEEK_MS
    overrides: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        for spec in _TOPIC_KEYS:
            value = getattr(self, spec.attr)
            if spec.check is not None and not spec.check.ok(value):
                raise _invalid(spec.name, _render(spec.kind, value) or "", spec.check.expected)
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise _invalid(
                "min.compaction.lag.ms",
                str(self.min_compaction_lag_ms),
                f"at most max.compaction.lag.ms ({self.max_compaction_lag_ms})",
            )

    @property
    def compact_enabled(self) -> bool:
        """True when the cleaner compacts this topic."""
        return "compact" in self.cleanup_policy

    @property
    def delete_enabled(self) -> bool:
        """True when retention (time and size) deletes this topic's old segments."""
        return "delete" in self.cleanup_policy

    def with_overrides(self, overrides: Mapping[str, str | None]) -> TopicConfig:
        """This config with topic-level keys set; raises ConfigError on an unknown key or bad value.

        New overrides are added to (and win over) the ones already recorded. A None value (a
        null in CreateTopics) is rejected, as Kafka rejects it.
        """
        changes: dict[str, Any] = {}
        recorded = dict(self.overrides)
        for key, raw in overrides.items():
            spec = _TOPIC_BY_NAME.get(key)
            if spec is None:
                hint = _suggestion(key, _TOPIC_BY_NAME)
                raise ConfigError(f"Unknown topic config name: {key}{hint}", key)
            if raw is None:
                raise ConfigError(f"Null value for topic config {key}: expected a value", key)
            value = spec.parse(raw)
            changes[spec.attr] = value
            recorded[key] = spec.kind.render(value)
        return dataclasses.replace(self, **changes, overrides=tuple(sorted(recorded.items())))

    def overrides_dict(self) -> dict[str, str]:
        """The topic-level overrides, Kafka key to normalised string: what to persist."""
        return dict(self.overrides)


class AlterConfigOp(enum.IntEnum):
    """IncrementalAlterConfigs' operations, with Kafka's codes (AlterConfigOp.OpType)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


def alter_topic_overrides(
    topic: TopicConfig,
    overrides: Mapping[str, str],
    ops: Iterable[tuple[str, AlterConfigOp, str | None]],
) -> dict[str, str]:
    """A topic's persisted `overrides` after IncrementalAlterConfigs' `ops`, as Kafka applies
    them: SET and DELETE a key; APPEND (items not there yet) and SUBTRACT items of a
    LIST-typed key, else ConfigError. A list key without an override starts from `topic`'s
    effective value (Kafka starts from the built-in default, which differs only where the
    broker's own log.* default was changed, and then contradicts what DescribeConfigs showed).
    The result is not validated: `BrokerConfig.topic_config` does that.
    """

    def current(key: str, op: AlterConfigOp) -> str:
        spec = _TOPIC_BY_NAME.get(key)
        if spec is None or spec.kind.config_type is not ConfigType.LIST:
            raise ConfigError(f"Can't {op.name} to key {key} because its type is not LIST.", key)
        return _render(spec.kind, getattr(topic, spec.attr)) or ""

    return _apply_ops(overrides, ops, current)


#: The broker keys AlterConfigs may change at runtime, cluster-wide or per broker: the
#: defaults of the topic-level keys (Kafka's DynamicLogConfig). Kafka's other dynamic keys
#: tune parts Onceflow does not have (thread pools, listeners reloaded in place).
DYNAMIC_BROKER_KEYS: frozenset[str] = frozenset(
    spec.name for topic_key in _TOPIC_KEYS for spec in topic_key.broker_keys
)
_DYNAMIC_ATTRS: tuple[str, ...] = tuple(dict.fromkeys(t.broker_attr for t in _TOPIC_KEYS))


def check_dynamic_broker_config(settings: Mapping[str, str]) -> None:
    """Kafka's DynamicBrokerConfig.validateConfigs for Onceflow's keys: ConfigError for keys
    that cannot change at runtime (Kafka's message), for unknown keys (Kafka would keep
    them, doing nothing with them), and for bad values."""
    fixed = [
        key
        for key in settings
        if key not in DYNAMIC_BROKER_KEYS
        and (
            key in _BROKER_BY_NAME or key in IGNORED_BROKER_KEYS or key.startswith(_LISTENER_PREFIX)
        )
    ]
    if fixed:
        raise ConfigError(f"Cannot update these configs dynamically: Set({', '.join(fixed)})")
    for key, raw in settings.items():
        if key not in DYNAMIC_BROKER_KEYS:
            raise ConfigError(
                f"Unknown broker config name: {key}{_suggestion(key, DYNAMIC_BROKER_KEYS)}", key
            )
        _BROKER_BY_NAME[key].parse(raw)


def alter_broker_settings(
    cfg: BrokerConfig,
    settings: Mapping[str, str],
    ops: Iterable[tuple[str, AlterConfigOp, str | None]],
) -> dict[str, str]:
    """One dynamic layer's `settings` after IncrementalAlterConfigs' `ops`, as Kafka's
    prepareIncrementalConfigs applies them; APPEND and SUBTRACT only on LIST keys (starting
    from `cfg`'s effective value, as for topics), else ConfigError. Not validated."""

    def current(key: str, op: AlterConfigOp) -> str:
        spec = _BROKER_BY_NAME.get(key)
        if spec is None or spec.kind.config_type is not ConfigType.LIST:
            verb = "append" if op is AlterConfigOp.APPEND else "subtract"
            raise ConfigError(f"Config value {verb} is not allowed for config key: {key}", key)
        return _render(spec.kind, getattr(cfg, spec.attr)) or ""

    return _apply_ops(settings, ops, current)


def _apply_ops(
    settings: Mapping[str, str],
    ops: Iterable[tuple[str, AlterConfigOp, str | None]],
    list_value: Callable[[str, AlterConfigOp], str],
) -> dict[str, str]:
    """SET and DELETE keys; APPEND (items not there yet) and SUBTRACT items of list keys,
    from the setting or else `list_value(key, op)`, which raises for a key that is no list."""
    result = dict(settings)
    for key, op, value in ops:
        if op is AlterConfigOp.SET:
            result[key] = value or ""
        elif op is AlterConfigOp.DELETE:
            result.pop(key, None)
        else:
            base = list_value(key, op)  # checks the key even when it is set
            items = [i.strip() for i in result.get(key, base).split(",") if i.strip()]
            given = [i.strip() for i in (value or "").split(",")]
            if op is AlterConfigOp.APPEND:
                items += [item for item in dict.fromkeys(given) if item not in items]
            else:
                items = [item for item in items if item not in given]
            result[key] = ",".join(items)
    return result


# --------------------------------------------------------------------------------------------
# Documentation rows
# --------------------------------------------------------------------------------------------


def _broker_default(spec: _Key) -> str | None:
    if spec is not _BROKER_GROUPS[spec.attr][0] or spec.kind.config_type is ConfigType.PASSWORD:
        return None  # a synonym: the group's first key carries the default
    return _render(spec.kind, _BROKER_FIELD_DEFAULTS[spec.attr])


_BROKER_FIELD_DEFAULTS: dict[str, Any] = {
    f.name: f.default
    for f in dataclasses.fields(BrokerConfig)
    if f.name not in ("settings", "listener_settings", "dynamic_default", "dynamic_broker")
}

#: (key, default, doc) for every broker key, in a sensible reading order, for the README.
CONFIG_DOCS: tuple[ConfigDoc, ...] = tuple(
    ConfigDoc(spec.name, _broker_default(spec), spec.doc) for spec in _BROKER_KEYS
)

#: (key, default, doc) for every topic-level key; the default is the broker's.
TOPIC_CONFIG_DOCS: tuple[ConfigDoc, ...] = tuple(
    ConfigDoc(
        spec.name,
        _render(spec.kind, _BROKER_FIELD_DEFAULTS[spec.broker_attr]),
        f"{spec.doc} Broker default: {spec.broker_keys[0].name}.",
    )
    for spec in _TOPIC_KEYS
)


# --------------------------------------------------------------------------------------------
# Java properties files
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


def _suggestion(key: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.8)
    return f" (did you mean {close[0]}?)" if close else ""


def load_broker_config(
    path: str | Path | None, overrides: Mapping[str, str]
) -> tuple[BrokerConfig, list[str]]:
    """Load a server.properties (if `path`), apply `overrides` on top, and check everything.

    Returns the config and one warning per unknown key. Raises ConfigError for a missing file
    or a bad value, naming the key, the value and what was expected.
    """
    from_file = read_properties(path) if path is not None else {}
    from_overrides = {key.strip(): value for key, value in overrides.items()}
    try:
        return broker_config_from_properties({**from_file, **from_overrides})
    except ConfigError as exc:
        if exc.key in from_file and exc.key not in from_overrides:
            raise ConfigError(f"{exc} (set in {path})", exc.key) from None
        raise


def broker_config_from_properties(
    properties: Mapping[str, str],
) -> tuple[BrokerConfig, list[str]]:
    """Build a BrokerConfig from Kafka keys and string values (already merged)."""
    warnings: list[str] = []
    parsed: dict[str, Any] = {}
    settings: dict[str, str] = {}
    per_listener: list[tuple[str, str, Any]] = []
    for key, raw in properties.items():
        if key.startswith(_LISTENER_PREFIX):
            per_listener.append(_listener_setting(key, raw))
            settings[key] = "[hidden]" if per_listener[-1][1].endswith("jaas.config") else raw
            continue
        spec = _BROKER_BY_NAME.get(key)
        if spec is None:
            if key not in IGNORED_BROKER_KEYS:
                hint = _suggestion(key, _BROKER_BY_NAME)
                warnings.append(f"unknown configuration key {key!r} ignored{hint}")
            continue
        parsed[key] = spec.parse(raw)
        settings[key] = spec.kind.render(parsed[key])

    if "node.id" in parsed and "broker.id" in parsed and parsed["node.id"] != parsed["broker.id"]:
        raise _invalid(
            "broker.id", settings["broker.id"], f"the same id as node.id ({settings['node.id']})"
        )

    values: dict[str, Any] = {}
    for attr, group in _BROKER_GROUPS.items():
        for spec in group:  # table order is precedence order
            if spec.name in parsed:
                values[attr] = spec.effective(parsed[spec.name])
                break

    controller_names = set(values.get("controller_listener_names", ()))
    for attr in ("listeners", "advertised_listeners"):
        if attr in values and controller_names:
            kept = tuple(lis for lis in values[attr] if lis.name not in controller_names)
            if not kept:
                key = attr.replace("_", ".")
                raise _invalid(
                    key, settings[key], "at least one listener that is no controller listener"
                )
            values[attr] = kept

    config = BrokerConfig(
        **values, listener_settings=tuple(per_listener), settings=tuple(settings.items())
    )
    return config, warnings


_LISTENER_PREFIX = "listener.name."
_JAAS_RE = re.compile(r"(plain|scram-sha-256|scram-sha-512)\.sasl\.jaas\.config")


def _listener_setting(key: str, raw: str) -> tuple[str, str, Any]:
    """One listener.name.<listener>.<key> setting: (LISTENER, key, parsed value)."""
    listener, _, rest = key.removeprefix(_LISTENER_PREFIX).partition(".")
    if not listener or not rest:
        raise ConfigError(f"Invalid configuration key {key}: expected listener.name.NAME.KEY", key)
    if _JAAS_RE.fullmatch(rest):
        return listener.upper(), rest, raw.strip()
    spec = _BROKER_BY_NAME.get(rest)
    if spec is None or not rest.startswith(("ssl.", "sasl.", "connections.max.reauth")):
        raise ConfigError(
            f"Invalid configuration key {key}: a listener may override ssl.*, sasl.* and "
            "connections.max.reauth.ms keys, and set <mechanism>.sasl.jaas.config "
            "(plain, scram-sha-256, scram-sha-512)",
            key,
        )
    value = spec.parse(raw)
    return listener.upper(), rest, value


# --------------------------------------------------------------------------------------------
# DescribeConfigs
# --------------------------------------------------------------------------------------------


def describe_broker_config(
    cfg: BrokerConfig, explicitly_set: Collection[str] | None = None
) -> list[ConfigEntry]:
    """DescribeConfigs entries for the broker, one per key Onceflow knows.

    `explicitly_set` names the keys the operator set (default: the keys `cfg` was loaded
    from). Their source is STATIC_BROKER_CONFIG, under the dynamic configs of `cfg` (this
    broker's, then the cluster default); the rest are DEFAULT_CONFIG. Only the keys in
    DYNAMIC_BROKER_KEYS are not read-only. A synonym key (log.retention.hours) that was not
    set has no value: the group's first key carries the effective one.
    """
    explicit = {key for key, _ in cfg.settings} if explicitly_set is None else set(explicitly_set)
    raw = dict(cfg.settings)
    dynamic = _dynamic_layers(cfg)
    entries: list[ConfigEntry] = []
    for attr, group in _BROKER_GROUPS.items():
        primary = group[0]
        effective: Any = getattr(cfg, attr)
        if attr == "advertised_listeners":
            effective = cfg.effective_advertised_listeners()
        value = _render(primary.kind, effective)
        read_only = primary.name not in DYNAMIC_BROKER_KEYS
        synonyms = [
            ConfigSynonym(spec.name, layer[spec.name], source)
            for layer, source in dynamic
            for spec in group
            if spec.name in layer
        ]
        synonyms += [
            ConfigSynonym(
                spec.name,
                raw.get(spec.name, value if spec is primary else None),
                ConfigSource.STATIC_BROKER_CONFIG,
            )
            for spec in group
            if spec.name in explicit
        ]
        synonyms.append(
            ConfigSynonym(primary.name, _broker_default(primary), ConfigSource.DEFAULT_CONFIG)
        )
        entries.append(_entry(primary, value, synonyms[0].source, synonyms, read_only))
        for alias in group[1:]:
            own = [
                ConfigSynonym(alias.name, layer[alias.name], source)
                for layer, source in (*dynamic, (raw, ConfigSource.STATIC_BROKER_CONFIG))
                if alias.name in layer and (layer is not raw or alias.name in explicit)
            ]
            if own:
                entries.append(_entry(alias, own[0].value, own[0].source, own, read_only))
            else:
                entries.append(_entry(alias, None, ConfigSource.DEFAULT_CONFIG, [], read_only))
    return entries


def describe_default_broker_config(cfg: BrokerConfig) -> list[ConfigEntry]:
    """DescribeConfigs for the cluster-wide default (broker resource ""): as in Kafka, only
    the keys set there, with the synonyms below it (no broker's own entity)."""
    layer = dict(cfg.dynamic_default)
    raw = dict(cfg.settings)
    entries = []
    for key, value in sorted(layer.items()):
        spec = _BROKER_BY_NAME[key]
        group = _BROKER_GROUPS[spec.attr]
        synonyms = [
            ConfigSynonym(s.name, layer[s.name], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
            for s in group
            if s.name in layer
        ]
        synonyms += [
            ConfigSynonym(s.name, raw[s.name], ConfigSource.STATIC_BROKER_CONFIG)
            for s in group
            if s.name in raw
        ]
        synonyms.append(
            ConfigSynonym(group[0].name, _broker_default(group[0]), ConfigSource.DEFAULT_CONFIG)
        )
        source = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        entries.append(_entry(spec, value, source, synonyms, read_only=False))
    return entries


def _dynamic_layers(cfg: BrokerConfig) -> tuple[tuple[dict[str, str], ConfigSource], ...]:
    return (
        (dict(cfg.dynamic_broker), ConfigSource.DYNAMIC_BROKER_CONFIG),
        (dict(cfg.dynamic_default), ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
    )


def describe_topic_config(
    topic: TopicConfig,
    overrides: Mapping[str, str] | None = None,
    *,
    broker: BrokerConfig | None = None,
) -> list[ConfigEntry]:
    """DescribeConfigs entries for a topic, one per topic-level key, sorted by name.

    A key in `overrides` (default: the topic's recorded overrides) is DYNAMIC_TOPIC_CONFIG.
    Otherwise the value comes from the broker: STATIC_BROKER_CONFIG when `broker` was loaded
    with one of the key's broker synonyms set, else DEFAULT_CONFIG. Synonyms list every
    source in precedence order, ending with the built-in default.
    """
    overridden = set(topic.overrides_dict() if overrides is None else overrides)
    levels = (
        (*_dynamic_layers(broker), (dict(broker.settings), ConfigSource.STATIC_BROKER_CONFIG))
        if broker is not None
        else ()
    )
    entries: list[ConfigEntry] = []
    for spec in _TOPIC_KEYS:
        value = _render(spec.kind, getattr(topic, spec.attr))
        synonyms: list[ConfigSynonym] = []
        if spec.name in overridden:
            synonyms.append(ConfigSynonym(spec.name, value, ConfigSource.DYNAMIC_TOPIC_CONFIG))
        synonyms.extend(
            ConfigSynonym(bspec.name, layer[bspec.name], source)
            for layer, source in levels
            for bspec in spec.broker_keys
            if bspec.name in layer
        )
        primary = spec.broker_keys[0]
        synonyms.append(
            ConfigSynonym(primary.name, _broker_default(primary), ConfigSource.DEFAULT_CONFIG)
        )
        entries.append(
            ConfigEntry(
                name=spec.name,
                value=value,
                source=synonyms[0].source,
                read_only=False,
                is_default=synonyms[0].source == ConfigSource.DEFAULT_CONFIG,
                synonyms=tuple(synonyms),
                config_type=spec.kind.config_type,
                documentation=spec.doc,
            )
        )
    return entries


def _entry(
    spec: _Key,
    value: str | None,
    source: ConfigSource,
    synonyms: list[ConfigSynonym],
    read_only: bool,
) -> ConfigEntry:
    sensitive = spec.kind.config_type is ConfigType.PASSWORD
    if sensitive:  # Kafka never returns a password's value, only that it is one
        value = None
        synonyms = [synonym._replace(value=None) for synonym in synonyms]
    return ConfigEntry(
        name=spec.name,
        value=value,
        source=source,
        read_only=read_only,
        is_default=source == ConfigSource.DEFAULT_CONFIG,
        is_sensitive=sensitive,
        synonyms=tuple(synonyms),
        config_type=spec.kind.config_type,
        documentation=spec.doc,
    )
