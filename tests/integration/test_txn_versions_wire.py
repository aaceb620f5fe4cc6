"""The transaction APIs at Kafka 4.1's KIP-890 part 1 versions, over the wire.

Clients at Produce v11 and TxnOffsetCommit v4 understand TRANSACTION_ABORTABLE (120): a
transactional write to a partition outside the producer's ongoing transaction is answered
with it, older versions still with INVALID_TRANSACTION_STATE (Kafka's AddPartitionsToTxnManager).
InitProducerId v5, AddPartitionsToTxn v5, AddOffsetsToTxn v4 and EndTxn v4 carry a whole
transaction as the older versions do.
"""

from __future__ import annotations

import pytest
from kio.index import load_payload_module
from kio.static.constants import EntityType

from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, request_type
from tests.helpers.broker import BrokerProcess
from tests.helpers.txn import wait_for
from tests.helpers.txn_wire import (
    add_offsets,
    add_partitions,
    end_txn,
    init,
    produce,
    txn_batch,
    txn_offset_commit,
)
from tests.helpers.wire import RawConnection
from tests.integration.test_fetch_versions_wire import create_or_describe

OUTSIDE = {
    3: ErrorCode.invalid_txn_state,
    10: ErrorCode.invalid_txn_state,
    11: ErrorCode.transaction_abortable,
}


@pytest.mark.parametrize("version", sorted(OUTSIDE))
def test_a_write_outside_the_transaction_is_answered_as_its_version_understands(
    shared_broker: BrokerProcess, version: int
) -> None:
    added, other = f"outside-added-{version}", f"outside-other-{version}"
    with RawConnection(shared_broker.bootstrap) as conn:
        create_or_describe(conn, added)
        create_or_describe(conn, other)
        old = init(conn, f"outside-{version}")
        p = init(conn, f"outside-{version}")  # a new instance: the epoch is bumped
        assert p.epoch == old.epoch + 1
        assert add_partitions(conn, p, added, (0,)) == {ErrorCode.none}
        ok = produce(conn, p, added, txn_batch(p, 0, b"in"), version)
        assert ok.error_code == ErrorCode.none
        refused = produce(conn, p, other, txn_batch(p, 0, b"out"), version)
        assert refused.error_code == OUTSIDE[version]
        # A stale epoch is INVALID_PRODUCER_EPOCH at every version (PRODUCER_FENCED mapped).
        stale = produce(conn, p, added, txn_batch(p, 1, b"old", epoch=old.epoch), version)
        assert stale.error_code == ErrorCode.invalid_producer_epoch
        assert end_txn(conn, p, commit=False).error_code == ErrorCode.none


@pytest.mark.parametrize(
    ("version", "expected"),
    [(3, ErrorCode.invalid_txn_state), (4, ErrorCode.transaction_abortable)],
)
def test_a_txn_offset_commit_without_add_offsets_is_answered_as_its_version_understands(
    shared_broker: BrokerProcess, version: int, expected: ErrorCode
) -> None:
    topic = f"txn-commit-outside-{version}"
    with RawConnection(shared_broker.bootstrap) as conn:
        create_or_describe(conn, topic)
        p = init(conn, f"txn-commit-outside-{version}")
        assert add_partitions(conn, p, topic, (0,)) == {ErrorCode.none}
        code = txn_offset_commit(conn, p, f"group-outside-{version}", topic, 5, version)
        assert code is expected
        assert end_txn(conn, p, commit=False).error_code == ErrorCode.none


def test_a_whole_transaction_at_the_newest_part_1_versions(shared_broker: BrokerProcess) -> None:
    topic, group = "txn-part1-versions", "txn-part1-group"
    with RawConnection(shared_broker.bootstrap) as conn:
        create_or_describe(conn, topic)
        p = init(conn, "txn-part1", version=5)
        assert add_partitions(conn, p, topic, (0,), version=3) == {ErrorCode.none}
        assert produce(conn, p, topic, txn_batch(p, 0, b"a"), 11).error_code == ErrorCode.none
        assert add_offsets(conn, p, group, version=4) is ErrorCode.none
        assert txn_offset_commit(conn, p, group, topic, 1, version=4) is ErrorCode.none
        assert end_txn(conn, p, commit=True, version=4).error_code == ErrorCode.none
        # The coordinator's verify-only answer between brokers, at v5: the committed
        # transaction holds no partition any more. Until its markers are written it is
        # CONCURRENT_TRANSACTIONS, as Kafka answers a transaction in PrepareCommit.
        answers: list[ErrorCode] = []

        def verified() -> bool:
            answers.append(verify_only(conn, p.transactional_id, p.producer_id, p.epoch, topic))
            return answers[-1] is not ErrorCode.concurrent_transactions

        wait_for(verified, what="the commit's markers")
        assert answers[-1] is ErrorCode.transaction_abortable
        assert set(answers[:-1]) <= {ErrorCode.concurrent_transactions}
        p2 = init(conn, "txn-part1", version=5)
        assert p2.epoch == p.epoch + 1
        assert add_partitions(conn, p2, topic, (0,)) == {ErrorCode.none}
        assert verify_only(conn, p2.transactional_id, p2.producer_id, p2.epoch, topic) is (
            ErrorCode.none
        )
        assert verify_only(conn, p2.transactional_id, p2.producer_id, p.epoch, topic) is (
            ErrorCode.producer_fenced
        )
        assert end_txn(conn, p2, commit=False, version=4).error_code == ErrorCode.none


def verify_only(conn: RawConnection, txn_id: str, pid: int, epoch: int, topic: str) -> ErrorCode:
    """AddPartitionsToTxn v5 verify-only, as a broker sends it; partition 0's code."""
    module = load_payload_module(ApiKey.ADD_PARTITIONS_TO_TXN, 5, EntityType.request)
    answer = conn.call(
        build(
            request_type(ApiKey.ADD_PARTITIONS_TO_TXN, 5),
            transactions=(
                build(
                    module.AddPartitionsToTxnTransaction,
                    transactional_id=txn_id,
                    producer_id=pid,
                    producer_epoch=epoch,
                    verify_only=True,
                    topics=(build(module.AddPartitionsToTxnTopic, name=topic, partitions=(0,)),),
                ),
            ),
        )
    )
    assert answer.error_code == ErrorCode.none
    (result,) = answer.results_by_transaction
    (part,) = result.topic_results[0].results_by_partition
    return ErrorCode(part.partition_error_code)
