"""TxnWriteShareGroupState (Onceflow's key 32002) on the wire: the hop of a transactional
acknowledgement from a share-partition's leader to its share coordinator. The append is
the producer's transactional record, so it is refused unless the state partition is in
the producer's ongoing transaction (KIP-890's check: INVALID_TXN_STATE); a state that is
not a record state is INVALID_REQUEST; the broker keeps serving."""

from __future__ import annotations

import uuid
from typing import Any

from onceflow.client.participant import TwoPhaseProducer
from onceflow.coordinator.share.state import RecordState
from onceflow.errors import ErrorCode
from onceflow.protocol import txn_write_share_state as twss
from onceflow.protocol.api_versions import ApiKey
from tests.helpers.broker import BrokerProcess
from tests.helpers.share import create_topic
from tests.helpers.wire import RawConnection
from tests.integration.test_core_versions_wire import entity, request

KEY = ApiKey.TXN_WRITE_SHARE_GROUP_STATE


def _write(
    conn: RawConnection, producer: TwoPhaseProducer, topic_id: uuid.UUID, state: int
) -> ErrorCode:
    answer = conn.call(
        request(
            KEY,
            0,
            transactional_id=producer.transactional_id,
            producer_id=producer.producer_id,
            producer_epoch=producer.producer_epoch,
            group_id="g",
            topics=(
                twss.StateTopic(
                    topic_id=topic_id,
                    partitions=(
                        twss.StatePartition(
                            partition=0,
                            ranges=(
                                twss.PendingRange(
                                    first_offset=0, last_offset=4, delivery_state=state
                                ),
                            ),
                        ),
                    ),
                ),
            ),
        )
    )
    assert answer.error_code == ErrorCode.none
    return ErrorCode(answer.results[0].partitions[0].error_code)


def _topic_id(conn: RawConnection, topic: str) -> Any:
    md = conn.call(
        request(
            ApiKey.METADATA,
            12,
            topics=None,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    return next(t.topic_id for t in md.topics if t.name == topic)


def test_an_acknowledgement_outside_the_transaction_is_refused(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "jobs")
    create_topic(broker.bootstrap, "results")
    producer = TwoPhaseProducer(broker.bootstrap, "copier", two_phase=False)
    producer.init()
    with RawConnection(broker.bootstrap) as conn:
        topic_id = _topic_id(conn, "jobs")
        initialized = conn.call(
            request(
                ApiKey.INITIALIZE_SHARE_GROUP_STATE,
                0,
                group_id="g",
                topics=(
                    entity(
                        ApiKey.INITIALIZE_SHARE_GROUP_STATE,
                        0,
                        "InitializeStateData",
                        topic_id=topic_id,
                        partitions=(
                            entity(
                                ApiKey.INITIALIZE_SHARE_GROUP_STATE,
                                0,
                                "PartitionData",
                                partition=0,
                                state_epoch=0,
                                start_offset=0,
                            ),
                        ),
                    ),
                ),
            )
        )
        assert initialized.results[0].partitions[0].error_code == ErrorCode.none
        # No transaction open: the state partition cannot be in it.
        refused = _write(conn, producer, topic_id, int(RecordState.ACKNOWLEDGED))
        assert refused is ErrorCode.invalid_txn_state
        # A transaction that added only the output partition: still refused.
        producer.begin()
        producer.produce("results", b"x")
        producer.flush()
        refused = _write(conn, producer, topic_id, int(RecordState.ACKNOWLEDGED))
        assert refused is ErrorCode.invalid_txn_state
        assert _write(conn, producer, topic_id, 3) is ErrorCode.invalid_request
        producer.abort()
        # A refused acknowledgement holds nothing: no record reads as tied to a transaction.
        read = conn.call(
            request(
                ApiKey.READ_SHARE_GROUP_STATE,
                0,
                group_id="g",
                topics=(
                    entity(
                        ApiKey.READ_SHARE_GROUP_STATE,
                        0,
                        "ReadStateData",
                        topic_id=topic_id,
                        partitions=(
                            entity(
                                ApiKey.READ_SHARE_GROUP_STATE,
                                0,
                                "PartitionData",
                                partition=0,
                                leader_epoch=0,
                            ),
                        ),
                    ),
                ),
            )
        )
        state = read.results[0].partitions[0]
        assert state.error_code == ErrorCode.none
        assert [b.delivery_state for b in state.state_batches] == []
        # The broker still serves the connection.
        assert _topic_id(conn, "jobs") == topic_id
    producer.close()
