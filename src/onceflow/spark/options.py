"""Options of the `onceflow` data source, named and checked as Spark's Kafka connector does.

Spark hands a data source its options in a case-insensitive map whose keys are lowercased,
so every name here is compared lowercased. `kafka.*` options pass through to the Kafka
clients with the prefix stripped. Everything else must be an option the connector knows:
an unknown option, or a combination that contradicts itself, is an `OptionError` that names
the option, raised when the query is defined (`load()`) or, for what depends on the kind of
query, when it starts.

Nothing here talks to Kafka: parsing is pure, so it is cheap to run on the driver every time
Spark asks for the schema or a reader.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from onceflow.spark.offsets import EARLIEST, LATEST, PartitionOffsets, TopicPartitionKey

__all__ = [
    "DEFAULT_POLL_TIMEOUT_MS",
    "REDACTED",
    "SOURCE_OPTIONS",
    "ClientConfig",
    "OffsetsOption",
    "OptionError",
    "SourceOptions",
    "Subscription",
    "check_batch_source",
    "check_stream_source",
    "is_secret",
    "kafka_client_config",
    "parse_source_options",
]

KAFKA_PREFIX = "kafka."

# How long a read task waits without progress before it gives up with an error. It is a
# safety net only: a planned range ends at or below the last stable offset, so every offset
# in it is decided and the task never waits for one that will not come.
DEFAULT_POLL_TIMEOUT_MS = 120_000


class OptionError(ValueError):
    """An unknown, malformed or contradictory option of the `onceflow` data source. The
    message names the option."""


# Settings whose values are secrets (librdkafka's and Java's names), by name; a value that
# holds a password (a JAAS line) is one too, as Spark's own redaction judges.
_SECRET_KEY = re.compile(
    r"password|secret|token|credential|jaas|oauthbearer\.config|key\.pem$|keystore\.key$"
)
REDACTED = "*********(redacted)"


def is_secret(key: str, value: str) -> bool:
    """Whether a Kafka client setting must never be shown."""
    return bool(_SECRET_KEY.search(key.lower())) or "password" in value.lower()


class ClientConfig(dict[str, str]):
    """Kafka client settings whose repr (hence str, logging and tracebacks that show it)
    never holds a secret: passwords, keys and JAAS lines read as REDACTED."""

    def __repr__(self) -> str:
        return repr({k: REDACTED if is_secret(k, v) else v for k, v in self.items()})


# Defaults under the `kafka.*` options of every confluent-kafka client the connector makes.
# librdkafka spaces its attempts to connect to the cluster by half of reconnect.backoff.ms
# (100 ms by default), and a client's first usable connection is always its second: it
# drops the bootstrap connection once Metadata names the brokers. The connector's clients
# live for one task or one commit, so each paid that wait at its start; the exponential
# backoff towards reconnect.backoff.max.ms still spaces attempts at a broker that is down.
CLIENT_DEFAULTS: dict[str, str] = {"reconnect.backoff.ms": "10"}


def kafka_client_config(options: Mapping[str, str]) -> ClientConfig:
    """The `kafka.*` options with the prefix stripped (`kafka.bootstrap.servers` ->
    `bootstrap.servers`): the configuration handed to every confluent-kafka client, on the
    driver and in the tasks (security settings included). Keys are lowercased, as Kafka's
    and librdkafka's property names are."""
    out = ClientConfig()
    for key, value in options.items():
        lower = key.lower()
        if lower.startswith(KAFKA_PREFIX) and len(lower) > len(KAFKA_PREFIX):
            out[lower[len(KAFKA_PREFIX) :]] = str(value)
    return out


# ---- source options ---------------------------------------------------------------------

SUBSCRIBE = "subscribe"
SUBSCRIBE_PATTERN = "subscribepattern"
ASSIGN = "assign"
STARTING_OFFSETS = "startingoffsets"
ENDING_OFFSETS = "endingoffsets"
MAX_OFFSETS_PER_TRIGGER = "maxoffsetspertrigger"
FAIL_ON_DATA_LOSS = "failondataloss"
INCLUDE_HEADERS = "includeheaders"
POLL_TIMEOUT_MS = "kafkaconsumer.polltimeoutms"

