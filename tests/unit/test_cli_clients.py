"""`onceflow topics|produce|consume` end to end, against librdkafka's in-process mock cluster.

The mock speaks the Kafka protocol on a real TCP port and auto-creates topics (4 partitions),
so these run `main([...])` exactly as a user would, with stdin and stdout captured. It has
no CreateTopics, DeleteTopics or DescribeConfigs, so those paths use a fake AdminClient.
The same commands are meant to be run against the Onceflow broker by the integration tests.
"""

from __future__ import annotations

import argparse
import io
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigEntry, ConfigResource, ConfigSource
from tests.helpers.clients import QUIET_LOGGER

from onceflow.cli import consume, log_dirs, topics
from onceflow.cli.main import build_parser, main

QUIET = {"logger": QUIET_LOGGER, "log_level": 0}


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    """A one-broker mock cluster; it lives as long as the admin client that made it."""
    admin = AdminClient({"test.mock.num.brokers": "1", **QUIET})
    broker = next(iter(admin.list_topics(timeout=10).brokers.values()))
    yield f"{broker.host}:{broker.port}"
    del admin


def topic() -> str:
    return f"cli-{uuid.uuid4().hex[:10]}"


def feed(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


def produce(
    monkeypatch: pytest.MonkeyPatch, bootstrap: str, name: str, data: bytes, *extra: str
) -> int:
    feed(monkeypatch, data)
    return main(["produce", name, "--bootstrap-server", bootstrap, *extra])


def run_consume(bootstrap: str, name: str, *extra: str) -> int:
    return main(["consume", name, "--bootstrap-server", bootstrap, "--timeout-ms", "10000", *extra])


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# --- produce and consume --------------------------------------------------------------------


def test_round_trip_with_keys(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], bootstrap: str
) -> None:
    name = topic()
    data = b"a:1\nb:2:with:colons\n:empty key\n"
    assert (
        produce(monkeypatch, bootstrap, name, data, "--key-separator", ":", "--partition", "2") == 0
    )
    assert capsys.readouterr().err == ""
    code = run_consume(
        bootstrap,
        name,
        "--from-beginning",
        "--max-messages",
        "3",
        "--print-key",
        "--print-partition",
        "--print-offset",
    )
    assert code == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "Partition:2\tOffset:0\ta\t1",
        "Partition:2\tOffset:1\tb\t2:with:colons",
        "Partition:2\tOffset:2\t\tempty key",
    ]
    assert err == "Consumed 3 messages.\n"


def test_values_only_and_custom_separator(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], bootstrap: str
) -> None:
    name = topic()
    assert produce(monkeypatch, bootstrap, name, b"x\ny\r\n\nz", "--partition", "0") == 0
    code = run_consume(
        bootstrap,
        name,
        "--from-beginning",
        "--max-messages",
        "4",
        "--print-key",
        "--key-separator",
        "|",
    )
    assert code == 0
    # CRLF endings are stripped, an empty line is an empty value, a last line needs no \n.
    assert capsys.readouterr().out.splitlines() == ["null|x", "null|y", "null|", "null|z"]


def test_binary_payloads_pass_unchanged(
    monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes], bootstrap: str
) -> None:
    name = topic()
    payload = b"\xff\x00\xfe bytes"
    assert produce(monkeypatch, bootstrap, name, payload + b"\n", "--partition", "1") == 0
    assert run_consume(bootstrap, name, "--from-beginning", "--max-messages", "1") == 0
    assert capsysbinary.readouterr().out == payload + b"\n"


def test_partition_and_offset(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], bootstrap: str
) -> None:
    name = topic()
    assert produce(monkeypatch, bootstrap, name, b"m0\nm1\nm2\nm3\n", "--partition", "3") == 0
    assert (
        run_consume(bootstrap, name, "--partition", "3", "--offset", "2", "--timeout-ms", "2000")
        == 0
    )
    assert capsys.readouterr().out.splitlines() == ["m2", "m3"]
    # A partition with nothing in it, from the beginning: the idle timeout ends the run.
    assert (
        run_consume(
            bootstrap, name, "--partition", "0", "--offset", "earliest", "--timeout-ms", "1000"
        )
        == 0
    )
    out, err = capsys.readouterr()
    assert (out, err) == ("", "Consumed 0 messages.\n")


