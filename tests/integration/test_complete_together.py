"""Several prepared transactions completed as one decision (CompleteTransactions, the
participant client's `complete_together`): a read_committed reader sees none of them or all
of them, never some; a commit is all or nothing when one of them is no longer open; a
retry is safe; and a broker killed -9 right after logging the decision finishes it whole.

"What a reader sees" is sampled with raw read_committed Fetch requests naming every
partition at once, so each sample is the broker's state at one moment: the last stable
offset of each partition, which moves past a transaction's records only when its marker
is in the log.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from onceflow.client.errors import KafkaApiError
from onceflow.client.participant import (
    PreparedTransaction,
    StalePreparedTransaction,
    TwoPhaseProducer,
    complete,
)
from onceflow.client.participant_group import (
    colocated_ids,
    complete_together,
    supports_complete_together,
    transaction_log_partition_count,
)
from onceflow.errors import ErrorCode
from onceflow.failpoints import FAILPOINTS_ENV
from onceflow.protocol.coordinator_key import coordinator_partition
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import create_topic
from tests.helpers.wire import RawConnection, fetch_request

TWO_PC = {"transaction.two.phase.commit.enable": "true"}
PARTITIONS = 4
WRITERS = 3
PER_WRITER = 400


def prepare_writers(bootstrap: str, topic: str, name: str) -> list[PreparedTransaction]:
    """WRITERS transactions on ids sharing a coordinator, each writing to every partition."""
    ids = colocated_ids(
        [f"{name}-{i}" for i in range(WRITERS)], transaction_log_partition_count(bootstrap)
    )
    prepared = []
    for writer, txn_id in enumerate(ids):
        with TwoPhaseProducer(bootstrap, txn_id) as producer:
            producer.init()
            producer.begin()
            for i in range(PER_WRITER):
                producer.produce(topic, b"%d-%d" % (writer, i), partition=i % PARTITIONS)
            prepared.append(producer.prepare())
    return prepared


def look(conn: RawConnection, topic: str) -> tuple[int, ...]:
    """Each partition's last stable offset, from one read_committed Fetch of them all."""
    answer = conn.call(
        fetch_request(
            topic,
            {p: (0, -1) for p in range(PARTITIONS)},
            isolation_level=1,
            max_wait_ms=0,
            max_bytes=1,
        )
    )
    parts = sorted(answer.responses[0].partitions, key=lambda p: p.partition_index)
    assert all(p.error_code == ErrorCode.none for p in parts), parts
    return tuple(int(p.last_stable_offset) for p in parts)


def stable_offsets(bootstrap: str, topic: str) -> tuple[int, ...]:
    with RawConnection(bootstrap) as conn:
        return look(conn, topic)


@contextlib.contextmanager
def sampling(bootstrap: str, topic: str) -> Iterator[list[tuple[int, ...]]]:
    """Samples of the stable offsets taken as fast as the broker answers, until the block
    ends."""
    samples: list[tuple[int, ...]] = []
    stop = threading.Event()

    def run() -> None:
        with RawConnection(bootstrap) as conn:
            while not stop.is_set():
                samples.append(look(conn, topic))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        stop.set()
        thread.join(30)


def wait_until_stable_at(bootstrap: str, topic: str, final: tuple[int, ...]) -> None:
    deadline = time.monotonic() + 30
    # At least: markers written again after a crash are harmless and take offsets too.
    while True:
        seen = stable_offsets(bootstrap, topic)
        if all(lso >= end for lso, end in zip(seen, final, strict=True)):
            return
        assert time.monotonic() < deadline, f"stable offsets {seen}, expected {final}"
        time.sleep(0.005)


ROWS = WRITERS * PER_WRITER // PARTITIONS  # per partition, at offsets 0..ROWS-1
FINAL = (ROWS + WRITERS,) * PARTITIONS  # the stable offsets past every marker


def only_none_or_all(samples: list[tuple[int, ...]]) -> None:
    """Rows visible per partition are those below its stable offset (the markers come
    after every row): each sample must show no row or every row."""
    visible = [tuple(min(lso, ROWS) for lso in sample) for sample in samples]
    partial = [s for s in visible if s not in ((0,) * PARTITIONS, (ROWS,) * PARTITIONS)]
    assert not partial, f"a reader saw part of the decision: rows visible {partial[:5]}"


