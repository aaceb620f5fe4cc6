"""The `onceflow` sink's configuration, and the values a write hands between Spark's driver
and its tasks: the writer options (`sink_config`), the row columns (`sink_columns`), a
task's identity (`SinkTask`) and its commit message (`SinkCommitMessage`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, cast

from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from onceflow.client.errors import ConfigError
from onceflow.client.participant_state import ProducerSettings
from onceflow.spark.batch_commit import Atomicity, participant_settings
from onceflow.spark.ledger import DEFAULT_LEDGER_TOPIC
from onceflow.spark.options import (
    SOURCE_OPTIONS,
    ClientConfig,
    OptionError,
    kafka_client_config,
)

__all__ = [
    "OPERATION_TIMEOUT_S",
    "SinkColumns",
    "SinkCommitMessage",
    "SinkConfig",
    "SinkDataError",
    "SinkIdConflictError",
    "SinkTask",
    "SinkWriteError",
    "sink_config",
]

# Deadline of each blocking Kafka call a task makes (init, ledger read, commit). init waits
# for the previous attempt's transaction to be completed, which the coordinator does at once.
OPERATION_TIMEOUT_S = 60.0

# Local properties Spark sets on the jobs of a micro-batch (verified on PySpark 4.1 to 4.3).
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"

# Writer options, lowercased as Spark's CaseInsensitiveDict hands them over.
TOPIC = "topic"
SINK_ID = "sinkid"
LEDGER_TOPIC = "ledgertopic"
ATOMICITY = "atomicity"
WRITER_OPTIONS = {
    TOPIC: "topic",
    SINK_ID: "sinkId",
    LEDGER_TOPIC: "ledgerTopic",
    ATOMICITY: "atomicity",
}
# Spark adds these to a streaming sink's options itself; the sink has no use for them.
SPARK_OPTIONS = frozenset({"checkpointlocation", "queryname"})
KAFKA_PREFIX = "kafka."

# librdkafka settings the sink decides itself: None = never settable; otherwise the values
# that agree with what the sink needs.
_SINK_OWNED: dict[str, frozenset[str] | None] = {
    "transactional.id": None,
    "group.id": None,
    "group.instance.id": None,
    "enable.idempotence": frozenset({"true"}),
    "acks": frozenset({"all", "-1"}),
    "request.required.acks": frozenset({"all", "-1"}),
    "isolation.level": frozenset({"read_committed"}),
}
_SINK_OWNED_WHY = {
    "transactional.id": "the sink uses '<sinkId>-<task partition>'; choose the sink id "
    "with the 'sinkId' option",
    "group.id": "the sink keeps its ledger in groups of its own",
    "group.instance.id": "the sink keeps its ledger in groups of its own",
}

COLUMNS = ("key", "value", "topic", "partition", "headers")


class SinkDataError(ValueError):
    """A row the sink cannot write (e.g. no topic). The task's transaction is aborted."""


class SinkWriteError(RuntimeError):
    """A Kafka call of a write task failed; the task's transaction is not committed, and
    the next attempt of the task (or the coordinator's timeout) aborts it."""


class SinkIdConflictError(RuntimeError):
    """The ledger shows a later batch written by another streaming query under the same
    sink id (a new checkpoint with a reused `sinkId`, or two queries sharing one). Skipping
    would silently drop this query's rows, so the task fails instead."""


@dataclass(frozen=True)
class SinkColumns:
    """Which DataFrame column plays each part (names as in the schema); None = absent."""

    value: str
    key: str | None = None
    topic: str | None = None
    partition: str | None = None
    headers: str | None = None


@dataclass(frozen=True)
class SinkConfig:
    """Everything a write task needs. Built on the driver, pickled to the tasks. The
    client settings are a ClientConfig, so no repr of this shows a secret."""

    client_config: Mapping[str, str]
    columns: SinkColumns
    topic: str | None = None
    sink_id: str | None = None
    # True when the user chose the sink id (a batch write is then resumable).
    explicit_sink_id: bool = False
    ledger_topic: str = DEFAULT_LEDGER_TOPIC
    timeout_s: float = OPERATION_TIMEOUT_S
    # As asked ("batch", "task" or None); the writer replaces it by the one it uses.
    atomicity: Atomicity | None = None
    # Per batch: the `__transaction_state` partition count the tasks' ids are colocated
    # with, for a completion in one request; None: completed one by one.
    colocated: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.client_config, ClientConfig):
            object.__setattr__(self, "client_config", ClientConfig(self.client_config))


@dataclass(frozen=True)
class SinkTask:
    """One write task: which sink, which task partition, which batch, which attempt.
    `owner` is the streaming query id ("" for a plain batch write), kept in the ledger to
    tell a replay by the same query from a clash with another query using the sink id."""

    sink_id: str
    partition: int
    batch_id: int
    attempt: int = 0
    owner: str = ""

    @property
    def transactional_id(self) -> str:
        return f"{self.sink_id}-{self.partition}"

    def __str__(self) -> str:
        return (
            f"sink '{self.sink_id}' task partition {self.partition} batch {self.batch_id} "
            f"attempt {self.attempt}"
        )