def test_default_start_is_the_end(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], bootstrap: str
) -> None:
    name = topic()
    assert produce(monkeypatch, bootstrap, name, b"old\n") == 0
    assert run_consume(bootstrap, name, "--timeout-ms", "1500") == 0
    assert capsys.readouterr().out == ""


def test_max_messages_stops_early(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], bootstrap: str
) -> None:
    name = topic()
    lines = b"".join(b"n%d\n" % i for i in range(20))
    assert produce(monkeypatch, bootstrap, name, lines, "--partition", "0", "--acks", "1") == 0
    assert run_consume(bootstrap, name, "--from-beginning", "--max-messages", "5") == 0
    assert capsys.readouterr().out.splitlines() == [f"n{i}" for i in range(5)]


def test_acks_zero(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], bootstrap: str
) -> None:
    name = topic()
    assert (
        produce(monkeypatch, bootstrap, name, b"fire\nforget\n", "--acks", "0", "--partition", "0")
        == 0
    )
    assert run_consume(bootstrap, name, "--from-beginning", "--max-messages", "2") == 0
    assert capsys.readouterr().out.splitlines() == ["fire", "forget"]


def test_property_pass_through(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], bootstrap: str
) -> None:
    name = topic()
    code = produce(
        monkeypatch,
        bootstrap,
        name,
        b"zipped\n",
        "--partition",
        "0",
        "--property",
        "compression.type=gzip",
        "--property",
        "linger.ms=1",
    )
    assert code == 0
    assert (
        run_consume(
            bootstrap,
            name,
            "--from-beginning",
            "--max-messages",
            "1",
            "--property",
            "fetch.wait.max.ms=50",
        )
        == 0
    )
    assert capsys.readouterr().out == "zipped\n"


def test_group_commits_what_it_printed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], bootstrap: str
) -> None:
    name, group = topic(), f"g-{uuid.uuid4().hex[:8]}"
    assert produce(monkeypatch, bootstrap, name, b"g0\ng1\ng2\ng3\n", "--partition", "1") == 0
    code = main(
        [
            "consume",
            name,
            "--bootstrap-server",
            bootstrap,
            "--group",
            group,
            "--from-beginning",
            "--max-messages",
            "3",
            "--timeout-ms",
            "20000",
        ]
    )
    assert code == 0
    assert capsys.readouterr().out.splitlines() == ["g0", "g1", "g2"]
    checker = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **QUIET})
    try:
        committed = checker.committed([TopicPartition(name, 1)], timeout=10)
    finally:
        checker.close()
    assert committed[0].offset == 3


def test_group_with_partition_and_offset_commits(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], bootstrap: str
) -> None:
    name, group = topic(), f"g-{uuid.uuid4().hex[:8]}"
    assert produce(monkeypatch, bootstrap, name, b"p0\np1\np2\n", "--partition", "0") == 0
    code = main(
        [
            "consume",
            name,
            "--bootstrap-server",
            bootstrap,
            "--group",
            group,
            "--partition",
            "0",
            "--offset",
            "1",
            "--max-messages",
            "1",
            "--timeout-ms",
            "10000",
        ]
    )
    assert code == 0
    assert capsys.readouterr().out == "p1\n"
    checker = Consumer({"bootstrap.servers": bootstrap, "group.id": group, **QUIET})
    try:
        assert checker.committed([TopicPartition(name, 0)], timeout=10)[0].offset == 2
    finally:
        checker.close()


