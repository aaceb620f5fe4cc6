"""Transaction version 2 (KIP-890 part 2) over the wire, as a Java 4.x producer speaks it.

No installed client uses it (librdkafka never does), so the requests are raw: the broker
runs with onceflow.transaction.version=2, the producer sends Produce v12 without
AddPartitionsToTxn and TxnOffsetCommit v5 without AddOffsetsToTxn, and EndTxn v5 bumps the
epoch at every end. The log is then read whole (read_uncommitted) to see exactly which
records each marker decided and at which epoch it was written.
"""

from __future__ import annotations

import contextlib
import signal
import struct
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from onceflow.errors import ErrorCode
from onceflow.failpoints import FAILPOINTS_ENV
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, request_type
from onceflow.records.batch import scan_batches
from onceflow.records.record import decode_records
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import consumer
from tests.helpers.txn_wire import Producer, end_txn, init, produce, txn_batch, txn_offset_commit
from tests.helpers.wire import RawConnection, fetch_request
from tests.integration.test_fetch_versions_wire import create_or_describe

TV2 = {"onceflow.transaction.version": "2"}
PRODUCE_V2, END_V2, COMMIT_V2 = 12, 5, 5
RETRIABLE = {ErrorCode.concurrent_transactions, ErrorCode.coordinator_load_in_progress}


@dataclass(frozen=True)
class Marker:
    producer_id: int
    epoch: int
    commit: bool


def log_of(conn: RawConnection, topic: str) -> tuple[list[bytes], list[Marker]]:
    """Partition 0 read whole once every transaction on it is decided (its markers are
    written after EndTxn is answered): the values of committed transactional records, in
    order, and every marker."""
    for _ in range(100):
        committed, markers, undecided = _decided(conn, topic)
        if not undecided:
            return committed, markers
        time.sleep(0.1)
    raise AssertionError(f"undecided transactional records: {undecided}")


def _decided(conn: RawConnection, topic: str) -> tuple[list[bytes], list[Marker], list[bytes]]:
    """A data batch belongs to the first marker of its producer after it."""
    (part,) = conn.call(fetch_request(topic)).responses[0].partitions
    data = bytes(part.records or b"")
    batches, _ = scan_batches(data)
    pending: dict[int, list[bytes]] = {}
    committed: list[bytes] = []
    markers: list[Marker] = []
    for scanned in batches:
        header = scanned.header
        records = decode_records(data[scanned.position : scanned.position + header.size])
        if header.is_control:
            (record,) = records
            commit = struct.unpack(">hh", record.key or b"")[1] == 1
            markers.append(Marker(header.producer_id, header.producer_epoch, commit))
            values = pending.pop(header.producer_id, [])
            if commit:
                committed.extend(values)
        elif header.is_transactional:
            pending.setdefault(header.producer_id, []).extend(r.value or b"" for r in records)
    return committed, markers, [v for values in pending.values() for v in values]


def end(conn: RawConnection, p: Producer, commit: bool) -> Producer:
    """EndTxn v5, retried as a client retries CONCURRENT_TRANSACTIONS (an end of the same
    transaction whose markers are still being written)."""
    answer = end_txn(conn, p, commit, version=END_V2)
    for _ in range(100):
        if answer.error_code not in RETRIABLE:
            break
        time.sleep(0.1)
        answer = end_txn(conn, p, commit, version=END_V2)
    assert answer.error_code == ErrorCode.none, ErrorCode(answer.error_code)
    return Producer(p.transactional_id, int(answer.producer_id), int(answer.producer_epoch))


def write(conn: RawConnection, p: Producer, topic: str, seq: int, value: bytes) -> ErrorCode:
    return ErrorCode(produce(conn, p, topic, txn_batch(p, seq, value), PRODUCE_V2).error_code)


def committed_offset(bootstrap: str, group: str, topic: str) -> int:
    c = consumer(bootstrap, group)
    try:
        (tp,) = c.committed([TopicPartition(topic, 0)], timeout=10)
        return int(tp.offset)
    finally:
        c.close()


