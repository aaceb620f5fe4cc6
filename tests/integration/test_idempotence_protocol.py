"""Idempotent produce at the protocol level: raw Produce v8 and InitProducerId requests.

Each case sends exactly the batches it means (producer id, epoch, base sequence) on a plain
socket and checks the error code and base offset of the answer, then the partition itself.
The codes are Kafka's: OUT_OF_ORDER_SEQUENCE_NUMBER for a gap or for a batch older than the
five remembered per producer, INVALID_PRODUCER_EPOCH for a fenced epoch, and a retried
duplicate answered with the offset its first append got, nothing appended.
"""

from __future__ import annotations

import datetime
import os
import random
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.types import ProducerId
from kio.static.primitive import i16

from onceflow.records.builder import build_batch
from onceflow.storage.producer_state import (
    MAX_BATCHES_PER_PRODUCER,
    BatchMetadata,
    ProducerEntry,
    encode,
)
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import create_topic
from tests.helpers.proxy import read_partition
from tests.helpers.wire import RawConnection, produce_request

INVALID_RECORD = 87
NONE = 0
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
UNKNOWN_PRODUCER_ID = 59
MAX_SEQUENCE = 2**31 - 1


@pytest.fixture
def conn(shared_broker: BrokerProcess) -> Iterator[RawConnection]:
    with RawConnection(shared_broker.bootstrap) as c:
        yield c
    assert shared_broker.running, shared_broker.log_tail()


def init_producer_id(conn: RawConnection, producer_id: int = -1, epoch: int = -1) -> int:
    """A fresh idempotent producer id (no transactional id); its epoch must be 0."""
    resp = conn.call(
        InitProducerIdRequest(
            transactional_id=None,
            transaction_timeout=datetime.timedelta(seconds=60),
            producer_id=ProducerId(producer_id),
            producer_epoch=i16(epoch),
        )
    )
    assert resp.error_code.value == NONE, resp
    assert int(resp.producer_epoch) == 0
    assert int(resp.producer_id) >= 0
    return int(resp.producer_id)


def batch(pid: int, epoch: int, seq: int, count: int = 1, tag: str = "v") -> bytes:
    """`count` records whose values name their producer, epoch and sequence."""
    return build_batch(
        [
            (None, f"{tag}:{pid}:{epoch}:{(seq + k) % (MAX_SEQUENCE + 1)}".encode(), ())
            for k in range(count)
        ],
        timestamp_ms=int(time.time() * 1000),
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def produce(conn: RawConnection, topic: str, data: bytes) -> tuple[int, int]:
    """(error code, base offset) of one partition-0 batch produced with acks=all."""
    resp = conn.call(produce_request(topic, {0: data}))
    ((part,),) = [t.partition_responses for t in resp.responses]
    return part.error_code.value, int(part.base_offset)


def ok(conn: RawConnection, topic: str, data: bytes) -> int:
    code, offset = produce(conn, topic, data)
    assert code == NONE, f"produce failed with {code}"
    return offset


def leo(bootstrap: str, topic: str) -> int:
    return read_partition(bootstrap, topic, 0).high_watermark


# ---- duplicates ------------------------------------------------------------------------------


def test_retry_of_any_of_the_last_five_batches_gets_its_original_offset(
    shared_broker: BrokerProcess, conn: RawConnection
) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs)
    pid = init_producer_id(conn)
    batches = [batch(pid, 0, 2 * n, count=2) for n in range(7)]
    offsets = [ok(conn, topic, b) for b in batches]
    assert offsets == [2 * n for n in range(7)]
    before = read_partition(bs, topic, 0)
    assert before.high_watermark == 14

    retries = list(range(7 - MAX_BATCHES_PER_PRODUCER, 7)) * 2
    random.Random(3).shuffle(retries)
    for n in retries:
        assert produce(conn, topic, batches[n]) == (NONE, offsets[n]), f"retry of batch {n}"
    after = read_partition(bs, topic, 0)
    assert after == before  # nothing appended

    # The producer carries on where it was.
    assert ok(conn, topic, batch(pid, 0, 14)) == 14


def test_retry_older_than_the_last_five_batches_is_out_of_order(
    shared_broker: BrokerProcess, conn: RawConnection
) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs)
    pid = init_producer_id(conn)
    batches = [batch(pid, 0, n) for n in range(MAX_BATCHES_PER_PRODUCER + 2)]
    for b in batches:
        ok(conn, topic, b)
    for old in batches[:2]:
        assert produce(conn, topic, old)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert leo(bs, topic) == len(batches)


