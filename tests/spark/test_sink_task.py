"""The sink's write task, driven directly (no Spark): fencing of concurrent attempts, the
ledger's replay check, aborts, the column mapping, and the option checks.

Everything written is read back read_committed (a confluent Consumer with
isolation.level=read_committed, assigned, reading up to the end offset that ListOffsets
READ_COMMITTED gives), so what a test sees is what any downstream consumer would see.
"""

from __future__ import annotations

import dataclasses
import threading
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, TopicPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DoubleType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)

from onceflow.spark import sink_tasks
from onceflow.spark.ledger import DEFAULT_LEDGER_TOPIC, ledger_group
from onceflow.spark.options import OptionError
from onceflow.spark.sink_config import (
    SinkColumns,
    SinkConfig,
    SinkDataError,
    SinkIdConflictError,
    SinkTask,
    SinkWriteError,
    sink_config,
)
from onceflow.spark.sink_tasks import write_task
from onceflow.spark.writer import make_stream_writer, make_writer
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import QUIET_LOGGER, create_topic
from tests.helpers.txn import end_offsets, fencing_error, read_records, wait_for, wait_stable

VALUE_SCHEMA = StructType([StructField("value", BinaryType())])


def values_batch(values: Sequence[bytes]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"value": pa.array(list(values), pa.binary())})


def committed_values(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    """Every value a read_committed consumer sees, up to the last stable offset (waiting
    until no transaction is open, so nothing undecided can be missed)."""
    ends = wait_stable(bootstrap, topic, range(partitions))
    lso = end_offsets(bootstrap, topic, range(partitions), committed=True)
    assert lso == ends
    nonempty = {p: end for p, end in lso.items() if end}
    if not nonempty:
        return []
    recs = read_records("confluent", bootstrap, topic, nonempty, committed=True)
    return [r.value for r in recs if r.value is not None]


def uncommitted_values(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    ends = end_offsets(bootstrap, topic, range(partitions), committed=False)
    nonempty = {p: end for p, end in ends.items() if end}
    if not nonempty:
        return []
    recs = read_records("confluent", bootstrap, topic, nonempty, committed=False)
    return [r.value for r in recs if r.value is not None]


def config_for(bootstrap: str, topic: str | None, **extra: Any) -> SinkConfig:
    return SinkConfig(
        client_config={"bootstrap.servers": bootstrap},
        columns=SinkColumns(value="value"),
        topic=topic,
        **extra,
    )


def ledger_entry(bootstrap: str, task: SinkTask) -> int | None:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": ledger_group(task.transactional_id),
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "logger": QUIET_LOGGER,
        }
    )
    try:
        (tp,) = c.committed([TopicPartition(DEFAULT_LEDGER_TOPIC, 0)], timeout=20)
        return tp.offset if tp.offset >= 0 else None
    finally:
        c.close()


# ---- concurrent attempts -----------------------------------------------------------------


def test_two_concurrent_attempts_older_is_fenced_and_never_visible(
    shared_broker: BrokerProcess,
) -> None:
    """Attempt 0 of a task is mid-transaction (some records already on the broker) when
    attempt 1 of the same task starts. Attempt 1's init fences attempt 0 and aborts its
    transaction; attempt 1 writes and commits; attempt 0 fails as fenced; read_committed
    shows attempt 1's rows once and none of attempt 0's."""
    bootstrap = shared_broker.bootstrap
    topic = create_topic(bootstrap, partitions=2)
    sink = f"sink-{uuid.uuid4().hex[:8]}"
    config = config_for(bootstrap, topic, sink_id=sink)
    # Batches of 512 bytes: the older attempt's first rows are sent while it waits for more.
    config = dataclasses.replace(
        config, client_config={**config.client_config, "batch.size": "512"}
    )
    older = SinkTask(sink, partition=3, batch_id=7, attempt=0)
    newer = SinkTask(sink, partition=3, batch_id=7, attempt=1)

    release = threading.Event()

    def older_rows() -> Iterator[pa.RecordBatch]:
        yield values_batch([f"old-{i}".encode() for i in range(100)])
        release.wait(60)  # paused mid-transaction until the newer attempt has committed
        yield values_batch([f"old-{i}".encode() for i in range(100, 200)])

    outcome: dict[str, Any] = {}

    def run_older() -> None:
        try:
            outcome["result"] = write_task(config, older, older_rows())
        except BaseException as exc:
            outcome["error"] = exc

    t = threading.Thread(target=run_older, name="older-attempt")
    t.start()
    try:
        # The older attempt's first records have reached the broker inside its transaction.
        wait_for(
            lambda: sum(end_offsets(bootstrap, topic, range(2), committed=False).values()) >= 50,
            what="the older attempt's records on the broker",
        )
        newer_rows = [values_batch([f"new-{i}".encode() for i in range(150)])]
        result = write_task(config, newer, newer_rows)
    finally:
        release.set()
        t.join(90)
    assert not t.is_alive()

    assert result.outcome == "written" and result.records == 150
    assert "result" not in outcome, f"the fenced attempt succeeded: {outcome.get('result')}"
    err = outcome["error"]
    assert isinstance(err, SinkWriteError), repr(err)
    assert fencing_error(err) is not None or "fenced" in str(err), repr(err)

    got = committed_values(bootstrap, topic, 2)
    assert sorted(got) == sorted(f"new-{i}".encode() for i in range(150))
    # The older attempt's records were really written, then aborted.
    raw = uncommitted_values(bootstrap, topic, 2)
    assert sum(v.startswith(b"old-") for v in raw) >= 50
    assert ledger_entry(bootstrap, newer) == 8