# Lowercased key -> the spelling Spark's documentation uses, for messages.
SOURCE_OPTIONS: dict[str, str] = {
    SUBSCRIBE: "subscribe",
    SUBSCRIBE_PATTERN: "subscribePattern",
    ASSIGN: "assign",
    STARTING_OFFSETS: "startingOffsets",
    ENDING_OFFSETS: "endingOffsets",
    MAX_OFFSETS_PER_TRIGGER: "maxOffsetsPerTrigger",
    FAIL_ON_DATA_LOSS: "failOnDataLoss",
    INCLUDE_HEADERS: "includeHeaders",
    POLL_TIMEOUT_MS: "kafkaConsumer.pollTimeoutMs",
}

# Options of Spark's Kafka source this connector does not implement: a clearer message than
# "unknown" for a user who comes from format("kafka").
_UNSUPPORTED_SPARK_OPTIONS: dict[str, str] = {
    "startingtimestamp": "startingTimestamp",
    "endingtimestamp": "endingTimestamp",
    "startingoffsetsbytimestamp": "startingOffsetsByTimestamp",
    "endingoffsetsbytimestamp": "endingOffsetsByTimestamp",
    "startingoffsetsbytimestampstrategy": "startingOffsetsByTimestampStrategy",
    "minoffsetspertrigger": "minOffsetsPerTrigger",
    "maxtriggerdelay": "maxTriggerDelay",
    "minpartitions": "minPartitions",
    "maxrecordsperpartition": "maxRecordsPerPartition",
    "groupidprefix": "groupIdPrefix",
    "fetchoffset.numretries": "fetchOffset.numRetries",
    "fetchoffset.retryintervalms": "fetchOffset.retryIntervalMs",
}

# Options that only mean something to the writer (onceflow.spark.sink_config.WRITER_OPTIONS).
_WRITE_OPTIONS: dict[str, str] = {
    "topic": "topic",
    "sinkid": "sinkId",
    "ledgertopic": "ledgerTopic",
}

# Kafka client settings the source controls itself; overriding them would break what it
# guarantees (read_committed, replayable ranges, no group offsets).
_CONTROLLED_KAFKA_SETTINGS: dict[str, str] = {
    "group.id": "the source assigns partitions itself and never joins or commits to a "
    "consumer group; Spark's checkpoint holds the offsets",
    "group.instance.id": "the source never joins a consumer group",
    "enable.auto.commit": "the source never commits offsets to Kafka; Spark's checkpoint "
    "holds them",
    "enable.auto.offset.store": "the source never stores or commits offsets",
    "isolation.level": "reads are always read_committed",
    "auto.offset.reset": "use the source option startingOffsets instead; offsets that no "
    "longer exist follow failOnDataLoss",
    "enable.partition.eof": "the source decides where a range ends",
    "key.deserializer": "keys are always read as binary; cast or decode them in a query",
    "value.deserializer": "values are always read as binary; cast or decode them in a query",
    "interceptor.classes": "Java interceptors do not apply to confluent-kafka",
}

OffsetsOption = Literal["earliest", "latest"] | PartitionOffsets
"""`earliest`, `latest`, or per-partition offsets where -2 is earliest and -1 latest."""


@dataclass(frozen=True)
class Subscription:
    """Which partitions to read: exactly one of `subscribe`, `subscribePattern`, `assign`."""

    kind: Literal["subscribe", "subscribePattern", "assign"]
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    partitions: tuple[TopicPartitionKey, ...] = ()

    def describe(self) -> str:
        if self.kind == "subscribe":
            return f"subscribe={','.join(self.topics)}"
        if self.kind == "subscribePattern":
            return f"subscribePattern={self.pattern}"
        return f"assign={sorted(self.partitions)}"


@dataclass(frozen=True)
class SourceOptions:
    """The checked options of a read."""

    kafka: ClientConfig
    subscription: Subscription
    starting: OffsetsOption | None  # None: not given (batch: earliest, stream: latest)
    ending: OffsetsOption | None  # None: not given (batch: latest; streams take none)
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    given: frozenset[str] = field(default_factory=frozenset)  # lowercased option names