def test_retry_in_one_connection_pipeline_keeps_order(
    shared_broker: BrokerProcess, conn: RawConnection
) -> None:
    """Five requests in flight, then the same five again: answered in order, appended once."""
    bs = shared_broker.bootstrap
    topic = create_topic(bs)
    pid = init_producer_id(conn)
    batches = [batch(pid, 0, 3 * n, count=3) for n in range(5)]
    for _ in range(2):
        correlations = [conn.send_request(produce_request(topic, {0: b})) for b in batches]
        for n, corr in enumerate(correlations):
            resp = conn.read_response(0, 8, corr)
            (part,) = resp.responses[0].partition_responses
            assert (part.error_code.value, int(part.base_offset)) == (NONE, 3 * n)
    contents = read_partition(bs, topic, 0)
    assert contents.high_watermark == 15
    assert [r.sequence for r in contents.records] == list(range(15))


def test_an_answer_ready_at_once_waits_behind_one_waiting_for_the_disk(
    shared_broker: BrokerProcess, conn: RawConnection
) -> None:
    """Produce requests (answered once fsynced) and ApiVersions (answered at once, by the
    request processor itself when nothing is ahead of it) in one pipeline: every answer
    leaves in request order, the quick ones never overtaking a produce still waiting."""
    topic = create_topic(shared_broker.bootstrap)
    pid = init_producer_id(conn)
    sent: list[tuple[int, int]] = []  # (api key, correlation id)
    for n in range(4):
        sent.append((0, conn.send_request(produce_request(topic, {0: batch(pid, 0, n)}))))
        versions = ApiVersionsRequest(
            client_software_name="order-test", client_software_version="1"
        )
        sent.append((18, conn.send_request(versions)))
    for api_key, corr in sent:  # read_response checks the correlation id of each
        if api_key == 0:
            resp = conn.read_response(0, 8, corr)
            (part,) = resp.responses[0].partition_responses
            assert part.error_code.value == NONE
        else:
            assert conn.read_response(18, 3, corr).error_code.value == NONE


# ---- rejected batches ------------------------------------------------------------------------


def test_sequence_gap_is_out_of_order(shared_broker: BrokerProcess, conn: RawConnection) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs)
    pid = init_producer_id(conn)
    ok(conn, topic, batch(pid, 0, 0, count=2))
    assert produce(conn, topic, batch(pid, 0, 3))[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert leo(bs, topic) == 2
    assert ok(conn, topic, batch(pid, 0, 2)) == 2  # the expected one still goes in


def test_stale_epoch_is_fenced(shared_broker: BrokerProcess, conn: RawConnection) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs)
    pid = init_producer_id(conn)
    first = batch(pid, 0, 0)
    ok(conn, topic, first)
    assert ok(conn, topic, batch(pid, 1, 0)) == 1  # a new epoch starts at 0
    assert produce(conn, topic, batch(pid, 0, 1))[0] == INVALID_PRODUCER_EPOCH
    # A retry of the old epoch's batch is no duplicate any more: fenced as well.
    assert produce(conn, topic, first)[0] == INVALID_PRODUCER_EPOCH
    assert leo(bs, topic) == 2
    assert ok(conn, topic, batch(pid, 1, 1)) == 2


