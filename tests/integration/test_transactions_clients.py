"""Transactions with real clients: what read_committed and read_uncommitted consumers see,
the last stable offset, fencing of a zombie by a new instance, and the timeout abort.

Producers are the transactional producers of confluent-kafka, kafka-python and aiokafka;
readers are consumers of the same three clients. Every step has a deadline; no test
asserts how long anything took.
"""

from __future__ import annotations

import socket
import uuid
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.add_partitions_to_txn.v1 import request as add_partitions_v1
from kio.schema.end_txn.v1 import request as end_txn_v1
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.static.primitive import i16, i32

from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import create_topic
from tests.helpers.txn import (
    CLIENTS,
    Rec,
    TxnProducer,
    end_offsets,
    fencing_error,
    make_txn_producer,
    partition_batches,
    read_records,
    running_without_internal_errors,
    wait_stable,
)
from tests.helpers.txn import producers as producers  # the fixture
from tests.helpers.txn import (
    txn_broker_process_each_version as txn_broker_process_each_version,  # the fixture
)
from tests.helpers.wire import encode_entity, request_frame

# How long a reader keeps polling after reaching its end offset, to show nothing more comes.
LINGER_S = 1.0


@pytest.fixture
def broker(txn_broker_process_each_version: BrokerProcess) -> Iterator[BrokerProcess]:
    """Each test at transaction versions 0 and 2, one broker per module and version."""
    yield from running_without_internal_errors(txn_broker_process_each_version)


def _txn_id(tag: str) -> str:
    return f"{tag}-{uuid.uuid4().hex[:8]}"


def _values(recs: list[Rec]) -> list[bytes | None]:
    return [r.value for r in recs]


def _by_partition(recs: list[Rec]) -> dict[int, list[Rec]]:
    out: dict[int, list[Rec]] = defaultdict(list)
    for r in recs:
        out[r.partition].append(r)
    return out


# ---- 1. committed visible, aborted not, control records never ---------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_read_committed_sees_committed_never_aborted_and_no_control_records(
    broker: BrokerProcess, producers: list[TxnProducer], client: str
) -> None:
    topic = create_topic(broker.bootstrap, partitions=2)
    p = make_txn_producer(client, broker.bootstrap, _txn_id(f"vis-{client}"))
    producers.append(p)
    p.init()

    # Three transactions, each over both partitions: commit, abort, commit.
    sent: dict[str, list[bytes]] = {}
    for name, commit in (("c", True), ("a", False), ("d", True)):
        p.begin()
        values = [f"{name}{i}".encode() for i in range(6)]
        for i, v in enumerate(values):
            p.send(topic, i % 2, v, key=f"k{i}".encode())
        p.flush()  # in the log before the transaction ends, so an abort has data to abort
        p.commit() if commit else p.abort()
        sent[name] = values

    ends = wait_stable(broker.bootstrap, topic, [0, 1])
    markers_per_partition = 3
    committed_values = sent["c"] + sent["d"]
    all_values = committed_values + sent["a"]

    for reader in CLIENTS:
        visible = read_records(reader, broker.bootstrap, topic, ends, committed=True)
        assert sorted(_values(visible)) == sorted(committed_values), (
            f"{reader} read_committed after {client} transactions: {_values(visible)}"
        )
        everything = read_records(reader, broker.bootstrap, topic, ends, committed=False)
        assert sorted(_values(everything)) == sorted(all_values), (
            f"{reader} read_uncommitted after {client} transactions: {_values(everything)}"
        )
        for part, recs in _by_partition(everything).items():
            offsets = [r.offset for r in recs]
            assert offsets == sorted(set(offsets)), f"{reader}: offsets repeat or go back"
            # Control records occupy offsets but are never handed to the application.
            holes = set(range(ends[part])) - set(offsets)
            assert len(holes) == markers_per_partition, (
                f"{reader} partition {part}: offsets {offsets} of {ends[part]}, expected "
                f"{markers_per_partition} marker holes"
            )
        # Within each partition, read_committed keeps the log order.
        for part, recs in _by_partition(visible).items():
            expected = [v for i, v in enumerate(sent["c"]) if i % 2 == part]
            expected += [v for i, v in enumerate(sent["d"]) if i % 2 == part]
            assert _values(recs) == expected, f"{reader} partition {part}"


