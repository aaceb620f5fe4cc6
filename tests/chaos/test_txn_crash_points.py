"""Kill -9 the broker at each step of a transaction; after a restart every transaction ends
all-or-nothing, and a committed one is visible.

The steps: after AddPartitionsToTxn was answered (raw requests, so nothing else happens in
between), after the transaction's records were acknowledged, right after EndTxn was answered
(PrepareCommit / PrepareAbort is durable, the markers may or may not be written), and, built
exactly, the states a crash can leave between EndTxn and CompleteCommit: no marker written
yet, some markers written, every marker written but Complete not logged.

There is no failpoint in the broker. The exact states are made from a finished transaction
with the broker killed: its Complete record and some of its markers are cut off the ends of
their segment files, which is what a process killed before writing them leaves on disk
(kill -9 keeps everything already written). Recovery then sees a transaction stuck in a
Prepare state, and must write the missing markers (a second copy of a marker already there
must be harmless) and log the Complete state.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.add_partitions_to_txn.v1 import request as add_partitions_v1
from kio.schema.end_txn.v1 import request as end_txn_v1
from kio.schema.init_producer_id.v1 import request as init_producer_id_v1
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.static.primitive import i16, i32

from onceflow.coordinator.transaction.state import TxnState
from onceflow.records.control import ControlType
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import create_topic
from tests.helpers.txn import (
    TXN_BROKER_OVERRIDES,
    DiskBatch,
    confluent_txn_producer,
    end_offsets,
    fencing_error,
    last_txn_state,
    partition_batches,
    read_records,
    truncate_batch,
    txn_log_records,
    wait_for,
    wait_stable,
)
from tests.helpers.wire import RawConnection

pytestmark = pytest.mark.slow

TXN_TIMEOUT_MS = 3000
OP_TIMEOUT_S = 30.0
INVALID_PRODUCER_EPOCH = 47
PRODUCER_FENCED = 90


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", TXN_BROKER_OVERRIDES)
    b.start()
    try:
        yield b
        if b.running:
            assert b.stop() == 0, f"unclean broker shutdown; its log:\n{b.log_tail()}"
        errors = b.internal_errors()
        assert not errors, "the broker logged internal errors:\n" + "\n---\n".join(errors[:5])
    finally:
        b.kill()


def _txn_id(tag: str) -> str:
    return f"{tag}-{uuid.uuid4().hex[:8]}"


def _topics(broker: BrokerProcess, count: int, partitions: int) -> list[str]:
    return [create_topic(broker.bootstrap, partitions=partitions) for _ in range(count)]


def _commit_values(broker: BrokerProcess, txn_id: str, where: list[tuple[str, int]], tag: str):  # type: ignore[no-untyped-def]
    """A whole committed transaction of `txn_id` (a new instance: fences any older one)
    writing one record per (topic, partition); returns {topic: [values]}."""
    p = confluent_txn_producer(broker.bootstrap, txn_id)
    p.init_transactions(OP_TIMEOUT_S)
    p.begin_transaction()
    out: dict[str, list[bytes]] = {}
    for topic, part in where:
        value = f"{tag}-{topic}-{part}".encode()
        p.produce(topic, value=value, partition=part)
        out.setdefault(topic, []).append(value)
    p.commit_transaction(OP_TIMEOUT_S)
    p.flush(5)
    return out


def _visible(
    broker: BrokerProcess, topics: list[str], partitions: int, readers: tuple[str, ...]
) -> dict[str, list[bytes]]:
    """Wait until no transaction is open on the topics, then the read_committed values per
    topic (checked to be the same for every reader client)."""
    out: dict[str, list[bytes]] = {}
    for topic in topics:
        ends = wait_stable(broker.bootstrap, topic, range(partitions), timeout=60)
        seen = None
        for reader in readers:
            values = [
                r.value or b""
                for r in read_records(reader, broker.bootstrap, topic, ends, committed=True)
            ]
            assert seen is None or sorted(values) == sorted(seen), f"{reader} disagrees: {values}"
            seen = values
        out[topic] = sorted(seen or [])
    return out


def _in_log(broker: BrokerProcess, topic: str, partitions: int) -> list[bytes]:
    ends = wait_stable(broker.bootstrap, topic, range(partitions), timeout=60)
    return [
        r.value or b""
        for r in read_records("confluent", broker.bootstrap, topic, ends, committed=False)
    ]


def _wait_complete(broker: BrokerProcess, txn_id: str, commit: bool) -> None:
    state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT

    def done() -> bool:
        last = last_txn_state(broker.data_dir, txn_id)
        return last is not None and last.state == state

    wait_for(done, 60, f"{state.name} of {txn_id} in __transaction_state")


# ---- raw transactional requests (nothing happens between them that we did not ask) ------


def _raw_init(conn: RawConnection, txn_id: str) -> tuple[int, int]:
    r = conn.call(
        init_producer_id_v1.InitProducerIdRequest(
            transactional_id=TransactionalId(txn_id),
            transaction_timeout=datetime.timedelta(milliseconds=TXN_TIMEOUT_MS),
        )
    )
    assert r.error_code == 0, r
    return int(r.producer_id), int(r.producer_epoch)


def _raw_add_partitions(
    conn: RawConnection, txn_id: str, pid: int, epoch: int, where: list[tuple[str, int]]
) -> None:
    by_topic: dict[str, list[int]] = {}
    for t, p in where:
        by_topic.setdefault(t, []).append(p)
    r = conn.call(
        add_partitions_v1.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=TransactionalId(txn_id),
            v3_and_below_producer_id=ProducerId(pid),
            v3_and_below_producer_epoch=i16(epoch),
            v3_and_below_topics=tuple(
                add_partitions_v1.AddPartitionsToTxnTopic(
                    name=TopicName(t), partitions=tuple(i32(p) for p in ps)
                )
                for t, ps in by_topic.items()
            ),
        )
    )
    errors = [
        int(p.partition_error_code)
        for t in r.results_by_topic_v3_and_below
        for p in t.results_by_partition
    ]
    assert errors and set(errors) == {0}, r


def _raw_end_txn(bootstrap: str, txn_id: str, pid: int, epoch: int, commit: bool) -> int:
    with RawConnection(bootstrap) as conn:
        r = conn.call(
            end_txn_v1.EndTxnRequest(
                transactional_id=TransactionalId(txn_id),
                producer_id=ProducerId(pid),
                producer_epoch=i16(epoch),
                committed=commit,
            )
        )
    return int(r.error_code)


# ---- the zombie-side and the open-transaction steps --------------------------------------


@pytest.mark.parametrize("recovery", ["timeout", "new-instance"])
def test_crash_after_add_partitions(broker: BrokerProcess, recovery: str) -> None:
    """Killed with a transaction Ongoing (partitions added, nothing written). After the
    restart the coordinator keeps timing it and aborts it, or a new instance fences it."""
    topics = _topics(broker, 1, 3)
    where = [(topics[0], p) for p in range(3)]
    base = _commit_values(broker, _txn_id("base"), where, "base")
    txn_id = _txn_id("added")
    with RawConnection(broker.bootstrap) as conn:
        pid, epoch = _raw_init(conn, txn_id)
        _raw_add_partitions(conn, txn_id, pid, epoch, where)
    hw_before = end_offsets(broker.bootstrap, topics[0], range(3), committed=False)
    broker.kill()

    on_disk = last_txn_state(broker.data_dir, txn_id)
    assert on_disk is not None and on_disk.state == TxnState.ONGOING, on_disk
    assert on_disk.partitions == frozenset(where)

    broker.start()
    if recovery == "timeout":
        _wait_complete(broker, txn_id, commit=False)
        after = base
    else:
        after = _commit_values(broker, txn_id, where, "after")
        for t, values in base.items():
            after[t] = values + after[t]
    # Abort markers went to every partition of the transaction.
    hw_after = end_offsets(broker.bootstrap, topics[0], range(3), committed=False)
    assert all(hw_after[p] > hw_before[p] for p in range(3)), (hw_before, hw_after)
    assert _visible(broker, topics, 3, ("confluent", "kafka-python")) == {
        t: sorted(v) for t, v in after.items()
    }
    # The crashed instance is fenced: its epoch is gone.
    error = _raw_end_txn(broker.bootstrap, txn_id, pid, epoch, commit=True)
    assert error in (INVALID_PRODUCER_EPOCH, PRODUCER_FENCED), error


@pytest.mark.parametrize("recovery", ["timeout", "new-instance"])
def test_crash_after_produce(broker: BrokerProcess, recovery: str) -> None:
    """Killed after the transaction's records were acknowledged, before EndTxn: after the
    restart the records stay in the log, aborted, never visible; the old producer is fenced."""
    topics = _topics(broker, 2, 3)
    where = [(t, p) for t in topics for p in range(3)]
    base = _commit_values(broker, _txn_id("base"), where, "base")
    txn_id = _txn_id("produced")
    zombie = confluent_txn_producer(
        broker.bootstrap,
        txn_id,
        **{"transaction.timeout.ms": TXN_TIMEOUT_MS, "message.timeout.ms": TXN_TIMEOUT_MS},
    )
    zombie.init_transactions(OP_TIMEOUT_S)
    zombie.begin_transaction()
    for t, p in where:
        for i in range(3):
            zombie.produce(t, value=f"open-{t}-{p}-{i}".encode(), partition=p)
    assert zombie.flush(OP_TIMEOUT_S) == 0
    broker.kill()

    on_disk = last_txn_state(broker.data_dir, txn_id)
    assert on_disk is not None and on_disk.state == TxnState.ONGOING, on_disk
    for t, p in where:
        values = [v for b in partition_batches(broker.data_dir, t, p) for _, v in b.records]
        assert sum(1 for v in values if v and v.startswith(b"open-")) == 3, (t, p, values)

    broker.start()
    expected = {t: sorted(v) for t, v in base.items()}
    if recovery == "timeout":
        _wait_complete(broker, txn_id, commit=False)
    else:
        after = _commit_values(broker, txn_id, where, "after")
        expected = {t: sorted(base[t] + after[t]) for t in topics}
    assert _visible(broker, topics, 3, ("confluent", "kafka-python")) == expected
    for t in topics:
        assert sum(1 for v in _in_log(broker, t, 3) if v.startswith(b"open-")) == 9

    failure: BaseException | None = None
    try:
        zombie.commit_transaction(OP_TIMEOUT_S)
    except Exception as exc:
        failure = exc
    assert failure is not None and fencing_error(failure), f"zombie commit: {failure!r}"
    assert _visible(broker, topics, 3, ("confluent",)) == expected


# ---- right after EndTxn was answered (the approximation with a real client) --------------


def _classify(data_dir: str, txn_id: str, pid: int, where: list[tuple[str, int]]) -> str:
    """Which step the kill interrupted, from what is on disk."""
    state = last_txn_state(data_dir, txn_id)
    assert state is not None
    marked = 0
    for t, p in where:
        last = partition_batches(data_dir, t, p)[-1]
        if last.marker is not None and last.header.producer_id == pid:
            marked += 1
    if state.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
        # Complete is logged only after every marker is durable.
        assert marked == len(where), f"{state.state.name} logged with {marked} markers"
    return f"{state.state.name}+{marked}/{len(where)} markers"


@pytest.mark.parametrize("ending", ["commit", "abort"])
def test_crash_right_after_end_txn_returns(broker: BrokerProcess, ending: str) -> None:
    """Kill -9 as soon as commit_transaction / abort_transaction returns, on a transaction
    over 32 partitions, a few rounds. Whatever step the kill hit (read from disk before the
    restart), the transaction ends as decided once the broker is back."""
    commit = ending == "commit"
    topics = _topics(broker, 4, 8)
    where = [(t, p) for t in topics for p in range(8)]
    expected: dict[str, list[bytes]] = {t: [] for t in topics}
    hit: list[str] = []
    for round_ in range(3):
        txn_id = _txn_id(f"end-{round_}")
        p = confluent_txn_producer(broker.bootstrap, txn_id)
        p.init_transactions(OP_TIMEOUT_S)
        p.begin_transaction()
        values: dict[str, list[bytes]] = {t: [] for t in topics}
        for t, part in where:
            v = f"r{round_}-{t}-{part}".encode()
            p.produce(t, value=v, partition=part)
            values[t].append(v)
        assert p.flush(OP_TIMEOUT_S) == 0
        # The producer id, for reading markers on disk.
        pid = partition_batches(broker.data_dir, *where[0])[-1].header.producer_id
        if commit:
            p.commit_transaction(OP_TIMEOUT_S)
        else:
            p.abort_transaction(OP_TIMEOUT_S)
        broker.kill()

        hit.append(_classify(broker.data_dir, txn_id, pid, where))
        state = last_txn_state(broker.data_dir, txn_id)
        assert state is not None
        decided = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        assert state.state in (decided, TxnState(decided + 2)), (
            f"EndTxn was answered but {state.state.name} is the newest state on disk"
        )
        p.purge()
        p.flush(0)

        broker.start()
        _wait_complete(broker, txn_id, commit)
        if commit:
            for t in topics:
                expected[t] = sorted(expected[t] + values[t])
        assert _visible(broker, topics, 8, ("confluent",)) == expected, f"round {round_}: {hit}"
    print(f"crash points hit ({ending}): {hit}")
    # A new instance of the last id starts cleanly: the coordinator finished it.
    after = _commit_values(broker, txn_id, where[:2], "after")
    for t, v in after.items():
        expected[t] = sorted(expected[t] + v)
    assert _visible(broker, topics, 8, ("confluent", "aiokafka")) == expected


# ---- the exact states between EndTxn and Complete, built on disk -------------------------


@pytest.mark.parametrize("ending", ["commit", "abort"])
@pytest.mark.parametrize(
    "markers_kept",
    ["none", "some", "all"],
    ids=["after-prepare", "between-markers", "before-complete"],
)
def test_recovery_finishes_a_transaction_stuck_in_prepare(
    broker: BrokerProcess, ending: str, markers_kept: str
) -> None:
    commit = ending == "commit"
    topics = _topics(broker, 2, 3)
    where = sorted((t, p) for t in topics for p in range(3))  # the order markers are written
    base = _commit_values(broker, _txn_id("base"), where, "base")
    txn_id = _txn_id(f"stuck-{ending}")
    p = confluent_txn_producer(broker.bootstrap, txn_id)
    p.init_transactions(OP_TIMEOUT_S)
    p.begin_transaction()
    values: dict[str, list[bytes]] = {t: [] for t in topics}
    for t, part in where:
        for i in range(2):
            v = f"stuck-{t}-{part}-{i}".encode()
            p.produce(t, value=v, partition=part)
            values[t].append(v)
    assert p.flush(OP_TIMEOUT_S) == 0
    p.commit_transaction(OP_TIMEOUT_S) if commit else p.abort_transaction(OP_TIMEOUT_S)
    p.flush(5)
    _wait_complete(broker, txn_id, commit)
    for t in topics:
        wait_stable(broker.bootstrap, t, range(3))
    broker.kill()

    # Undo the steps after the one we crash at: the Complete record, then trailing markers.
    records = txn_log_records(broker.data_dir, txn_id)
    (complete_batch, complete), (_, prepare) = records[-1], records[-2]
    prepared = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    assert complete is not None and prepare is not None
    assert complete.state == TxnState(prepared + 2) and prepare.state == prepared
    assert prepare.partitions == frozenset(where)
    truncate_batch(complete_batch)
    markers: list[DiskBatch] = []
    for t, part in where:
        last = partition_batches(broker.data_dir, t, part)[-1]
        wanted = ControlType.COMMIT if commit else ControlType.ABORT
        assert last.marker is wanted and last.header.producer_id == prepare.producer_id, last
        markers.append(last)
    keep = {"none": 0, "some": len(markers) // 2, "all": len(markers)}[markers_kept]
    for m in markers[keep:]:
        truncate_batch(m)
    stuck = last_txn_state(broker.data_dir, txn_id)
    assert stuck is not None and stuck.state == prepared

    broker.start()
    _wait_complete(broker, txn_id, commit)
    expected = {t: sorted(base[t] + (values[t] if commit else [])) for t in topics}
    assert _visible(broker, topics, 3, ("confluent", "kafka-python", "aiokafka")) == expected
    if not commit:
        for t in topics:
            assert sum(1 for v in _in_log(broker, t, 3) if v.startswith(b"stuck-")) == 6
    # Every partition has its marker now (a second copy where one survived the crash).
    for t, part in where:
        kinds = [
            b.marker
            for b in partition_batches(broker.data_dir, t, part)
            if b.marker is not None and b.header.producer_id == prepare.producer_id
        ]
        assert kinds and set(kinds) == {ControlType.COMMIT if commit else ControlType.ABORT}
    # And the id works again: a new instance bumps the epoch and commits.
    after = _commit_values(broker, txn_id, where[:2], "after")
    for t, v in after.items():
        expected[t] = sorted(expected[t] + v)
    assert _visible(broker, topics, 3, ("confluent",)) == expected