def parse_source_options(options: Mapping[str, str]) -> SourceOptions:
    """Check and parse the options of a read (batch or stream). Raises `OptionError`."""
    opts = {k.lower(): str(v) for k, v in options.items()}
    for key in opts:
        _check_source_key(key)
    kafka = kafka_client_config(opts)
    for setting, why in _CONTROLLED_KAFKA_SETTINGS.items():
        if setting in kafka:
            raise OptionError(
                f"option 'kafka.{setting}' is not supported by the onceflow source: {why}"
            )
    if not kafka.get("bootstrap.servers", "").strip():
        raise OptionError("option 'kafka.bootstrap.servers' is required (host:port,...)")

    return SourceOptions(
        kafka=kafka,
        subscription=_parse_subscription(opts),
        starting=_parse_offsets_option(opts, STARTING_OFFSETS),
        ending=_parse_offsets_option(opts, ENDING_OFFSETS),
        max_offsets_per_trigger=_parse_positive_int(opts, MAX_OFFSETS_PER_TRIGGER),
        fail_on_data_loss=_parse_bool(opts, FAIL_ON_DATA_LOSS, default=True),
        include_headers=_parse_bool(opts, INCLUDE_HEADERS, default=False),
        poll_timeout_ms=_parse_positive_int(opts, POLL_TIMEOUT_MS) or DEFAULT_POLL_TIMEOUT_MS,
        given=frozenset(opts),
    )


def check_batch_source(opts: SourceOptions) -> None:
    """What a batch read (`spark.read`) forbids, as Spark's Kafka source does."""
    if opts.max_offsets_per_trigger is not None:
        raise OptionError(
            "option 'maxOffsetsPerTrigger' applies to streaming reads only, "
            "not to a batch read (spark.read)"
        )
    if opts.starting == "latest":
        raise OptionError(
            "option 'startingOffsets' cannot be 'latest' for a batch read: it would read "
            "nothing (use earliest or JSON offsets)"
        )
    if isinstance(opts.starting, dict):
        for (topic, partition), offset in opts.starting.items():
            if offset == LATEST:
                raise OptionError(
                    f"option 'startingOffsets' cannot use -1 (latest) for {topic}-{partition} "
                    "in a batch read"
                )
    if opts.ending == "earliest":
        raise OptionError("option 'endingOffsets' cannot be 'earliest' for a batch read")
    if isinstance(opts.ending, dict):
        for (topic, partition), offset in opts.ending.items():
            if offset == EARLIEST:
                raise OptionError(
                    f"option 'endingOffsets' cannot use -2 (earliest) for {topic}-{partition}"
                )


def check_stream_source(opts: SourceOptions) -> None:
    """What a streaming read (`spark.readStream`) forbids."""
    if opts.ending is not None:
        raise OptionError(
            "option 'endingOffsets' applies to batch reads only; a streaming query has no end "
            "(stop it, or use trigger(availableNow=True))"
        )


# ---- parsing helpers ------------------------------------------------------------------


def _check_source_key(key: str) -> None:
    if key.startswith(KAFKA_PREFIX):
        if len(key) == len(KAFKA_PREFIX):
            raise OptionError("option 'kafka.' has no Kafka setting name after the prefix")
        return
    if key in SOURCE_OPTIONS:
        return
    if key in _UNSUPPORTED_SPARK_OPTIONS:
        raise OptionError(
            f"option '{_UNSUPPORTED_SPARK_OPTIONS[key]}' of Spark's Kafka source is not "
            "supported by the onceflow source"
        )
    if key in _WRITE_OPTIONS:
        raise OptionError(
            f"option '{_WRITE_OPTIONS[key]}' is a write option; a read names its topics with "
            "subscribe, subscribePattern or assign"
        )
    known = ", ".join(sorted(SOURCE_OPTIONS.values()))
    raise OptionError(
        f"unknown option '{key}' for the onceflow source (known: {known}, and kafka.* "
        "settings for the Kafka client)"
    )