Outcome = Literal["written", "skipped", "empty"]


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What a write task did. `written`: it committed `records` records and its ledger
    entry; `skipped`: the ledger showed the batch already written by an earlier attempt, so
    it wrote nothing; `empty`: it had no rows and talked to no broker."""

    sink_id: str
    partition: int
    batch_id: int
    attempt: int
    outcome: Outcome
    records: int = 0
    topics: list[str] = field(default_factory=list)
    # Per-batch atomicity: the task's prepared transaction (PreparedTransaction JSON).
    prepared: str | None = None
    owner: str = ""


# ---- options and schema ------------------------------------------------------------------


def sink_config(options: Mapping[str, str], schema: StructType) -> SinkConfig:
    """Check the writer's options and the DataFrame's columns; raise OptionError naming the
    first bad option or column."""
    opts = {k.lower(): v for k, v in options.items()}
    for key in opts:
        if key.startswith(KAFKA_PREFIX) and len(key) > len(KAFKA_PREFIX):
            continue
        if key in WRITER_OPTIONS or key in SPARK_OPTIONS:
            continue
        if key in SOURCE_OPTIONS:
            raise OptionError(
                f"option '{SOURCE_OPTIONS[key]}' is a read option; the onceflow writer takes "
                f"{_writer_option_list()}"
            )
        if key == "path":
            raise OptionError(
                "the onceflow sink takes no path (save(path) / start(path)); set the 'topic' "
                "option or write a 'topic' column"
            )
        raise OptionError(
            f"unknown option '{key}'; the onceflow writer takes {_writer_option_list()}"
        )

    client = kafka_client_config(opts)
    if not client.get("bootstrap.servers"):
        raise OptionError("option 'kafka.bootstrap.servers' is required")
    for key, allowed in _SINK_OWNED.items():
        if key not in client:
            continue
        value = client[key].strip().lower()
        if allowed is None:
            raise OptionError(f"option 'kafka.{key}' cannot be set: {_SINK_OWNED_WHY[key]}")
        if value not in allowed:
            raise OptionError(
                f"option 'kafka.{key}={client[key]}' contradicts the sink's transactions; "
                f"it must be {' or '.join(sorted(allowed))} (or left unset)"
            )

    try:  # the writer's producer settings, checked here rather than in every task
        ProducerSettings.of(participant_settings(client)[1])
    except ConfigError as exc:
        raise OptionError(f"the sink's producer settings: {exc}") from None

    topic = _nonblank(opts, TOPIC)
    sink_id = _nonblank(opts, SINK_ID)
    ledger_topic = _nonblank(opts, LEDGER_TOPIC) or DEFAULT_LEDGER_TOPIC
    atomicity = _nonblank(opts, ATOMICITY)
    if atomicity is not None and atomicity.lower() not in ("batch", "task"):
        raise OptionError(f"option 'atomicity' is '{atomicity}'; it must be 'batch' or 'task'")
    columns = sink_columns(schema)
    if topic is None and columns.topic is None:
        raise OptionError("no topic to write to: set the 'topic' option or write a 'topic' column")
    return SinkConfig(
        client_config=client,
        columns=columns,
        topic=topic,
        sink_id=sink_id,
        explicit_sink_id=sink_id is not None,
        ledger_topic=ledger_topic,
        atomicity=None if atomicity is None else cast(Atomicity, atomicity.lower()),
    )


def _writer_option_list() -> str:
    return ", ".join(f"'{name}'" for name in WRITER_OPTIONS.values()) + " and 'kafka.*'"


def _nonblank(opts: Mapping[str, str], key: str) -> str | None:
    if key not in opts:
        return None
    value = opts[key].strip()
    if not value:
        raise OptionError(f"option '{WRITER_OPTIONS[key]}' is empty")
    return value


def sink_columns(schema: StructType) -> SinkColumns:
    """Map the schema's columns (matched case-insensitively, as Spark does) to their parts
    and check their types against Spark's Kafka sink: value binary or string (required), key
    binary or string, topic string, partition integer, headers
    array<struct<key: string, value: binary>>."""
    found: dict[str, str] = {}
    for f in schema.fields:
        role = f.name.lower()
        if role not in COLUMNS:
            raise OptionError(
                f"column '{f.name}' is not one the sink writes; the onceflow sink takes "
                f"{', '.join(COLUMNS)} (select only those)"
            )
        if role in found:
            raise OptionError(f"columns '{found[role]}' and '{f.name}' both name the {role}")
        found[role] = f.name
        _check_type(f.name, role, f.dataType)
    if "value" not in found:
        raise OptionError("the onceflow sink needs a 'value' column (binary or string)")
    return SinkColumns(
        value=found["value"],
        key=found.get("key"),
        topic=found.get("topic"),
        partition=found.get("partition"),
        headers=found.get("headers"),
    )


def _check_type(name: str, role: str, dt: DataType) -> None:
    bytes_like = (BinaryType, StringType)
    ok = {
        "value": isinstance(dt, bytes_like),
        "key": isinstance(dt, bytes_like),
        "topic": isinstance(dt, StringType),
        "partition": isinstance(dt, IntegerType | LongType | ShortType | ByteType),
        "headers": _is_headers_type(dt),
    }[role]
    if not ok:
        want = {
            "value": "binary or string",
            "key": "binary or string",
            "topic": "string",
            "partition": "int",
            "headers": "array<struct<key: string, value: binary>>",
        }[role]
        raise OptionError(
            f"column '{name}' has type {dt.simpleString()}; the {role} must be {want}"
        )


def _is_headers_type(dt: DataType) -> bool:
    if not isinstance(dt, ArrayType) or not isinstance(dt.elementType, StructType):
        return False
    fields = {f.name.lower(): f.dataType for f in dt.elementType.fields}
    return (
        set(fields) == {"key", "value"}
        and isinstance(fields["key"], StringType)
        and isinstance(fields["value"], BinaryType | StringType)
    )


# ---- the task --------------------------------------------------------------------------