def test_attempt_after_a_committed_one_writes_nothing(shared_broker: BrokerProcess) -> None:
    """A speculative or retried attempt that starts after another attempt of the same task
    committed finds the batch in the ledger and writes nothing; the next batch is written."""
    bootstrap = shared_broker.bootstrap
    topic = create_topic(bootstrap, partitions=1)
    sink = f"sink-{uuid.uuid4().hex[:8]}"
    config = config_for(bootstrap, topic, sink_id=sink)
    rows = [b"a", b"b", b"c"]

    first = write_task(config, SinkTask(sink, 0, 0, attempt=0), [values_batch(rows)])
    again = write_task(config, SinkTask(sink, 0, 0, attempt=1), [values_batch(rows)])
    # A replay after a restart: same batch, attempt numbers start again at 0.
    replay = write_task(config, SinkTask(sink, 0, 0, attempt=0), [values_batch(rows)])
    nxt = write_task(config, SinkTask(sink, 0, 1), [values_batch([b"d"])])

    assert (first.outcome, first.records) == ("written", 3)
    assert (again.outcome, again.records) == ("skipped", 0)
    assert (replay.outcome, replay.records) == ("skipped", 0)
    assert (nxt.outcome, nxt.records) == ("written", 1)
    assert committed_values(bootstrap, topic, 1) == [b"a", b"b", b"c", b"d"]


def test_reused_sink_id_of_another_query_is_an_error(shared_broker: BrokerProcess) -> None:
    """A later batch written by another query under the same sink id (a new checkpoint
    with a reused sinkId) fails the task instead of silently skipping its rows; the same
    query replaying its batch still skips."""
    bootstrap = shared_broker.bootstrap
    topic = create_topic(bootstrap, partitions=1)
    sink = f"sink-{uuid.uuid4().hex[:8]}"
    config = config_for(bootstrap, topic, sink_id=sink)
    write_task(config, SinkTask(sink, 0, 5, owner="query-1"), [values_batch([b"a"])])

    with pytest.raises(SinkIdConflictError, match=r"written by streaming query query-1"):
        write_task(config, SinkTask(sink, 0, 0, owner="query-2"), [values_batch([b"b"])])
    replay = write_task(config, SinkTask(sink, 0, 5, owner="query-1"), [values_batch([b"a"])])
    assert replay.outcome == "skipped"
    # The new query's first batch after the old one's last is written (and takes over).
    nxt = write_task(config, SinkTask(sink, 0, 6, owner="query-2"), [values_batch([b"c"])])
    assert nxt.outcome == "written"
    assert committed_values(bootstrap, topic, 1) == [b"a", b"c"]