def _parse_subscription(opts: Mapping[str, str]) -> Subscription:
    given = [k for k in (ASSIGN, SUBSCRIBE, SUBSCRIBE_PATTERN) if k in opts]
    if len(given) != 1:
        names = " and ".join(f"'{SOURCE_OPTIONS[k]}'" for k in given)
        if not given:
            raise OptionError(
                "one of the options 'subscribe', 'subscribePattern' or 'assign' is required"
            )
        raise OptionError(
            f"options {names} contradict each other: give exactly one of 'subscribe', "
            "'subscribePattern' and 'assign'"
        )
    key = given[0]
    value = opts[key]
    if key == SUBSCRIBE:
        topics = [t.strip() for t in value.split(",")]
        if not value.strip() or any(not t for t in topics):
            raise OptionError(
                f"option 'subscribe' must be a comma-separated list of topic names, got {value!r}"
            )
        return Subscription("subscribe", topics=tuple(dict.fromkeys(topics)))
    if key == SUBSCRIBE_PATTERN:
        if not value.strip():
            raise OptionError("option 'subscribePattern' must be a non-empty regular expression")
        try:
            re.compile(value)
        except re.error as exc:
            raise OptionError(
                f"option 'subscribePattern' is not a valid regular expression: {exc}"
            ) from None
        return Subscription("subscribePattern", pattern=value)
    return Subscription("assign", partitions=_parse_assign(value))


def _parse_assign(value: str) -> tuple[TopicPartitionKey, ...]:
    example = 'e.g. {"topicA":[0,1],"topicB":[2,4]}'
    try:
        data = json.loads(value)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option 'assign' is not valid JSON ({exc}); {example}") from None
    if not isinstance(data, dict) or not data:
        raise OptionError(f"option 'assign' must be a non-empty JSON object; {example}")
    out: set[TopicPartitionKey] = set()
    for topic, parts in data.items():
        if not topic or not isinstance(parts, list) or not parts:
            raise OptionError(
                f"option 'assign': topic {topic!r} needs a non-empty list of partitions; {example}"
            )
        for p in parts:
            if not isinstance(p, int) or isinstance(p, bool) or p < 0:
                raise OptionError(
                    f"option 'assign': partition {p!r} of topic {topic!r} is not a "
                    "non-negative integer"
                )
            out.add((topic, p))
    return tuple(sorted(out))


def _parse_offsets_option(opts: Mapping[str, str], key: str) -> OffsetsOption | None:
    if key not in opts:
        return None
    name = SOURCE_OPTIONS[key]
    value = opts[key].strip()
    if value.lower() in ("earliest", "latest"):
        return "earliest" if value.lower() == "earliest" else "latest"
    example = 'e.g. {"topicA":{"0":23,"1":-2},"topicB":{"0":-1}}'
    try:
        data = json.loads(value)
    except json.JSONDecodeError:
        raise OptionError(
            f"option '{name}' must be 'earliest', 'latest' or JSON offsets ({example}), "
            f"got {value!r}"
        ) from None
    if not isinstance(data, dict) or not data:
        raise OptionError(f"option '{name}' must be a non-empty JSON object; {example}")
    out: PartitionOffsets = {}
    for topic, parts in data.items():
        if not topic or not isinstance(parts, dict) or not parts:
            raise OptionError(
                f"option '{name}': topic {topic!r} needs an object of partition -> offset; "
                f"{example}"
            )
        for p, off in parts.items():
            try:
                partition = int(p)
            except ValueError:
                partition = -1
            if partition < 0 or str(partition) != str(p).strip():
                raise OptionError(
                    f"option '{name}': {p!r} of topic {topic!r} is not a partition number"
                )
            if not isinstance(off, int) or isinstance(off, bool) or off < EARLIEST:
                raise OptionError(
                    f"option '{name}': offset {off!r} of {topic}-{partition} must be an "
                    "integer >= 0, or -2 (earliest) or -1 (latest)"
                )
            out[(topic, partition)] = off
    return out


def _parse_bool(opts: Mapping[str, str], key: str, *, default: bool) -> bool:
    if key not in opts:
        return default
    value = opts[key].strip().lower()
    if value not in ("true", "false"):
        raise OptionError(
            f"option '{SOURCE_OPTIONS[key]}' must be true or false, got {opts[key]!r}"
        )
    return value == "true"


def _parse_positive_int(opts: Mapping[str, str], key: str) -> int | None:
    if key not in opts:
        return None
    try:
        value = int(opts[key].strip())
    except ValueError:
        value = 0
    if value <= 0:
        raise OptionError(
            f"option '{SOURCE_OPTIONS[key]}' must be a positive integer, got {opts[key]!r}"
        )
    return value