def test_new_epoch_must_start_at_sequence_zero(
    shared_broker: BrokerProcess, conn: RawConnection
) -> None:
    bs = shared_broker.bootstrap
    topic = create_topic(bs)
    pid = init_producer_id(conn)
    ok(conn, topic, batch(pid, 0, 0))
    assert produce(conn, topic, batch(pid, 1, 5))[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
    # Not even the sequence that would follow on in the old epoch.
    assert produce(conn, topic, batch(pid, 1, 1))[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
    assert leo(bs, topic) == 1
    assert ok(conn, topic, batch(pid, 0, 1)) == 1  # the old epoch is still current


def test_unknown_producer_with_nonzero_sequence(
    shared_broker: BrokerProcess, conn: RawConnection
) -> None:
    """A producer this partition has no state for, sending sequence 5, gets
    UNKNOWN_PRODUCER_ID (as specified by the issue; see the report on Kafka 2.5+)."""
    bs = shared_broker.bootstrap
    topic = create_topic(bs)
    pid = init_producer_id(conn)
    assert produce(conn, topic, batch(pid, 0, 5))[0] == UNKNOWN_PRODUCER_ID
    assert leo(bs, topic) == 0
    assert ok(conn, topic, batch(pid, 0, 0)) == 0


# ---- producer ids ----------------------------------------------------------------------------


def test_init_producer_id_gives_a_new_id_each_time(conn: RawConnection) -> None:
    a = init_producer_id(conn)
    b = init_producer_id(conn)
    # KIP-360: a client may send its current id and epoch; an idempotent one gets a new id.
    c = init_producer_id(conn, producer_id=b, epoch=0)
    assert len({a, b, c}) == 3


def test_producer_ids_after_restarts_are_larger_than_any_before(broker: BrokerProcess) -> None:
    seen: list[int] = []
    for restart in ("clean", "kill", "clean"):
        with RawConnection(broker.bootstrap) as c:
            ids = [init_producer_id(c) for _ in range(3)]
        assert len(set(ids)) == 3
        assert not seen or min(ids) > max(seen), f"after a {restart} restart: {ids} vs {seen}"
        seen += ids
        broker.restart(kill=restart == "kill")
    with RawConnection(broker.bootstrap) as c:
        assert init_producer_id(c) > max(seen)


# ---- state across restarts -------------------------------------------------------------------


def _snapshots(broker: BrokerProcess, topic: str) -> list[Path]:
    return sorted((Path(broker.data_dir) / f"{topic}-0").glob("*.snapshot"))


@pytest.mark.parametrize("how", ["clean", "kill", "clean-without-snapshots"])
def test_duplicates_are_recognised_after_a_restart(broker: BrokerProcess, how: str) -> None:
    """Producer state comes back from the snapshot (clean stop), from replaying the log
    (kill -9), or from a full replay when the snapshots are gone."""
    bs = broker.bootstrap
    topic = create_topic(bs)
    with RawConnection(bs) as c:
        pid = init_producer_id(c)
        batches = [batch(pid, 0, 2 * n, count=2) for n in range(6)]
        offsets = [ok(c, topic, b) for b in batches]
    before = read_partition(bs, topic, 0)

    if how == "kill":
        broker.kill()
    else:
        assert broker.stop() == 0
        assert _snapshots(broker, topic), "no snapshot written at clean shutdown"
        if how == "clean-without-snapshots":
            for path in _snapshots(broker, topic):
                os.remove(path)
    broker.start()

    with RawConnection(bs) as c:
        for n in range(1, 6):  # the last five
            assert produce(c, topic, batches[n]) == (NONE, offsets[n]), f"retry of batch {n}"
        assert produce(c, topic, batches[0])[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
        assert produce(c, topic, batch(pid, 0, 13))[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
        assert read_partition(bs, topic, 0) == before
        assert ok(c, topic, batch(pid, 0, 12)) == 12


def test_sequence_wraps_after_max_int(broker: BrokerProcess) -> None:
    """After 2^31 - 1 comes 0, between batches and inside one.

    Reaching the wrap over the wire takes 2^31 records, so the producer state near it is
    planted in the snapshot the broker wrote at a clean shutdown (snapshots are derived
    data the broker trusts when they are intact).
    """
    bs = broker.bootstrap
    topic = create_topic(bs)
    with RawConnection(bs) as c:
        inside, between = init_producer_id(c), init_producer_id(c)
        ok(c, topic, batch(inside, 0, 0))
    assert broker.stop() == 0
    snapshots = _snapshots(broker, topic)
    assert [p.name for p in snapshots][-1] == f"{1:020d}.snapshot"
    now = int(time.time() * 1000)

    def entry(pid: int, last_seq: int) -> ProducerEntry:
        return ProducerEntry(
            pid,
            0,
            deque([BatchMetadata(last_seq, last_seq, 0, 0, now)], maxlen=MAX_BATCHES_PER_PRODUCER),
            last_timestamp=now,
        )

    planted = {inside: entry(inside, MAX_SEQUENCE - 2), between: entry(between, MAX_SEQUENCE - 1)}
    snapshots[-1].write_bytes(encode(planted))
    broker.start()

    with RawConnection(bs) as c:
        wrapping = batch(inside, 0, MAX_SEQUENCE - 1, count=3)  # MAX-1, MAX, 0
        assert ok(c, topic, wrapping) == 1
        assert ok(c, topic, batch(inside, 0, 1)) == 4
        assert produce(c, topic, wrapping) == (NONE, 1)  # still a recognised duplicate
        assert ok(c, topic, batch(between, 0, MAX_SEQUENCE)) == 5
        assert ok(c, topic, batch(between, 0, 0)) == 6
        assert produce(c, topic, batch(between, 0, 2))[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
    contents = read_partition(bs, topic, 0)
    assert [(r.producer_id, r.sequence) for r in contents.records[1:]] == [
        (inside, MAX_SEQUENCE - 1),
        (inside, MAX_SEQUENCE),
        (inside, 0),
        (inside, 1),
        (between, MAX_SEQUENCE),
        (between, 0),
    ]


def test_retry_and_new_batch_in_one_partition_of_a_request(
    shared_broker: BrokerProcess, conn: RawConnection
) -> None:
    """A partition's records holding a retried batch and then a new one. Kafka refuses any
    Produce v3+ partition with more than one batch (INVALID_RECORD, in
    ProduceRequest.validateRecords); whatever the broker does, it must not answer success
    while leaving the new batch out."""
    bs = shared_broker.bootstrap
    topic = create_topic(bs)
    pid = init_producer_id(conn)
    first = batch(pid, 0, 0, count=2)
    ok(conn, topic, first)
    code, _ = produce(conn, topic, first + batch(pid, 0, 2, count=2))
    sequences = [r.sequence for r in read_partition(bs, topic, 0).records]
    assert code == INVALID_RECORD, code
    assert sequences == [0, 1], sequences