@pytest.mark.broker_overrides(TV2)
def test_api_versions_finalize_transaction_version_2(broker: BrokerProcess) -> None:
    with RawConnection(broker.bootstrap) as conn:
        answer = conn.call(
            build(
                request_type(ApiKey.API_VERSIONS, 4),
                client_software_name="raw",
                client_software_version="1",
            )
        )
    finalized = {f.name: f.max_version_level for f in answer.finalized_features}
    supported = {f.name: (f.min_version, f.max_version) for f in answer.supported_features}
    assert finalized == {"group.version": 1, "transaction.version": 2}
    assert supported["transaction.version"] == (0, 2)
    ranges = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    assert ranges[ApiKey.PRODUCE][1] >= PRODUCE_V2 and ranges[ApiKey.END_TXN][1] == END_V2


@pytest.mark.broker_overrides(TV2)
def test_a_transaction_version_2_producer_commits_and_aborts_with_an_epoch_bump_each_time(
    broker: BrokerProcess,
) -> None:
    topic, group = "tv2-data", "tv2-group"
    with RawConnection(broker.bootstrap) as conn:
        create_or_describe(conn, topic)
        p0 = init(conn, "tv2")
        # Transaction 1: no AddPartitionsToTxn, no AddOffsetsToTxn.
        assert write(conn, p0, topic, 0, b"c1") is ErrorCode.none
        assert write(conn, p0, topic, 1, b"c2") is ErrorCode.none
        assert txn_offset_commit(conn, p0, group, topic, 2, version=COMMIT_V2) is ErrorCode.none
        p1 = end(conn, p0, commit=True)
        assert (p1.producer_id, p1.epoch) == (p0.producer_id, p0.epoch + 1)
        # A retry of that EndTxn at the old epoch gets the same answer.
        assert end(conn, p0, commit=True) == p1
        # Transaction 2 at the bumped epoch starts again at sequence 0, and is aborted.
        assert write(conn, p1, topic, 0, b"a1") is ErrorCode.none
        assert txn_offset_commit(conn, p1, group, topic, 99, version=COMMIT_V2) is ErrorCode.none
        p2 = end(conn, p1, commit=False)
        assert p2.epoch == p0.epoch + 2
        # Transaction 3 commits.
        assert write(conn, p2, topic, 0, b"c3") is ErrorCode.none
        p3 = end(conn, p2, commit=True)
        assert p3.epoch == p0.epoch + 3
        committed, markers = log_of(conn, topic)
    assert committed == [b"c1", b"c2", b"c3"]
    pid = p0.producer_id
    assert markers == [
        Marker(pid, p0.epoch + 1, True),
        Marker(pid, p0.epoch + 2, False),
        Marker(pid, p0.epoch + 3, True),
    ]
    assert committed_offset(broker.bootstrap, group, topic) == 2
    # A read_committed consumer sees exactly the committed records.
    c = consumer(broker.bootstrap, **{"isolation.level": "read_committed"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        while len(got) < 3:
            message = c.poll(10)
            assert message is not None, got
            assert message.error() is None, message.error()
            got.append(message.value())
        assert got == [b"c1", b"c2", b"c3"]
    finally:
        c.close()


@pytest.mark.broker_overrides(TV2)
def test_a_zombie_write_at_the_previous_epoch_never_lands(broker: BrokerProcess) -> None:
    """After EndTxn v5 the producer's next transaction runs at the bumped epoch: the old
    epoch's delayed writes are fenced, whether the next transaction has started or not."""
    topic = "tv2-zombie"
    with RawConnection(broker.bootstrap) as conn:
        create_or_describe(conn, topic)
        old = init(conn, "tv2-zombie")
        assert write(conn, old, topic, 0, b"first") is ErrorCode.none
        new = end(conn, old, commit=True)
        # Late, before the next transaction touches the partition.
        late = produce(conn, old, topic, txn_batch(old, 1, b"zombie-1"), PRODUCE_V2)
        assert late.error_code == ErrorCode.invalid_producer_epoch
        # The next transaction adds the partition; a zombie write still cannot join it.
        assert write(conn, new, topic, 0, b"second") is ErrorCode.none
        late = produce(conn, old, topic, txn_batch(old, 2, b"zombie-2"), PRODUCE_V2)
        assert late.error_code == ErrorCode.invalid_producer_epoch
        # Nor through a client at the old versions with the old epoch.
        late = produce(conn, old, topic, txn_batch(old, 2, b"zombie-3"), 11)
        assert late.error_code == ErrorCode.invalid_producer_epoch
        end(conn, new, commit=True)
        committed, _ = log_of(conn, topic)
    assert committed == [b"first", b"second"]


@pytest.mark.broker_overrides(TV2)
def test_an_empty_abort_sent_right_after_a_commit_is_never_fenced(broker: BrokerProcess) -> None:
    """A Java producer that commits and at once aborts its next transaction, which added
    nothing, sends the abort while the commit's markers may still be written (Kafka's
    KAFKA-18464): retriable at worst, never PRODUCER_FENCED."""
    topic = "tv2-empty-abort"
    with RawConnection(broker.bootstrap) as conn:
        create_or_describe(conn, topic)
        p0 = init(conn, "tv2-empty-abort")
        assert write(conn, p0, topic, 0, b"committed") is ErrorCode.none
        committed = end_txn(conn, p0, True, version=END_V2)
        assert committed.error_code == ErrorCode.none
        p1 = Producer(
            p0.transactional_id, int(committed.producer_id), int(committed.producer_epoch)
        )
        first_try = end_txn(conn, p1, False, version=END_V2)
        assert first_try.error_code in {ErrorCode.none, *RETRIABLE}, first_try.error_code
        p2 = end(conn, p1, commit=False) if first_try.error_code != ErrorCode.none else None
        epoch = int(first_try.producer_epoch) if p2 is None else p2.epoch
        assert epoch == p0.epoch + 2
        committed_values, markers = log_of(conn, topic)
    assert committed_values == [b"committed"]
    assert markers == [Marker(p0.producer_id, p0.epoch + 1, True)]  # the empty abort: none


@pytest.mark.parametrize("point", ["txn.after_prepare", "txn.before_complete", None])
@pytest.mark.parametrize("commit", [True, False])
def test_kill_9_while_a_transaction_version_2_transaction_ends(
    tmp_path: Path, point: str | None, commit: bool
) -> None:
    """kill -9 mid-transaction (None) or at a step of ending it; after the restart the
    coordinator finishes from its log alone, with the markers at the bumped epoch, and the
    client's retry of EndTxn at its old epoch gets the bumped one."""
    topic = "tv2-crash"
    with BrokerProcess(tmp_path / "data", TV2) as b:
        with RawConnection(b.bootstrap) as conn:
            create_or_describe(conn, topic)
            p = init(conn, "tv2-crash")
            assert write(conn, p, topic, 0, b"before") is ErrorCode.none
            p = end(conn, p, commit=True)
            assert write(conn, p, topic, 0, b"decided") is ErrorCode.none
        if point is None:
            b.kill()
        else:
            b.stop()  # to arm the fail point, which the first end would have fired
            b.env[FAILPOINTS_ENV] = f"{point}=kill"
            b.start()
            with RawConnection(b.bootstrap) as conn, contextlib.suppress(ConnectionError, OSError):
                # Answered after the Prepare record, so the broker dies before answering
                # (after_prepare) or after (before_complete).
                end_txn(conn, p, commit, version=END_V2)
            assert b.proc is not None
            assert b.proc.wait(30) == -signal.SIGKILL
            b.env.clear()
        b.restart(kill=True)
        with RawConnection(b.bootstrap) as conn:
            after = end(conn, p, commit)
            assert (after.producer_id, after.epoch) == (p.producer_id, p.epoch + 1)
            committed, markers = log_of(conn, topic)
    assert committed == ([b"before", b"decided"] if commit else [b"before"])
    assert markers[-1] == Marker(p.producer_id, p.epoch + 1, commit)
