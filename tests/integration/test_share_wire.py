"""Share-group requests on the wire, bad ones included: each gets Kafka's error code and the
broker keeps serving (empty ids, acknowledgements on an opening fetch, unknown sessions and
epochs, acknowledgement types and ranges that are not valid, records not held)."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from tests.helpers.broker import BrokerProcess
from tests.helpers.share import create_topic, produce, set_group_configs
from tests.helpers.wire import RawConnection
from tests.integration.test_core_versions_wire import entity, request

HB, FETCH, ACK = ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE


def _heartbeat(conn: RawConnection, group: str, member: str, epoch: int, topics: Any) -> Any:
    return conn.call(
        request(
            HB,
            1,
            group_id=group,
            member_id=member,
            member_epoch=epoch,
            subscribed_topic_names=topics,
        )
    )


def _fetch(
    conn: RawConnection,
    group: str,
    member: str,
    epoch: int,
    topic_id: Any,
    acks: tuple[Any, ...] = (),
    wait_ms: int = 0,
    renew: bool = False,
) -> Any:
    partition = entity(FETCH, 2, "FetchPartition", partition_index=0, acknowledgement_batches=acks)
    return conn.call(
        request(
            FETCH,
            2,
            group_id=group,
            member_id=member,
            share_session_epoch=epoch,
            max_wait=datetime.timedelta(milliseconds=wait_ms),
            min_bytes=1,
            max_bytes=1 << 20,
            max_records=100,
            batch_size=100,
            topics=(entity(FETCH, 2, "FetchTopic", topic_id=topic_id, partitions=(partition,)),),
            forgotten_topics_data=(),
            is_renew_ack=renew,
        )
    )


def _batch(first: int, last: int, *types: int) -> Any:
    return entity(
        FETCH,
        2,
        "AcknowledgementBatch",
        first_offset=first,
        last_offset=last,
        acknowledge_types=types,
    )


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


def test_bad_share_requests_get_kafka_s_codes(broker: BrokerProcess) -> None:
    topic, group = f"t-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic)
    set_group_configs(broker.bootstrap, group, {"share.auto.offset.reset": "earliest"})
    produce(broker.bootstrap, topic, [b"a", b"b", b"c"])
    with RawConnection(broker.bootstrap) as conn:
        tid = _topic_id(conn, topic)
        assert _heartbeat(conn, group, "", 0, (topic,)).error_code == ErrorCode.invalid_request
        assert _heartbeat(conn, group, "m", 0, None).error_code == ErrorCode.invalid_request
        assert _heartbeat(conn, group, "m", 5, None).error_code == ErrorCode.unknown_member_id
        joined = _heartbeat(conn, group, "m", 0, (topic,))
        assert joined.error_code == 0 and joined.member_epoch > 0
        assert [t.topic_id for t in joined.assignment.topic_partitions] == [tid]
        # Acknowledgements on the opening fetch, or a session nobody opened.
        opening = _fetch(conn, group, "m", 0, tid, acks=(_batch(0, 0, 1),))
        assert opening.error_code == ErrorCode.invalid_request
        assert _fetch(conn, group, "m", 3, tid).error_code == ErrorCode.share_session_not_found
        got = _fetch(conn, group, "m", 0, tid, wait_ms=2000)
        part = got.responses[0].partitions[0]
        assert [
            (a.first_offset, a.last_offset, a.delivery_count) for a in part.acquired_records
        ] == [(0, 2, 1)]
        assert _fetch(conn, group, "m", 5, tid).error_code == ErrorCode.invalid_share_session_epoch
        # Bad acknowledgements: wrong type count, unknown type, beyond what was acquired.
        for bad, code in (
            (_batch(0, 2, 1, 1), ErrorCode.invalid_request),
            (_batch(0, 0, 9), ErrorCode.invalid_request),
            (_batch(0, 7, 1), ErrorCode.invalid_record_state),
        ):
            answer = _fetch(conn, group, "m", 1, tid, acks=(bad,))
            assert answer.error_code == 0
            assert answer.responses[0].partitions[0].acknowledge_error_code == code
            conn.call(
                request(
                    FETCH,
                    2,
                    group_id=group,
                    member_id="m",
                    share_session_epoch=-1,
                    max_wait=datetime.timedelta(0),
                    min_bytes=1,
                    max_bytes=1,
                    max_records=1,
                    batch_size=1,
                    topics=(),
                    forgotten_topics_data=(),
                )
            )
            _fetch(conn, group, "m", 0, tid)  # a new session for the next case
        # Another member cannot acknowledge what "m" holds.
        _heartbeat(conn, group, "n", 0, (topic,))
        _fetch(conn, group, "n", 0, tid)
        ack = conn.call(
            request(
                ACK,
                2,
                group_id=group,
                member_id="n",
                share_session_epoch=1,
                topics=(
                    entity(
                        ACK,
                        2,
                        "AcknowledgeTopic",
                        topic_id=tid,
                        partitions=(
                            entity(
                                ACK,
                                2,
                                "AcknowledgePartition",
                                partition_index=0,
                                acknowledgement_batches=(
                                    entity(
                                        ACK,
                                        2,
                                        "AcknowledgementBatch",
                                        first_offset=0,
                                        last_offset=2,
                                        acknowledge_types=(1,),
                                    ),
                                ),
                            ),
                        ),
                    ),
                ),
            )
        )
        assert ack.responses[0].partitions[0].error_code == ErrorCode.invalid_record_state
        # KIP-1222: the holder renews its lock; a renewal fetches nothing.
        renewed = _fetch(conn, group, "m", 1, tid, acks=(_batch(0, 2, 4),), renew=True)
        part = renewed.responses[0].partitions[0]
        assert part.acknowledge_error_code == 0 and not part.acquired_records
        # The holder accepts; the broker served all of the above on one connection.
        done = _fetch(conn, group, "m", 2, tid, acks=(_batch(0, 2, 1),))
        assert done.responses[0].partitions[0].acknowledge_error_code == 0
