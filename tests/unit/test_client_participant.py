"""The participant client's pure parts, without a network: Kafka's partitioner, the
prepared state, the settings, batches per partition with their sequences, and the sender's
retry of a refused batch with the same bytes."""

from __future__ import annotations

import random
import types
from typing import Any

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from onceflow.client import retry
from onceflow.client.errors import ConfigError, KafkaApiError, Unreachable, UnsupportedVersion
from onceflow.client.participant import TransactionStateError, TwoPhaseProducer
from onceflow.client.participant_link import init_producer_id
from onceflow.client.participant_records import Accumulator, kafka_partition, murmur2
from onceflow.client.participant_sender import Sender, SendThread
from onceflow.client.participant_state import PreparedTransaction, ProducerSettings
from onceflow.client.wire import placeholder
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.records.batch import parse_header
from onceflow.records.compression import Compression
from onceflow.records.record import decode_records

# Kafka's own test vectors for its murmur2 (signed, as Java's int).
KAFKA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize("key", list(KAFKA_MURMUR2))
def test_murmur2_matches_kafkas_vectors(key: bytes) -> None:
    assert murmur2(key) == KAFKA_MURMUR2[key]


def test_the_partition_of_a_key_is_kafkas_default_partitioners() -> None:
    rng = random.Random(7)
    for _ in range(500):
        key = rng.randbytes(rng.randrange(0, 40))
        expected = kafka_python_murmur2(key) & 0x7FFFFFFF
        for partitions in (1, 3, 7, 100):
            assert kafka_partition(key, partitions) == expected % partitions
    assert kafka_partition(b"21", 10) == (-973932308 & 0x7FFFFFFF) % 10


def test_a_prepared_transaction_round_trips_as_json_and_bytes() -> None:
    prepared = PreparedTransaction("orders-3", 4711, 12)
    assert PreparedTransaction.from_json(prepared.to_json()) == prepared
    assert PreparedTransaction.from_bytes(prepared.to_bytes()) == prepared
    assert '"producer_epoch":12' in prepared.to_json()
    for bad in ("{}", "[1]", "not json", '{"transactional_id": "x", "producer_id": "a"}'):
        with pytest.raises(ConfigError):
            PreparedTransaction.from_json(bad)


def test_settings_by_kafkas_names_or_keywords() -> None:
    s = ProducerSettings.of({"batch.size": 100, "linger_ms": 1, "compression.type": "zstd"})
    assert (s.batch_size, s.linger_ms, s.compression) == (100, 1, Compression.ZSTD)
    with pytest.raises(ConfigError, match="unknown producer setting"):
        ProducerSettings.of({"acks": "1"})
    with pytest.raises(ConfigError, match="compression"):
        ProducerSettings.of({"compression.type": "brotli"})
    with pytest.raises(ConfigError):
        ProducerSettings.of({"batch.size": 0})


def records(batch: bytes) -> list[tuple[bytes | None, bytes | None]]:
    return [(r.key, r.value) for r in decode_records(batch)]


def test_batches_fill_per_partition_and_take_sequences_when_sealed() -> None:
    acc = Accumulator(batch_size=300, linger_s=3600, compression=Compression.NONE)
    full = [acc.append(("t", 0), (b"k", b"v" * 50, ()), 1000 + i) for i in range(4)]
    assert full == [False, False, False, True]  # 4 x (24 + 51) bytes reach 300
    assert not acc.append(("t", 1), (None, b"other", ()), 2000)
    acc.seal(42, 3, everything=False)  # only the full batch
    assert list(acc.sealed) == [("t", 0)] and ("t", 1) in acc.open
    (first,) = acc.heads()
    header = parse_header(first.data)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 0)
    assert header.is_transactional and header.record_count == 4
    assert records(first.data) == [(b"k", b"v" * 50)] * 4
    assert [r.timestamp for r in decode_records(first.data)] == [1000, 1001, 1002, 1003]
    acc.append(("t", 0), (b"k", b"next", ()), 3000)
    acc.seal(42, 3, everything=True)
    assert [b.base_sequence for b in acc.sealed[("t", 0)]] == [0, 4]
    assert [b.base_sequence for b in acc.sealed[("t", 1)]] == [0]
    # One batch per partition per request, oldest first, until acknowledged.
    assert {(b.tp, b.base_sequence) for b in acc.heads()} == {(("t", 0), 0), (("t", 1), 0)}
    acc.sent(first)
    assert {(b.tp, b.base_sequence) for b in acc.heads()} == {(("t", 0), 4), (("t", 1), 0)}