def transactional_records(bootstrap: str, name: str) -> None:
    """One committed and one aborted transaction in partition 0."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{name}", **QUIET})
    producer.init_transactions(20)
    for value, commit in ((b"committed", True), (b"aborted", False)):
        producer.begin_transaction()
        producer.produce(name, value, partition=0)
        producer.flush(20)
        if commit:
            producer.commit_transaction(20)
        else:
            producer.abort_transaction(20)


def test_transactions_read_uncommitted(capsys: pytest.CaptureFixture[str], bootstrap: str) -> None:
    """The default level shows aborted data too, and never prints the transaction markers.

    The mock answers every fetch with no aborted transactions, so what read_committed hides
    is left to the integration tests against Onceflow; here only its setting is checked.
    """
    name = topic()
    transactional_records(bootstrap, name)
    assert run_consume(bootstrap, name, "--from-beginning", "--timeout-ms", "2000") == 0
    assert capsys.readouterr().out.splitlines() == ["committed", "aborted"]


def test_consumer_settings() -> None:
    def settings(*argv: str) -> dict[str, Any]:
        args = build_parser().parse_args(["consume", "t", *argv])
        return consume._consumer_config(args)

    plain = settings()
    assert plain["isolation.level"] == "read_uncommitted"
    assert plain["auto.offset.reset"] == "latest"
    assert plain["enable.auto.commit"] is False
    assert plain["group.id"].startswith("onceflow-console-")
    grouped = settings("--group", "g", "--from-beginning", "--property", "fetch.min.bytes=7")
    assert (grouped["group.id"], grouped["enable.auto.commit"]) == ("g", True)
    assert grouped["auto.offset.reset"] == "earliest"
    assert grouped["fetch.min.bytes"] == "7"
    assert settings("--isolation-level", "read_committed")["isolation.level"] == "read_committed"


# --- produce and consume failures -----------------------------------------------------------


def test_line_without_separator_fails_but_others_are_sent(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], bootstrap: str
) -> None:
    name = topic()
    data = b"k:v\nno separator\nk2:v2\n"
    assert (
        produce(monkeypatch, bootstrap, name, data, "--key-separator", ":", "--partition", "0") == 1
    )
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "onceflow: error: line 2 has no key separator ':'",
        "onceflow: error: 1 of 3 lines were not delivered",
    ]
    assert run_consume(bootstrap, name, "--from-beginning", "--max-messages", "2") == 0
    assert capsys.readouterr().out.splitlines() == ["v", "v2"]


def test_missing_partition_fails_fast(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], bootstrap: str
) -> None:
    assert produce(monkeypatch, bootstrap, topic(), b"x\n", "--partition", "99") == 1
    assert "has no partition 99 (it has 4)" in capsys.readouterr().err
    name = topic()
    assert produce(monkeypatch, bootstrap, name, b"x\n") == 0
    assert run_consume(bootstrap, name, "--partition", "9", "--offset", "0") == 1
    assert "has no partition 9" in capsys.readouterr().err


def test_bad_client_setting_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], bootstrap: str
) -> None:
    assert produce(monkeypatch, bootstrap, topic(), b"x\n", "--property", "no.such=1") == 1
    err = capsys.readouterr().err
    assert err.startswith("onceflow: error: bad producer setting") and err.count("\n") == 1
    assert run_consume(bootstrap, topic(), "--property", "fetch.min.bytes=many") == 1
    assert capsys.readouterr().err.startswith("onceflow: error: bad consumer setting")


def test_consume_missing_topic(capsys: pytest.CaptureFixture[str], bootstrap: str) -> None:
    name = topic()
    assert run_consume(bootstrap, name) == 1
    assert capsys.readouterr().err == (
        f"onceflow: error: cannot consume {name}: Broker: Unknown topic or partition\n"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["produce", "t"],
        ["consume", "t"],
        ["consume", "t", "--group", "g"],
        ["topics", "list"],
        ["topics", "describe", "t"],
        ["topics", "create", "t"],
        ["topics", "delete", "t"],
    ],
)
def test_unreachable_broker_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    feed(monkeypatch, b"never sent\n")
    address = f"127.0.0.1:{unused_port()}"
    started = time.monotonic()
    assert main([*argv, "--bootstrap-server", address]) == 1
    assert time.monotonic() - started < 5
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"onceflow: error: cannot connect to any bootstrap server: {address} (Connection refused)\n"
    )


def test_unreachable_broker_has_no_traceback_in_a_process() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "onceflow.cli.main",
            "produce",
            "t",
            "--bootstrap-server",
            f"127.0.0.1:{unused_port()}",
        ],
        input=b"x\n",
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.count(b"\n") == 1
    assert done.stderr.startswith(b"onceflow: error: cannot connect")


# --- topics against the mock ----------------------------------------------------------------


def test_topics_list(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], bootstrap: str
) -> None:
    name = topic()
    assert produce(monkeypatch, bootstrap, name, b"x\n") == 0
    assert main(["topics", "list", "--bootstrap-server", bootstrap]) == 0
    names = capsys.readouterr().out.splitlines()
    assert name in names
    assert names == sorted(names)


def test_topics_describe_partitions(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], bootstrap: str
) -> None:
    name = topic()
    assert produce(monkeypatch, bootstrap, name, b"x\n") == 0
    # The mock has no DescribeConfigs: partitions are shown, the missing configs are an error.
    code = main(
        ["topics", "describe", name, "--bootstrap-server", bootstrap, "--timeout-ms", "500"]
    )
    out, err = capsys.readouterr()
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith(
        f"Topic: {name}\tPartitionCount: 4\tReplicationFactor: 1\tConfigs: (unavailable: "
    )
    assert lines[1:] == [
        f"\tTopic: {name}\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1" for p in range(4)
    ]
    assert err.startswith(f"onceflow: error: cannot describe configs of {name}: ")


def test_topics_describe_unknown(capsys: pytest.CaptureFixture[str], bootstrap: str) -> None:
    name = topic()
    assert main(["topics", "describe", name, "--bootstrap-server", bootstrap]) == 1
    assert capsys.readouterr().err == f"onceflow: error: no such topic: {name}\n"


# --- topics against a fake admin client -----------------------------------------------------


def done(value: Any = None, error: int | None = None) -> Future[Any]:
    future: Future[Any] = Future()
    if error is None:
        future.set_result(value)
    else:
        future.set_exception(KafkaException(KafkaError(error, "the broker says no")))
    return future


class FakeAdmin:
    """Answers like AdminClient, from canned results; records what it was asked."""

    def __init__(self) -> None:
        self.created: list[Any] = []
        self.deleted: list[str] = []
        self.errors: dict[str, int] = {}
        self.configs: dict[str, list[ConfigEntry]] = {}
        partition = SimpleNamespace(id=0, leader=1, replicas=[1], isrs=[1], error=None)
        self.metadata = SimpleNamespace(
            topics={"orders": SimpleNamespace(error=None, partitions={0: partition})}
        )

    def create_topics(self, new_topics: list[Any], **timeouts: float) -> dict[str, Future[Any]]:
        assert set(timeouts) == {"request_timeout", "operation_timeout"}
        self.created.extend(new_topics)
        return {t.topic: done(error=self.errors.get(t.topic)) for t in new_topics}

    def delete_topics(self, names: list[str], **timeouts: float) -> dict[str, Future[Any]]:
        self.deleted.extend(names)
        return {name: done(error=self.errors.get(name)) for name in names}

    def list_topics(self, timeout: float) -> Any:
        return self.metadata

    def describe_configs(
        self, resources: list[ConfigResource], request_timeout: float
    ) -> dict[ConfigResource, Future[Any]]:
        return {r: done({e.name: e for e in self.configs.get(r.name, [])}) for r in resources}


@pytest.fixture
def admin(monkeypatch: pytest.MonkeyPatch) -> FakeAdmin:
    fake = FakeAdmin()

    def connect(args: argparse.Namespace) -> FakeAdmin:
        return fake

    monkeypatch.setattr(topics, "connect_admin", connect)
    monkeypatch.setattr(topics, "log_dir_lines", lambda *_: ["LogDir: /data\tBroker: 1"])
    return fake


def test_create(admin: FakeAdmin, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "topics",
        "create",
        "orders",
        "--partitions",
        "6",
        "--config",
        "retention.ms=60000",
        "--config",
        "cleanup.policy=compact",
    ]
    assert main(argv) == 0
    assert capsys.readouterr().out == "Created topic orders.\n"
    [new] = admin.created
    assert (new.topic, new.num_partitions, new.replication_factor) == (
        "orders",
        6,
        -1,
    )  # -1: the broker's default.replication.factor
    assert new.config == {"retention.ms": "60000", "cleanup.policy": "compact"}


def test_create_uses_the_broker_default_partition_count(admin: FakeAdmin) -> None:
    assert main(["topics", "create", "t", "--replication-factor", "1"]) == 0
    assert admin.created[0].num_partitions == -1


def test_create_existing(admin: FakeAdmin, capsys: pytest.CaptureFixture[str]) -> None:
    admin.errors["orders"] = KafkaError.TOPIC_ALREADY_EXISTS
    assert main(["topics", "create", "orders"]) == 1
    assert capsys.readouterr().err == (
        "onceflow: error: cannot create topic orders: the broker says no\n"
    )
    assert main(["topics", "create", "orders", "--if-not-exists"]) == 0
    assert capsys.readouterr() == ("", "")


def test_delete(admin: FakeAdmin, capsys: pytest.CaptureFixture[str]) -> None:
    admin.errors["gone"] = KafkaError.UNKNOWN_TOPIC_OR_PART
    assert main(["topics", "delete", "orders", "gone"]) == 1
    out, err = capsys.readouterr()
    assert out == "Deleted topic orders.\n"
    assert err == "onceflow: error: cannot delete topic gone: the broker says no\n"
    assert main(["topics", "delete", "orders", "gone", "--if-exists"]) == 0
    assert admin.deleted == ["orders", "gone", "orders", "gone"]


def test_describe_shows_overrides(admin: FakeAdmin, capsys: pytest.CaptureFixture[str]) -> None:
    def entry(name: str, value: str, source: ConfigSource, **flags: bool) -> ConfigEntry:
        return ConfigEntry(name, value, source=source, **flags)

    admin.configs["orders"] = [
        entry("retention.ms", "60000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        entry("segment.bytes", "1073741824", ConfigSource.DEFAULT_CONFIG, is_default=True),
        # librdkafka's own results carry the source as a plain int.
        ConfigEntry("flush.ms", "1000", source=int(ConfigSource.DEFAULT_CONFIG.value)),
        entry("cleanup.policy", "compact", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        entry("sasl.secret", "hunter2", ConfigSource.DYNAMIC_TOPIC_CONFIG, is_sensitive=True),
    ]
    assert main(["topics", "describe", "orders"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "Topic: orders\tPartitionCount: 1\tReplicationFactor: 1\t"
        "Configs: cleanup.policy=compact,retention.ms=60000,sasl.secret=(sensitive)",
        "\tTopic: orders\tPartition: 0\tLeader: 1\tReplicas: 1\tIsr: 1",
        "LogDir: /data\tBroker: 1",
    ]
    assert main(["topics", "describe", "--all-configs"]) == 0
    assert "segment.bytes=1073741824" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("usable", "state"),
    [(8 << 20, "ok"), (2 << 20, "low (produce refused)"), (0, "full")],
)
def test_a_log_dir_shows_its_space_against_the_threshold(usable: int, state: str) -> None:
    result = SimpleNamespace(
        log_dir="/data", error_code=0, total_bytes=12 << 20, usable_bytes=usable
    )
    line = log_dirs._render(0, result, (3 << 20, 100.0))
    assert line.startswith(f"LogDir: /data\tBroker: 0\tState: {state}\t")
    assert line.endswith("\tTotal: 12.0 MiB\tThreshold: 3.0 MiB")
    # Against Kafka (no threshold config) only the space is shown.
    assert "Threshold" not in log_dirs._render(0, result, None)
    offline = SimpleNamespace(log_dir="/data", error_code=56, total_bytes=-1, usable_bytes=-1)
    assert log_dirs._render(0, offline, None).endswith("State: offline (KAFKA_STORAGE_ERROR)")