# ---- 2. an open transaction holds back the LSO, also for others' committed records -------


@pytest.mark.parametrize("ending", ["commit", "abort"])
@pytest.mark.parametrize("client", CLIENTS)
def test_open_transaction_holds_back_read_committed_until_it_ends(
    broker: BrokerProcess, producers: list[TxnProducer], client: str, ending: str
) -> None:
    topic = create_topic(broker.bootstrap, partitions=1)
    before = make_txn_producer("confluent", broker.bootstrap, _txn_id("before"))
    holder = make_txn_producer(client, broker.bootstrap, _txn_id(f"open-{client}"))
    other = make_txn_producer("confluent", broker.bootstrap, _txn_id("other"))
    producers.extend([before, holder, other])
    for p in (before, holder, other):
        p.init()

    before.begin()
    before.send(topic, 0, b"before")
    before.flush()
    before.commit()

    holder.begin()
    holder.send(topic, 0, b"open-1")
    [(_, first_open_offset, _)] = holder.flush()

    other.begin()
    other.send(topic, 0, b"other-1")
    other.send(topic, 0, b"other-2")
    other_offsets = [o for _, o, _ in other.flush()]
    other.commit()
    assert min(other_offsets) > first_open_offset

    holder.send(topic, 0, b"open-2")
    holder.flush()

    # The LSO is the open transaction's first offset while it stays open.
    lso = end_offsets(broker.bootstrap, topic, [0], committed=True)[0]
    assert lso == first_open_offset, f"LSO {lso} with a transaction open at {first_open_offset}"
    hw = end_offsets(broker.bootstrap, topic, [0], committed=False)[0]
    assert hw > lso

    for reader in CLIENTS:
        held = read_records(
            reader, broker.bootstrap, topic, {0: first_open_offset}, committed=True, linger=LINGER_S
        )
        assert _values(held) == [b"before"], (
            f"{reader} read_committed passed the open transaction of {client} at "
            f"{first_open_offset}: {held}"
        )

    holder.commit() if ending == "commit" else holder.abort()
    ends = wait_stable(broker.bootstrap, topic, [0])
    assert ends[0] > first_open_offset
    lso_after = end_offsets(broker.bootstrap, topic, [0], committed=True)[0]
    assert lso_after == ends[0], "the LSO did not move to the high watermark"

    expected = [b"before", b"open-1", b"other-1", b"other-2", b"open-2"]
    if ending == "abort":
        expected = [b"before", b"other-1", b"other-2"]
    for reader in CLIENTS:
        got = read_records(reader, broker.bootstrap, topic, ends, committed=True)
        assert _values(got) == expected, f"{reader} after {client} {ending}: {got}"


# ---- 3. a new instance with the same transactional id fences the old one ----------------


def _with_open_transaction(
    client: str,
    broker: BrokerProcess,
    producers: list[TxnProducer],
    txn_id: str,
    topic: str,
    *partitions: int,
) -> TxnProducer:
    """A `client` producer whose transaction holds b"zombie-<n>" in the n-th of
    `partitions` (from 1), flushed and not ended."""
    zombie = make_txn_producer(client, broker.bootstrap, txn_id)
    producers.append(zombie)
    zombie.init()
    zombie.begin()
    for n, partition in enumerate(partitions, 1):
        zombie.send(topic, partition, b"zombie-%d" % n)
    zombie.flush()
    return zombie


def _write_and_commit_fails_as_fenced(zombie: TxnProducer, topic: str, value: bytes) -> None:
    """The fenced instance writes `value` to partition 0 and commits: that must fail, as
    fenced."""
    failure: BaseException | None = None
    try:
        zombie.send(topic, 0, value)
        zombie.flush()
        zombie.commit()
    except Exception as exc:
        failure = exc
    assert failure is not None, f"the fenced {zombie.client} producer sent and committed"
    assert fencing_error(failure), (
        f"{zombie.client} failed, but not as fenced: {type(failure).__name__}: {failure}"
    )