def test_an_abort_drops_unsealed_records_without_using_their_sequences() -> None:
    acc = Accumulator(batch_size=1 << 20, linger_s=3600, compression=Compression.NONE)
    acc.append(("t", 0), (None, b"a", ()), 1)
    acc.seal(1, 0, everything=True)
    acc.sent(acc.heads()[0])
    acc.append(("t", 0), (None, b"dropped", ()), 1)
    acc.drop_open()
    acc.append(("t", 0), (None, b"b", ()), 1)
    acc.seal(1, 0, everything=True)
    assert acc.heads()[0].base_sequence == 1
    acc.reset()  # a new epoch starts at sequence 0
    acc.append(("t", 0), (None, b"c", ()), 1)
    acc.seal(1, 1, everything=True)
    assert acc.heads()[0].base_sequence == 0


def test_a_compressed_batch_decodes_to_its_records() -> None:
    acc = Accumulator(batch_size=1 << 20, linger_s=0, compression=Compression.GZIP)
    for i in range(10):
        acc.append(("t", 0), (b"k%d" % i, b"v" * 100, (("h", b"x"),)), 5)
    acc.seal(7, 0, everything=False)  # lingered: linger 0
    (batch,) = acc.heads()
    assert parse_header(batch.data).compression == Compression.GZIP
    assert records(batch.data) == [(b"k%d" % i, b"v" * 100) for i in range(10)]
    assert decode_records(batch.data)[0].headers == (("h", b"x"),)


# ---- the sender, over a fake cluster -----------------------------------------------------


class FakeConnection:
    """Answers Produce requests with the codes queued per call; records what it was sent."""

    address = "fake:9092"
    versions = {int(ApiKey.PRODUCE): (3, 11)}

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.sent: list[dict[tuple[str, int], bytes]] = []

    def call_at(self, api_key: int, version: int, request: Any, blobs: Any = ()) -> Any:
        """`blobs` go where the request holds their placeholders (the sender's records)."""
        blob_of = {placeholder(i): bytes(blob) for i, blob in enumerate(blobs)}
        self.sent.append(
            {
                (t.name, p.index): blob_of.get(bytes(p.records), bytes(p.records))
                for t in request.topic_data
                for p in t.partition_data
            }
        )
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return types.SimpleNamespace(
            responses=[
                types.SimpleNamespace(
                    name=tp[0],
                    partition_responses=[types.SimpleNamespace(index=tp[1], error_code=code)],
                )
                for tp, code in answer.items()
            ]
        )


class FakeLink:
    backoff_s = 0.01

    def __init__(self, connection: FakeConnection) -> None:
        self.connection = connection
        self.wire = types.SimpleNamespace(node=lambda leader: self.connection)
        self.forgotten: list[str] = []
        self.resets = 0

    def leaders(self, topic: str) -> dict[int, int]:
        return {0: 1, 1: 1}

    def forget(self, topics: Any) -> None:
        self.forgotten.extend(topics)

    def reset(self) -> None:
        self.resets += 1


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retry, "time", types.SimpleNamespace(monotonic=lambda: 0.0, sleep=id))


def sender_with(answers: list[Any]) -> tuple[Sender, Accumulator, FakeConnection, FakeLink]:
    acc = Accumulator(batch_size=1 << 20, linger_s=0, compression=Compression.NONE)
    connection = FakeConnection(answers)
    link = FakeLink(connection)
    return Sender(link, acc, "txn", 1000, 5.0), acc, connection, link  # type: ignore[arg-type]


def test_a_retriable_refusal_or_a_lost_answer_sends_the_same_bytes_again() -> None:
    p0, p1 = ("t", 0), ("t", 1)
    sender, acc, connection, link = sender_with(
        [
            {p0: ErrorCode.not_leader_or_follower, p1: ErrorCode.none},
            Unreachable("cut"),
            {p0: ErrorCode.duplicate_sequence_number},  # the broker had it: acknowledged
            {p0: ErrorCode.none},
        ]
    )
    acc.append(p0, (None, b"a", ()), 1)
    acc.append(p1, (None, b"b", ()), 1)
    acc.seal(5, 0, everything=True)
    acc.append(p0, (None, b"c", ()), 1)
    acc.seal(5, 0, everything=True)
    added: list[set[tuple[str, int]]] = []
    sender.send_sealed(added.append)
    assert not acc.pending()
    first_a = connection.sent[0][p0]
    assert [set(s) for s in connection.sent] == [{p0, p1}, {p0}, {p0}, {p0}]
    assert connection.sent[1][p0] == connection.sent[2][p0] == first_a  # never re-sequenced
    assert parse_header(connection.sent[3][p0]).base_sequence == 1
    assert link.forgotten == ["t"] and link.resets == 1
    assert added[0] == {p0, p1}