@pytest.mark.broker_overrides(TWO_PC)
def test_a_decision_becomes_visible_all_at_once(broker: BrokerProcess) -> None:
    topic = create_topic(broker.bootstrap, "together-visible", PARTITIONS)
    prepared = prepare_writers(broker.bootstrap, topic, "together-visible")
    assert supports_complete_together(broker.bootstrap, prepared[0].transactional_id)
    assert stable_offsets(broker.bootstrap, topic) == (0,) * PARTITIONS
    with sampling(broker.bootstrap, topic) as samples:
        assert complete_together(prepared, True, broker.bootstrap) == []
        wait_until_stable_at(broker.bootstrap, topic, FINAL)
    assert len(samples) > 1
    only_none_or_all(samples)
    # A retry of a decision already carried out is done, not refused.
    assert complete_together(prepared, True, broker.bootstrap) == []


@pytest.mark.broker_overrides(TWO_PC)
def test_one_by_one_a_reader_sees_part_of_the_decision(broker: BrokerProcess) -> None:
    """The check above can fail: completing the transactions one at a time (what Kafka's
    KIP-939 offers) shows a reader part of the decision, for as long as the rest waits."""
    topic = create_topic(broker.bootstrap, "together-one-by-one", PARTITIONS)
    prepared = prepare_writers(broker.bootstrap, topic, "together-one-by-one")
    complete(prepared[0], True, broker.bootstrap)
    seen = stable_offsets(broker.bootstrap, topic)
    with pytest.raises(AssertionError, match="saw part of the decision"):
        only_none_or_all([seen])
    complete_together(prepared, False, broker.bootstrap)


@pytest.mark.broker_overrides(TWO_PC)
def test_a_commit_is_all_or_nothing_when_one_transaction_is_no_longer_open(
    broker: BrokerProcess,
) -> None:
    topic = create_topic(broker.bootstrap, "together-stale", PARTITIONS)
    prepared = prepare_writers(broker.bootstrap, topic, "together-stale")
    # A new instance of the last id, without keepPreparedTxn, aborts its transaction.
    with TwoPhaseProducer(broker.bootstrap, prepared[-1].transactional_id) as newer:
        newer.init()
    with pytest.raises(StalePreparedTransaction, match=prepared[-1].transactional_id):
        complete_together(prepared, True, broker.bootstrap)
    assert stable_offsets(broker.bootstrap, topic) == (0,) * PARTITIONS  # nothing committed
    # An abort ends the open ones and names the one that was not.
    assert complete_together(prepared, False, broker.bootstrap) == [prepared[-1]]
    ends = stable_offsets(broker.bootstrap, topic)
    assert all(lso > ROWS for lso in ends)  # every row is in an aborted transaction


@pytest.mark.broker_overrides(TWO_PC)
def test_ids_of_different_coordinators_are_refused(broker: BrokerProcess) -> None:
    count = transaction_log_partition_count(broker.bootstrap)
    names = ["apart-a", *(f"apart-{i}" for i in range(100))]
    other = next(
        n
        for n in names[1:]
        if coordinator_partition(n, count) != coordinator_partition(names[0], count)
    )
    members = [PreparedTransaction(n, 1, 0) for n in (names[0], other)]
    with pytest.raises(KafkaApiError) as refused:
        complete_together(members, True, broker.bootstrap)
    assert refused.value.code == ErrorCode.invalid_request


@pytest.mark.parametrize("point", ["txn.after_prepare", "txn.before_complete"])
def test_kill_9_after_the_decision_is_logged_finishes_it_whole(tmp_path: Path, point: str) -> None:
    with BrokerProcess(tmp_path / "data", TWO_PC) as b:
        topic = create_topic(b.bootstrap, "together-crash", PARTITIONS)
        prepared = prepare_writers(b.bootstrap, topic, "together-crash")
        b.stop()
        b.env[FAILPOINTS_ENV] = f"{point}=kill"
        b.start()
        with contextlib.suppress(Exception):
            complete_together(prepared, True, b.bootstrap, delivery_timeout_ms=3000)
        assert b.proc is not None
        assert b.proc.wait(30) == -signal.SIGKILL
        b.env.clear()
        b.restart(kill=True)
        with sampling(b.bootstrap, topic) as samples:
            assert complete_together(prepared, True, b.bootstrap) == []  # done: a retry
            wait_until_stable_at(b.bootstrap, topic, FINAL)
        only_none_or_all(samples)
