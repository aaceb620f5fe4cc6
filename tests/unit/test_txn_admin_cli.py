"""`onceflow transactions ...` and its wire client against an in-process broker.

The broker runs with its real server on a loopback port in a background thread, serving the
KIP-664 handlers, so these tests run `main([...])` exactly as a user would and check what it
prints and returns, without a broker process. Broker state is set up and checked on the
broker's own event loop (`InProcessBroker.run`). The same commands run against a broker
process, with real clients, in tests/integration/test_transactions_cli.py.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from onceflow.broker.broker import Broker
from onceflow.broker.handlers import registry, txn_admin
from onceflow.broker.security import listener_security
from onceflow.broker.server import KafkaConnection
from onceflow.cli.common import CliError
from onceflow.cli.main import main
from onceflow.cli.transactions import _check_filters_supported
from onceflow.config import BrokerConfig, Listener
from onceflow.errors import ErrorCode
from onceflow.records.batch import validate_produced_batches
from onceflow.records.builder import build_batch

T = TypeVar("T")
MINUTE_MS = 60_000
HANGING_PID = 777_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class InProcessBroker:
    def __init__(self, data_dir: Path) -> None:
        self.port = free_port()
        self.config = BrokerConfig(
            log_dirs=(str(data_dir),),
            listeners=(Listener("127.0.0.1", self.port),),
            offsets_topic_num_partitions=2,
            transaction_state_log_num_partitions=3,
        )
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.broker = Broker(self.config)
        self.server: asyncio.Server | None = None
        self.run(self._start)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def run(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run a coroutine on the broker's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(make(), self.loop).result(timeout=30)

    async def _start(self) -> None:
        handlers = {**registry.HANDLERS, **txn_admin.HANDLERS}
        plaintext = listener_security(self.config, self.config.listeners[0])
        self.server = await self.loop.create_server(
            lambda: KafkaConnection(self.broker, handlers, plaintext), "127.0.0.1", self.port
        )
        await self.broker.start()

    async def _stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for conn in list(self.broker.connections):
            if conn.transport is not None:
                conn.transport.close()
        await self.broker.stop()

    def close(self) -> None:
        self.run(self._stop)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    # ---- state, on the broker's loop ---------------------------------------------------

    def create_topic(self, name: str, partitions: int = 2) -> None:
        async def create() -> None:
            await self.broker.create_topic(name, partitions)

        self.run(create)

    def append(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        *,
        epoch: int = 0,
        sequence: int = 0,
        transactional: bool = True,
        age_ms: int = 0,
    ) -> int:
        """A producer's batch straight into the log, timestamped `age_ms` ago."""

        async def append() -> int:
            plog = self.broker.logs.get(topic, partition)
            assert plog is not None
            batch = build_batch(
                [(b"k", b"v", ())],
                timestamp_ms=int(time.time() * 1000) - age_ms,
                producer_id=producer_id,
                producer_epoch=epoch,
                base_sequence=sequence,
                transactional=transactional,
            )
            result = plog.append_batches(batch, validate_produced_batches(batch, 1 << 20))
            self.broker.writes.appended(plog)
            await self.broker.flusher.durable(plog, result.last_offset)
            return result.first_offset

        return self.run(append)

    def open_txn(self, txn_id: str, partitions: list[tuple[str, int]]) -> tuple[int, int]:
        async def open_txn() -> tuple[int, int]:
            coordinator = self.broker.txn_coordinator
            init = await coordinator.init_producer_id(txn_id, 60_000)
            assert init.error == ErrorCode.none
            error = await coordinator.add_partitions(
                txn_id, init.producer_id, init.producer_epoch, partitions
            )
            assert error == ErrorCode.none
            return init.producer_id, init.producer_epoch

        return self.run(open_txn)

    def last_stable_offset(self, topic: str, partition: int) -> tuple[int, int]:
        async def lso() -> tuple[int, int]:
            plog = self.broker.logs.get(topic, partition)
            assert plog is not None
            return plog.last_stable_offset, plog.log_end_offset

        return self.run(lso)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    b = InProcessBroker(tmp_path_factory.mktemp("txn-admin") / "data")
    try:
        yield b
    finally:
        b.close()


_topics = iter(range(1_000_000))