def test_tasks_of_one_batch_have_their_own_ledger_entries(shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    topic = create_topic(bootstrap, partitions=1)
    sink = f"sink-{uuid.uuid4().hex[:8]}"
    config = config_for(bootstrap, topic, sink_id=sink)
    write_task(config, SinkTask(sink, 0, 5), [values_batch([b"p0"])])
    second = write_task(config, SinkTask(sink, 1, 5), [values_batch([b"p1"])])
    assert second.outcome == "written"
    assert sorted(committed_values(bootstrap, topic, 1)) == [b"p0", b"p1"]
    assert ledger_entry(bootstrap, SinkTask(sink, 0, 5)) == 6
    assert ledger_entry(bootstrap, SinkTask(sink, 1, 5)) == 6


def test_empty_task_talks_to_no_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_producer(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("an empty task created a producer")

    monkeypatch.setattr(sink_tasks, "TwoPhaseProducer", no_producer)
    config = config_for("127.0.0.1:1", "t")
    empty = pa.RecordBatch.from_pydict({"value": pa.array([], pa.binary())})
    msg = write_task(config, SinkTask("s", 0, 0), [empty, empty])
    assert (msg.outcome, msg.records) == ("empty", 0)
    assert write_task(config, SinkTask("s", 0, 0), []).outcome == "empty"


# ---- failures inside a task --------------------------------------------------------------


def test_bad_row_aborts_the_transaction(shared_broker: BrokerProcess) -> None:
    """A row with no topic fails the task; what it had produced is aborted at once (the
    partition's LSO moves on), and a later attempt with good rows writes them."""
    bootstrap = shared_broker.bootstrap
    topic = create_topic(bootstrap, partitions=1)
    sink = f"sink-{uuid.uuid4().hex[:8]}"
    schema = StructType([StructField("topic", StringType()), StructField("value", BinaryType())])
    config = sink_config({"kafka.bootstrap.servers": bootstrap, "sinkId": sink}, schema)

    def rows(topics: list[str | None]) -> list[pa.RecordBatch]:
        return [
            pa.RecordBatch.from_pydict(
                {
                    "topic": pa.array(topics, pa.string()),
                    "value": pa.array([f"v{i}".encode() for i in range(len(topics))]),
                }
            )
        ]

    good = [topic] * 50
    with pytest.raises(SinkDataError, match="null topic"):
        write_task(config, SinkTask(sink, 0, 0), rows([*good, None]))
    assert committed_values(bootstrap, topic, 1) == []
    msg = write_task(config, SinkTask(sink, 0, 0, attempt=1), rows(good))
    assert (msg.outcome, msg.records) == ("written", 50)
    assert len(committed_values(bootstrap, topic, 1)) == 50


# ---- columns -----------------------------------------------------------------------------


def test_key_partition_headers_and_per_row_topics(shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    t1 = create_topic(bootstrap, partitions=3)
    t2 = create_topic(bootstrap, partitions=1)
    header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    schema = StructType(
        [
            StructField("key", StringType()),
            StructField("Value", StringType()),  # matched case-insensitively
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField(
                "headers",
                ArrayType(
                    StructType(
                        [StructField("key", StringType()), StructField("value", BinaryType())]
                    )
                ),
            ),
        ]
    )
    sink = f"sink-{uuid.uuid4().hex[:8]}"
    config = sink_config({"kafka.bootstrap.servers": bootstrap, "sinkid": sink}, schema)
    batch = pa.RecordBatch.from_pydict(
        {
            "key": pa.array(["k1", None, "k3"], pa.string()),
            "Value": pa.array(["one", "two", None], pa.string()),
            "topic": pa.array([t1, t2, t1], pa.string()),
            "partition": pa.array([2, None, 0], pa.int32()),
            "headers": pa.array(
                [[{"key": "h", "value": b"x"}, {"key": "n", "value": None}], None, []],
                header_type,
            ),
        }
    )
    msg = write_task(config, SinkTask(sink, 0, 0), [batch])
    assert (msg.outcome, msg.records, msg.topics) == ("written", 3, sorted([t1, t2]))

    got1 = read_all(bootstrap, t1, 3)
    assert [(p, k, v, h) for p, k, v, h in got1] == [
        (0, b"k3", None, None),
        (2, b"k1", b"one", [("h", b"x"), ("n", None)]),
    ]
    got2 = read_all(bootstrap, t2, 1)
    assert got2 == [(0, None, b"two", None)]


def read_all(bootstrap: str, topic: str, partitions: int) -> list[tuple[Any, ...]]:
    """(partition, key, value, headers) of every committed record, read_committed."""
    ends = wait_stable(bootstrap, topic, range(partitions))
    lso = end_offsets(bootstrap, topic, range(partitions), committed=True)
    assert lso == ends
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "sink-test-reader",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "logger": QUIET_LOGGER,
        }
    )
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: list[tuple[Any, ...]] = []

        def reached() -> bool:
            msg = c.poll(0.1)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append((msg.partition(), msg.key(), msg.value(), msg.headers()))
            pos = c.position([TopicPartition(topic, p) for p in range(partitions)])
            return all(lso[tp.partition] == 0 or tp.offset >= lso[tp.partition] for tp in pos)

        wait_for(reached, what=f"the end of {topic}")
        return sorted(got, key=lambda r: (r[0], r[1] or b""))
    finally:
        c.close()


# ---- options and schema -----------------------------------------------------------------

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "'kafka.bootstrap.servers' is required"),
        ({**BOOT, "topic": "t", "subscribe": "x"}, "'subscribe' is a read option"),
        ({**BOOT, "topic": "t", "startingOffsets": "earliest"}, "'startingOffsets'"),
        ({**BOOT, "topic": "t", "colour": "blue"}, "unknown option 'colour'"),
        ({**BOOT, "topic": "t", "path": "/x"}, "takes no path"),
        ({**BOOT, "topic": "t", "kafka.transactional.id": "x"}, "'kafka.transactional.id'"),
        ({**BOOT, "topic": "t", "kafka.group.id": "x"}, "'kafka.group.id'"),
        ({**BOOT, "topic": "t", "kafka.acks": "1"}, "'kafka.acks=1' contradicts"),
        ({**BOOT, "topic": "t", "kafka.enable.idempotence": "false"}, "enable.idempotence"),
        ({**BOOT, "topic": "t", "kafka.isolation.level": "read_uncommitted"}, "isolation.level"),
        ({**BOOT, "topic": "t", "kafka.compression.type": "brotli"}, "compression type 'brotli'"),
        ({**BOOT, "topic": "t", "kafka.batch.size": "0"}, "batch.size must be positive"),
        ({**BOOT, "topic": "t", "kafka.linger.ms": "soon"}, "'kafka.linger.ms': 'soon'"),
        ({**BOOT, "topic": " "}, "option 'topic' is empty"),
        ({**BOOT, "topic": "t", "sinkId": ""}, "option 'sinkId' is empty"),
        (BOOT, "set the 'topic' option or write a 'topic' column"),
    ],
)
def test_bad_options_are_named(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message.replace("(", r"\(")):
        sink_config(options, VALUE_SCHEMA)