def test_a_fatal_refusal_is_raised_with_kafkas_name() -> None:
    sender, acc, _, _ = sender_with([{("t", 0): ErrorCode.invalid_producer_epoch}])
    acc.append(("t", 0), (None, b"a", ()), 1)
    acc.seal(5, 0, everything=True)
    with pytest.raises(KafkaApiError, match="INVALID_PRODUCER_EPOCH") as raised:
        sender.send_sealed(lambda partitions: None)
    assert raised.value.code == ErrorCode.invalid_producer_epoch


def test_the_sending_thread_hands_a_failure_to_the_producers_next_call() -> None:
    sender, acc, connection, _ = sender_with(
        [{("t", 0): ErrorCode.none}, {("t", 0): ErrorCode.producer_fenced}]
    )
    thread = SendThread(sender, lambda partitions: None)
    try:
        acc.append(("t", 0), (None, b"a", ()), 1)
        acc.seal(5, 0, everything=True)
        thread.kick()
        thread.wait_idle()
        assert not acc.pending() and len(connection.sent) == 1
        acc.append(("t", 0), (None, b"b", ()), 1)
        acc.seal(5, 0, everything=True)
        thread.kick()
        with pytest.raises(KafkaApiError, match="PRODUCER_FENCED"):
            thread.wait_idle()
        with pytest.raises(KafkaApiError, match="PRODUCER_FENCED"):
            thread.kick()  # it sticks until the producer starts over
        thread.clear()
        acc.reset()
        thread.wait_idle()
    finally:
        thread.close()


def test_the_producer_refuses_calls_its_state_does_not_allow() -> None:
    producer = TwoPhaseProducer("localhost:1", "txn")  # connects only when asked to
    with pytest.raises(TransactionStateError, match="init"):
        producer.begin()
    with pytest.raises(TransactionStateError, match="init"):
        producer.produce("t", b"v")
    with pytest.raises(ConfigError, match="transactional id"):
        TwoPhaseProducer("localhost:1", "")
    with pytest.raises(ConfigError, match="unknown producer setting"):
        TwoPhaseProducer("localhost:1", "txn", **{"enable.idempotence": False})
    producer.close()


class CoordinatorOffering:
    """A transaction coordinator that offers InitProducerId `versions` and answers it."""

    address = "fake:9092"

    def __init__(self, versions: tuple[int, int]) -> None:
        self.versions = {int(ApiKey.INIT_PRODUCER_ID): versions}
        self.sent: list[tuple[int, Any]] = []

    def call_at(self, api_key: int, version: int, request: Any, blobs: Any = ()) -> Any:
        self.sent.append((version, request))
        return types.SimpleNamespace(error_code=0, producer_id=7, producer_epoch=0)


class CoordinatorLink:
    backoff_s = 0.01

    def __init__(self, connection: CoordinatorOffering) -> None:
        self.connection = connection

    def coordinator(self, _transactional_id: str) -> CoordinatorOffering:
        return self.connection

    def coordinator_moved(self, _transactional_id: str) -> None:
        raise AssertionError("the coordinator never moves here")


def test_an_ordinary_producer_inits_at_a_broker_without_two_phase_commit() -> None:
    """Apache Kafka before KIP-939 offers InitProducerId up to v5: an ordinary producer
    inits there at v5, without the two-phase fields; a two-phase one refuses to start."""
    old = CoordinatorOffering((0, 5))
    ordinary = ProducerSettings.of({"two_phase": False, "transaction.timeout.ms": 9000})
    identity = init_producer_id(CoordinatorLink(old), "t", ordinary, keep=False)  # type: ignore[arg-type]
    assert (identity.producer_id, identity.epoch, identity.ongoing_producer_id) == (7, 0, -1)
    ((version, request),) = old.sent
    assert version == 5 and not hasattr(request, "enable2_pc")
    assert request.transaction_timeout.total_seconds() == 9
    with pytest.raises(UnsupportedVersion, match="InitProducerId v0-5"):
        init_producer_id(CoordinatorLink(old), "t", ProducerSettings.of({}), keep=False)  # type: ignore[arg-type]
    new = CoordinatorOffering((0, 6))
    init_producer_id(CoordinatorLink(new), "t", ordinary, keep=False)  # type: ignore[arg-type]
    assert new.sent[0][0] == 6 and new.sent[0][1].enable2_pc is False