@pytest.mark.parametrize("client", CLIENTS)
def test_new_instance_fences_the_old_and_aborts_its_open_transaction(
    broker: BrokerProcess, producers: list[TxnProducer], client: str
) -> None:
    topic = create_topic(broker.bootstrap, partitions=2)
    txn_id = _txn_id(f"fence-{client}")
    zombie = _with_open_transaction(client, broker, producers, txn_id, topic, 0, 1)

    # The new instance's InitProducerId aborts the zombie's transaction at a bumped epoch.
    fresh = make_txn_producer("confluent", broker.bootstrap, txn_id)
    producers.append(fresh)
    fresh.init()

    _write_and_commit_fails_as_fenced(zombie, topic, b"zombie-3")

    fresh.begin()
    fresh.send(topic, 0, b"fresh-1")
    fresh.send(topic, 1, b"fresh-2")
    fresh.flush()
    fresh.commit()

    ends = wait_stable(broker.bootstrap, topic, [0, 1])
    for reader in {client, "confluent"}:
        visible = read_records(reader, broker.bootstrap, topic, ends, committed=True)
        assert sorted(_values(visible)) == [b"fresh-1", b"fresh-2"], f"{reader}: {visible}"
    everything = _values(read_records("confluent", broker.bootstrap, topic, ends, committed=False))
    assert b"zombie-1" in everything
    assert b"zombie-2" in everything, "the zombie's open data should be in the log, aborted"
    assert b"zombie-3" not in everything, "a fenced producer's write was appended"


@pytest.mark.parametrize("client", CLIENTS)
def test_a_zombie_writing_into_the_new_instances_open_transaction_cannot_abort_it(
    broker: BrokerProcess, producers: list[TxnProducer], client: str
) -> None:
    """kafka-python answers a fenced write with a KIP-360 epoch bump naming its old epoch;
    Kafka's coordinator aborts the ongoing transaction for it, the new instance's."""
    topic = create_topic(broker.bootstrap, partitions=2)
    txn_id = _txn_id(f"zombie-open-{client}")
    zombie = _with_open_transaction(client, broker, producers, txn_id, topic, 0)

    fresh = make_txn_producer("confluent", broker.bootstrap, txn_id)
    producers.append(fresh)
    fresh.init()
    fresh.begin()
    fresh.send(topic, 0, b"fresh-1")
    fresh.flush()

    _write_and_commit_fails_as_fenced(zombie, topic, b"zombie-2")

    fresh.send(topic, 1, b"fresh-2")
    fresh.flush()
    fresh.commit()
    ends = wait_stable(broker.bootstrap, topic, [0, 1])
    visible = read_records("confluent", broker.bootstrap, topic, ends, committed=True)
    assert sorted(_values(visible)) == [b"fresh-1", b"fresh-2"]


# ---- 4. the coordinator aborts a stalled transaction, fencing its producer --------------