def test_good_options() -> None:
    config = sink_config(
        {
            **BOOT,
            "TOPIC": "out",
            "sinkId": "s1",
            "ledgerTopic": "my-ledger",
            "kafka.acks": "all",
            "kafka.compression.type": "lz4",
            "checkpointLocation": "/tmp/x",
        },
        VALUE_SCHEMA,
    )
    assert config.topic == "out" and config.sink_id == "s1" and config.explicit_sink_id
    assert config.ledger_topic == "my-ledger"
    assert config.client_config == {
        "bootstrap.servers": "127.0.0.1:9092",
        "acks": "all",
        "compression.type": "lz4",
    }


def _schema(*fields: tuple[str, Any]) -> StructType:
    return StructType([StructField(n, t) for n, t in fields])


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (_schema(("key", BinaryType())), "needs a 'value' column"),
        (_schema(("value", DoubleType())), "column 'value' has type double"),
        (_schema(("value", BinaryType()), ("extra", StringType())), "column 'extra' is not"),
        (_schema(("value", BinaryType()), ("VALUE", BinaryType())), "both name the value"),
        (_schema(("value", BinaryType()), ("topic", BinaryType())), "the topic must be string"),
        (_schema(("value", BinaryType()), ("partition", StringType())), "must be int"),
        (
            _schema(("value", BinaryType()), ("headers", ArrayType(StringType()))),
            "array<struct<key: string, value: binary>>",
        ),
    ],
)
def test_bad_columns_are_named(schema: StructType, message: str) -> None:
    with pytest.raises(OptionError, match=message.replace("(", r"\(")):
        sink_config({**BOOT, "topic": "t"}, schema)


def test_batch_writer_ids_and_modes() -> None:
    opts = {**BOOT, "topic": "t", "atomicity": "task"}  # no broker to ask for a default
    a = make_writer(opts, VALUE_SCHEMA, overwrite=False).config
    b = make_writer(opts, VALUE_SCHEMA, overwrite=False).config
    assert a.sink_id and b.sink_id and a.sink_id != b.sink_id  # fresh per write
    assert not a.explicit_sink_id
    named = make_writer({**opts, "sinkId": "nightly"}, VALUE_SCHEMA, overwrite=False).config
    assert named.sink_id == "nightly" and named.explicit_sink_id
    with pytest.raises(OptionError, match="overwrite"):
        make_writer(opts, VALUE_SCHEMA, overwrite=True)
    # Streaming: the sink id defaults to the query id, read inside the task.
    assert make_stream_writer(opts, VALUE_SCHEMA, overwrite=True).config.sink_id is None