def new_topic(broker: InProcessBroker, partitions: int = 2) -> str:
    name = f"tx-{next(_topics)}"
    broker.create_topic(name, partitions)
    return name


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["transactions", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def rows(out: str) -> list[list[str]]:
    """A printed table, header first, split into cells."""
    return [line.split() for line in out.splitlines() if line.strip()]


# ---- find-hanging and abort ----------------------------------------------------------------


def test_find_and_abort_a_hanging_transaction(
    broker: InProcessBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = new_topic(broker)
    broker.append(topic, 1, 42, transactional=False)
    start = broker.append(topic, 1, HANGING_PID, age_ms=20 * MINUTE_MS)
    broker.append(topic, 1, 42, sequence=1, transactional=False)
    assert broker.last_stable_offset(topic, 1) == (start, 3)

    code, out, err = cli(capsys, "find-hanging", "--bootstrap-server", broker.bootstrap)
    assert (code, err) == (0, "")
    table = rows(out)
    assert table[0] == [
        "Topic",
        "Partition",
        "ProducerId",
        "ProducerEpoch",
        "CoordinatorEpoch",
        "StartOffset",
        "LastTimestamp",
        "Duration(min)",
    ]
    hanging = [r for r in table[1:] if r[0] == topic]
    assert len(hanging) == 1
    assert hanging[0][1:6] == ["1", str(HANGING_PID), "0", "-1", str(start)]
    assert hanging[0][7] == "20"

    code, out, _ = cli(
        capsys,
        "describe-producers",
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        topic,
        "--partition",
        "1",
    )
    assert code == 0
    table = rows(out)
    assert table[0][0] == "ProducerId" and table[0][-1] == "CurrentTransactionStartOffset"
    assert [r[0] for r in table[1:]] == ["42", str(HANGING_PID)]
    assert table[1][-1] == "None" and table[2][-1] == str(start)

    code, out, err = cli(
        capsys,
        "abort",
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        topic,
        "--partition",
        "1",
        "--start-offset",
        str(start),
    )
    assert (code, err) == (0, "")
    assert f"producer {HANGING_PID}" in out
    assert broker.last_stable_offset(topic, 1) == (4, 4)  # the marker is offset 3

    code, out, _ = cli(
        capsys, "find-hanging", "--bootstrap-server", broker.bootstrap, "--topic", topic
    )
    assert (code, out.strip()) == (0, "No hanging transactions found.")

    code, _, err = cli(
        capsys,
        "abort",
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        topic,
        "--partition",
        "1",
        "--start-offset",
        str(start),
    )
    assert code == 1
    assert err == f"onceflow: error: no open transaction starts at offset {start} of {topic}-1\n"


def test_recent_open_transactions_are_not_candidates(
    broker: InProcessBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    """Below the maximum timeout a transaction may still be live: never reported."""
    topic = new_topic(broker)
    broker.append(topic, 0, HANGING_PID + 1, age_ms=MINUTE_MS)
    args = ["find-hanging", "--bootstrap-server", broker.bootstrap, "--topic", topic]
    assert rows(cli(capsys, *args)[1]) == [["No", "hanging", "transactions", "found."]]
    code, out, _ = cli(capsys, *args, "--partition", "0", "--max-transaction-timeout", "0")
    assert code == 0
    assert [r[2] for r in rows(out)[1:]] == [str(HANGING_PID + 1)]


def test_coordinator_owned_transactions_are_not_hanging(
    broker: InProcessBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    """A producer whose coordinator has the partition in its ongoing transaction will get
    its marker; the same producer open on a partition outside that transaction will not."""
    topic = new_topic(broker)
    pid, epoch = broker.open_txn("live-app", [(topic, 0)])
    broker.append(topic, 0, pid, epoch=epoch, age_ms=2 * MINUTE_MS)
    broker.append(topic, 1, pid, epoch=epoch, age_ms=2 * MINUTE_MS)  # not in the txn
    code, out, _ = cli(
        capsys,
        "find-hanging",
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        topic,
        "--max-transaction-timeout",
        "1",
    )
    assert code == 0
    assert [(r[0], r[1], r[2]) for r in rows(out)[1:]] == [(topic, "1", str(pid))]


# ---- list and describe ---------------------------------------------------------------------


def test_list_and_describe(broker: InProcessBroker, capsys: pytest.CaptureFixture[str]) -> None:
    topic = new_topic(broker)
    pid, epoch = broker.open_txn("shown-app", [(topic, 1), (topic, 0)])

    code, out, err = cli(capsys, "list", "--bootstrap-server", broker.bootstrap)
    assert (code, err) == (0, "")
    table = rows(out)
    assert table[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    assert ["shown-app", "0", str(pid), "Ongoing"] in table[1:]

    code, out, _ = cli(
        capsys, "list", "--bootstrap-server", broker.bootstrap, "--state", "CompleteAbort"
    )
    assert code == 0 and "shown-app" not in out
    code, out, _ = cli(
        capsys, "list", "--bootstrap-server", broker.bootstrap, "--duration-filter", "3600000"
    )
    assert code == 0 and "shown-app" not in out
    pattern = ["--transactional-id-pattern"]
    code, out, _ = cli(capsys, "list", "--bootstrap-server", broker.bootstrap, *pattern, "shown-.*")
    assert code == 0 and "shown-app" in out
    code, out, _ = cli(capsys, "list", "--bootstrap-server", broker.bootstrap, *pattern, "shown")
    assert code == 0 and "shown-app" not in out  # the whole id must match

    code, out, _ = cli(
        capsys,
        "describe",
        "--bootstrap-server",
        broker.bootstrap,
        "--transactional-id",
        "shown-app",
    )
    assert code == 0
    header, row = rows(out)
    assert header == [
        "CoordinatorId",
        "TransactionalId",
        "ProducerId",
        "ProducerEpoch",
        "TransactionState",
        "TransactionTimeoutMs",
        "CurrentTransactionStartTimeMs",
        "TransactionDurationMs",
        "TopicPartitions",
    ]
    described = dict(zip(header, row, strict=True))
    assert described["ProducerId"] == str(pid)
    assert described["ProducerEpoch"] == str(epoch)
    assert described["TransactionState"] == "Ongoing"
    assert described["TransactionTimeoutMs"] == "60000"
    assert abs(int(described["CurrentTransactionStartTimeMs"]) - time.time() * 1000) < 60_000
    assert described["TopicPartitions"] == f"{topic}-0,{topic}-1"


def test_describe_without_a_transaction_prints_none(
    broker: InProcessBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    async def init() -> None:
        await broker.broker.txn_coordinator.init_producer_id("resting-app", 60_000)

    broker.run(init)
    code, out, _ = cli(
        capsys,
        "describe",
        "--bootstrap-server",
        broker.bootstrap,
        "--transactional-id",
        "resting-app",
    )
    assert code == 0
    row = rows(out)[1]
    assert row[4:8] == ["Empty", "60000", "None", "None"]
    assert len(row) == 8  # no partitions: the last column is empty


# ---- errors --------------------------------------------------------------------------------


def test_errors_are_one_line(broker: InProcessBroker, capsys: pytest.CaptureFixture[str]) -> None:
    bootstrap = ["--bootstrap-server", broker.bootstrap]
    code, out, err = cli(capsys, "describe", *bootstrap, "--transactional-id", "no-such-id")
    assert (code, out) == (1, "")
    assert err == (
        "onceflow: error: cannot describe transactional id no-such-id: TRANSACTIONAL_ID_NOT_FOUND\n"
    )
    code, _, err = cli(
        capsys, "describe-producers", *bootstrap, "--topic", "nope", "--partition", "0"
    )
    assert code == 1
    assert err == "onceflow: error: topic nope: UNKNOWN_TOPIC_OR_PARTITION\n"
    code, _, err = cli(capsys, "list", *bootstrap, "--state", "Sleeping")
    assert code == 2 and "unknown transaction state Sleeping" in err
    code, _, err = cli(capsys, "list", *bootstrap, "--transactional-id-pattern", "(a")
    assert code == 2
    assert "the broker refused the transactional id pattern '(a'" in err


def test_usage_errors_exit_2(broker: InProcessBroker, capsys: pytest.CaptureFixture[str]) -> None:
    bootstrap = ["--bootstrap-server", broker.bootstrap]
    target = ["--topic", "t", "--partition", "0"]
    assert cli(capsys, "find-hanging", *bootstrap, "--partition", "0")[0] == 2
    assert cli(capsys, "find-hanging", *bootstrap, "--topic", "t", "--broker-id", "0")[0] == 2
    assert cli(capsys, "abort", *bootstrap, *target)[0] == 2
    code, _, err = cli(capsys, "abort", *bootstrap, *target, "--producer-id", "5")
    assert code == 2 and "--producer-epoch" in err
    code, _, err = cli(
        capsys, "abort", *bootstrap, *target, "--start-offset", "0", "--producer-id", "5"
    )
    assert code == 2


def test_abort_by_producer_id_reports_the_partition_error(
    broker: InProcessBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = new_topic(broker)
    broker.append(topic, 0, HANGING_PID + 2, epoch=4)
    code, _, err = cli(
        capsys,
        "abort",
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        topic,
        "--partition",
        "0",
        "--producer-id",
        str(HANGING_PID + 2),
        "--producer-epoch",
        "3",
        "--coordinator-epoch",
        "0",
    )
    assert code == 1
    assert err.endswith(f"on {topic}-0: INVALID_PRODUCER_EPOCH\n")


def test_unreachable_bootstrap(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "list", "--bootstrap-server", f"127.0.0.1:{free_port()}")
    assert code == 1
    assert err.startswith("onceflow: error: cannot connect to any bootstrap server: 127.0.0.1:")
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("flags", "version", "missing"),
    [
        ({"duration_filter": 1000}, 0, "duration"),
        ({"transactional_id_pattern": "tx-.*"}, 1, "pattern"),
    ],
)
def test_a_filter_the_broker_cannot_apply_is_an_error_not_dropped(
    flags: dict[str, Any], version: int, missing: str
) -> None:
    """A broker too old for a filter would ignore it and list every transaction."""
    args = argparse.Namespace(
        **{"duration_filter": None, "transactional_id_pattern": None, **flags}
    )
    with pytest.raises(CliError, match=missing):
        _check_filters_supported(args, "host:9092", version)
    _check_filters_supported(args, "host:9092", 2)  # a broker that has both filters