@pytest.mark.parametrize("client", CLIENTS)
def test_stalled_transaction_is_aborted_by_timeout_and_producer_fenced(
    broker: BrokerProcess, producers: list[TxnProducer], client: str
) -> None:
    topic = create_topic(broker.bootstrap, partitions=2)
    stalled = make_txn_producer(
        client, broker.bootstrap, _txn_id(f"stall-{client}"), timeout_ms=3000
    )
    producers.append(stalled)
    stalled.init()
    stalled.begin()
    stalled.send(topic, 0, b"stalled-1")
    stalled.send(topic, 1, b"stalled-2")
    # Where the records went, from the producer itself: a ListOffsets now could already
    # see the abort (3 s pass quickly on a loaded machine).
    written = {partition: offset for partition, offset, _ in stalled.flush()}

    # The producer does nothing more. The coordinator aborts: markers raise the HW and the
    # LSO catches up with it.
    ends = wait_stable(broker.bootstrap, topic, [0, 1], timeout=60)
    assert all(ends[p] > written[p] + 1 for p in ends), (  # the record, then a marker
        f"no abort marker: {ends} vs records at {written}\n{broker.log_tail()}"
    )
    for reader in CLIENTS:
        assert read_records(reader, broker.bootstrap, topic, ends, committed=True) == []
    everything = _values(read_records("confluent", broker.bootstrap, topic, ends, committed=False))
    assert sorted(everything) == [b"stalled-1", b"stalled-2"]  # type: ignore[type-var]

    failure: BaseException | None = None
    try:
        stalled.commit()
    except Exception as exc:
        failure = exc
    assert failure is not None, f"{client} committed a transaction the coordinator aborted"
    assert fencing_error(failure), (
        f"{client} failed, but not as fenced: {type(failure).__name__}: {failure}"
    )
    # Nothing of it ever becomes visible.
    ends = wait_stable(broker.bootstrap, topic, [0, 1])
    assert read_records("confluent", broker.bootstrap, topic, ends, committed=True) == []


# ---- 5. a client that vanishes while its transactional request is being logged ----------


def _send_and_vanish(bootstrap: str, request: Any) -> None:
    """Send one request and close the connection at once, without reading the answer: what
    a producer killed mid-request leaves the broker with."""
    frame = request_frame(
        int(request.__api_key__),
        int(request.__version__),
        1,
        encode_entity(request),
        flexible=bool(request.__flexible__),
    )
    host, _, port = bootstrap.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(frame)


@pytest.mark.parametrize("request_kind", ["end-txn", "add-partitions"])
def test_transaction_is_not_stuck_when_its_client_vanishes_mid_request(
    broker: BrokerProcess, producers: list[TxnProducer], request_kind: str
) -> None:
    """The coordinator logs the state change whether or not the client is still there to
    hear the answer; it must then finish it (markers, Complete), not leave the id pending,
    which would answer CONCURRENT_TRANSACTIONS for ever and hold back the LSO."""
    topic = create_topic(broker.bootstrap, partitions=2)
    txn_id = _txn_id(f"vanish-{request_kind}")
    p = make_txn_producer("confluent", broker.bootstrap, txn_id)
    producers.append(p)
    p.init()
    p.begin()
    p.send(topic, 0, b"kept")
    [(_, offset, _)] = p.flush()
    header = next(
        b.header
        for b in partition_batches(broker.data_dir, topic, 0)
        if b.header.base_offset == offset
    )
    pid, epoch = header.producer_id, header.producer_epoch
    if request_kind == "end-txn":
        request: Any = end_txn_v1.EndTxnRequest(
            transactional_id=TransactionalId(txn_id),
            producer_id=ProducerId(pid),
            producer_epoch=i16(epoch),
            committed=True,
        )
    else:
        request = add_partitions_v1.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=TransactionalId(txn_id),
            v3_and_below_producer_id=ProducerId(pid),
            v3_and_below_producer_epoch=i16(epoch),
            v3_and_below_topics=(
                add_partitions_v1.AddPartitionsToTxnTopic(
                    name=TopicName(topic), partitions=(i32(1),)
                ),
            ),
        )
    _send_and_vanish(broker.bootstrap, request)

    # A new instance starts (fencing whatever is left open), and the partitions settle.
    fresh = make_txn_producer("confluent", broker.bootstrap, txn_id)
    producers.append(fresh)
    fresh.init()
    ends = wait_stable(broker.bootstrap, topic, [0, 1])
    visible = _values(read_records("confluent", broker.bootstrap, topic, ends, committed=True))
    assert visible in ([], [b"kept"]), visible
    fresh.begin()
    fresh.send(topic, 1, b"after")
    fresh.flush()
    fresh.commit()
    ends = wait_stable(broker.bootstrap, topic, [0, 1])
    after = _values(read_records("confluent", broker.bootstrap, topic, ends, committed=True))
    assert sorted(after) == sorted([*visible, b"after"])  # type: ignore[type-var]
