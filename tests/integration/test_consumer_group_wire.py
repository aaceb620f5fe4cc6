"""KIP-848's APIs with raw kio requests: Kafka's error codes for bad input, fenced members,
stale member epochs on commits (a zombie's transactional commit included), and how the
consumer protocol meets the classic one and the group listing APIs."""

from __future__ import annotations

import datetime
import io
import struct
import uuid
from typing import Any

import pytest
from kio.schema.consumer_protocol_subscription.v1 import ConsumerProtocolSubscription
from kio.serial import entity_writer

from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import create_topic
from tests.helpers.wire import RawConnection
from tests.integration.test_core_versions_wire import entity, request

HB = ApiKey.CONSUMER_GROUP_HEARTBEAT
REBALANCE = datetime.timedelta(seconds=30)


def heartbeat(conn: RawConnection, group: str, member: str, epoch: int, **fields: Any) -> Any:
    body: dict[str, Any] = {
        "group_id": group,
        "member_id": member,
        "member_epoch": epoch,
        "topic_partitions": None,
    }
    body.update(fields)
    return conn.call(request(HB, 1, **body))


def join(conn: RawConnection, group: str, member: str, topic: str, **fields: Any) -> Any:
    body: dict[str, Any] = {
        "rebalance_timeout": REBALANCE,
        "subscribed_topic_names": (topic,),
        "topic_partitions": (),
    }
    body.update(fields)
    return heartbeat(conn, group, member, 0, **body)


def owned(topic_id: uuid.UUID, partitions: tuple[int, ...]) -> tuple[Any, ...]:
    return (entity(HB, 1, "TopicPartitions", topic_id=topic_id, partitions=partitions),)


@pytest.fixture
def topic(shared_broker: BrokerProcess) -> str:
    return create_topic(shared_broker.bootstrap, partitions=2)


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"server_assignor": "sticky"}, ErrorCode.unsupported_assignor),
        ({"rebalance_timeout": datetime.timedelta(milliseconds=-1)}, ErrorCode.invalid_request),
        ({"subscribed_topic_names": None}, ErrorCode.invalid_request),
        ({"topic_partitions": None}, ErrorCode.invalid_request),
        ({"member_id": ""}, ErrorCode.invalid_request),
        ({"rack_id": ""}, ErrorCode.invalid_request),
        ({"member_epoch": -3}, ErrorCode.invalid_request),
        ({"subscribed_topic_regex": "t-["}, ErrorCode.invalid_regular_expression),
        ({"subscribed_topic_names": (), "subscribed_topic_regex": ""}, ErrorCode.invalid_request),
    ],
)
def test_bad_heartbeats_get_kafka_s_codes(
    shared_broker: BrokerProcess, topic: str, fields: dict[str, Any], error: ErrorCode
) -> None:
    body: dict[str, Any] = {
        "group_id": f"bad-{uuid.uuid4().hex[:6]}",
        "member_id": "m1",
        "member_epoch": 0,
        "rebalance_timeout": REBALANCE,
        "subscribed_topic_names": (topic,),
        "topic_partitions": (),
    }
    body.update(fields)
    with RawConnection(shared_broker.bootstrap) as conn:
        response = conn.call(request(HB, 1, **body))
    assert response.error_code == error
    assert response.error_message


def test_members_are_fenced_and_commits_need_their_epoch(
    shared_broker: BrokerProcess, topic: str
) -> None:
    group = f"fence-{uuid.uuid4().hex[:6]}"
    with RawConnection(shared_broker.bootstrap) as conn:
        joined = join(conn, group, "m1", topic)
        assert joined.error_code == ErrorCode.none
        epoch = joined.member_epoch
        assert epoch > 0
        (assigned,) = joined.assignment.topic_partitions
        assert sorted(assigned.partitions) == [0, 1]

        ahead = heartbeat(conn, group, "m1", epoch + 5)
        assert ahead.error_code == ErrorCode.fenced_member_epoch
        unknown = heartbeat(conn, group, "nobody", 1)
        assert unknown.error_code == ErrorCode.unknown_member_id
        fine = heartbeat(
            conn, group, "m1", epoch, topic_partitions=owned(assigned.topic_id, (0, 1))
        )
        assert (fine.error_code, fine.member_epoch) == (ErrorCode.none, epoch)

        def commit(member_epoch: int, member: str = "m1") -> int:
            part = entity(
                ApiKey.OFFSET_COMMIT,
                9,
                "OffsetCommitRequestPartition",
                partition_index=0,
                committed_offset=1,
                committed_metadata="",
            )
            response = conn.call(
                request(
                    ApiKey.OFFSET_COMMIT,
                    9,
                    group_id=group,
                    generation_id_or_member_epoch=member_epoch,
                    member_id=member,
                    group_instance_id=None,
                    topics=(
                        entity(
                            ApiKey.OFFSET_COMMIT,
                            9,
                            "OffsetCommitRequestTopic",
                            name=topic,
                            partitions=(part,),
                        ),
                    ),
                )
            )
            return int(response.topics[0].partitions[0].error_code)

        assert commit(epoch) == ErrorCode.none
        assert commit(epoch - 1) == ErrorCode.stale_member_epoch
        assert commit(epoch, "nobody") == ErrorCode.unknown_member_id

        def txn_commit(member_epoch: int) -> int:
            part = entity(
                ApiKey.TXN_OFFSET_COMMIT,
                3,
                "TxnOffsetCommitRequestPartition",
                partition_index=0,
                committed_offset=1,
                committed_metadata="",
            )
            response = conn.call(
                request(
                    ApiKey.TXN_OFFSET_COMMIT,
                    3,
                    transactional_id="zombie",
                    group_id=group,
                    producer_id=12345,
                    producer_epoch=0,
                    generation_id=member_epoch,
                    member_id="m1",
                    group_instance_id=None,
                    topics=(
                        entity(
                            ApiKey.TXN_OFFSET_COMMIT,
                            3,
                            "TxnOffsetCommitRequestTopic",
                            name=topic,
                            partitions=(part,),
                        ),
                    ),
                )
            )
            return int(response.topics[0].partitions[0].error_code)

        # A zombie's transactional commit with an old member epoch is refused before the
        # transaction is even looked at.
        assert txn_commit(epoch - 1) == ErrorCode.stale_member_epoch

        left = heartbeat(conn, group, "m1", -1)
        assert (left.error_code, left.member_epoch) == (ErrorCode.none, -1)
        again = heartbeat(conn, group, "m1", epoch)
        assert again.error_code == ErrorCode.unknown_member_id


def test_describe_list_and_the_classic_protocol(shared_broker: BrokerProcess, topic: str) -> None:
    group = f"mixed-{uuid.uuid4().hex[:6]}"
    with RawConnection(shared_broker.bootstrap) as conn:
        joined = join(conn, group, "m1", topic, server_assignor="range")
        assert joined.error_code == ErrorCode.none

        described = conn.call(
            request(
                ApiKey.CONSUMER_GROUP_DESCRIBE,
                1,
                group_ids=(group, "no-such-group"),
                include_authorized_operations=False,
            )
        )
        mine, missing = described.groups
        assert (mine.error_code, mine.group_state, mine.assignor_name) == (
            ErrorCode.none,
            "Stable",
            "range",
        )
        (member,) = mine.members
        assert (member.member_id, member.member_epoch, member.member_type) == (
            "m1",
            joined.member_epoch,
            1,
        )
        assert member.subscribed_topic_names == (topic,)
        assert missing.error_code == ErrorCode.group_id_not_found

        listed = conn.call(
            request(ApiKey.LIST_GROUPS, 5, states_filter=(), types_filter=("consumer",))
        )
        mine_listed = [g for g in listed.groups if g.group_id == group]
        assert [(g.group_type, g.protocol_type, g.group_state) for g in mine_listed] == [
            ("consumer", "consumer", "Stable")
        ]
        classic = conn.call(
            request(ApiKey.LIST_GROUPS, 5, states_filter=(), types_filter=("classic",))
        )
        assert group not in {g.group_id for g in classic.groups}

        old = conn.call(
            request(ApiKey.DESCRIBE_GROUPS, 6, groups=(group,), include_authorized_operations=False)
        )
        assert old.groups[0].error_code == ErrorCode.group_id_not_found  # not a classic group

        protocols = (
            entity(ApiKey.JOIN_GROUP, 9, "JoinGroupRequestProtocol", name="range", metadata=b""),
        )
        classic_join = conn.call(
            request(
                ApiKey.JOIN_GROUP,
                9,
                group_id=group,
                session_timeout=REBALANCE,
                rebalance_timeout=REBALANCE,
                member_id="",
                group_instance_id=None,
                protocol_type="consumer",
                protocols=protocols,
                reason=None,
            )
        )
        # Its metadata is no ConsumerProtocolSubscription.
        assert classic_join.error_code == ErrorCode.inconsistent_group_protocol

        # A classic member with the "consumer" embedded protocol joins at once, as a classic
        # member of the consumer group (no leader, its member epoch as generation).
        subscribed = (
            entity(
                ApiKey.JOIN_GROUP,
                9,
                "JoinGroupRequestProtocol",
                name="range",
                metadata=subscription((topic,)),
            ),
        )
        classic = conn.call(
            request(
                ApiKey.JOIN_GROUP,
                9,
                group_id=group,
                session_timeout=REBALANCE,
                rebalance_timeout=REBALANCE,
                member_id="",
                group_instance_id="classic-1",
                protocol_type="consumer",
                protocols=subscribed,
                reason=None,
            )
        )
        assert classic.error_code == ErrorCode.none
        assert (classic.leader, classic.members, classic.protocol_name) == ("", (), "range")
        described = conn.call(
            request(
                ApiKey.CONSUMER_GROUP_DESCRIBE,
                1,
                group_ids=(group,),
                include_authorized_operations=False,
            )
        )
        types = {m.member_id: m.member_type for m in described.groups[0].members}
        assert types == {"m1": 1, classic.member_id: 0}


def subscription(topics: tuple[str, ...]) -> bytes:
    body = ConsumerProtocolSubscription(topics=topics, user_data=None, owned_partitions=())
    buf = io.BytesIO()
    buf.write(struct.pack(">h", 1))
    entity_writer(ConsumerProtocolSubscription)(buf, body)
    return buf.getvalue()


def test_version_0_of_both_apis(shared_broker: BrokerProcess, topic: str) -> None:
    """v0: the coordinator makes the member id; ConsumerGroupDescribe v0 has no member type."""
    group = f"v0-{uuid.uuid4().hex[:6]}"
    with RawConnection(shared_broker.bootstrap) as conn:
        joined = conn.call(
            request(
                HB,
                0,
                group_id=group,
                member_id="",
                member_epoch=0,
                rebalance_timeout=REBALANCE,
                subscribed_topic_names=(topic,),
                topic_partitions=(),
            )
        )
        assert joined.error_code == ErrorCode.none
        assert joined.member_id and joined.member_epoch > 0
        described = conn.call(
            request(
                ApiKey.CONSUMER_GROUP_DESCRIBE,
                0,
                group_ids=(group,),
                include_authorized_operations=True,
            )
        )
        (one,) = described.groups
        assert (one.error_code, one.group_state) == (ErrorCode.none, "Stable")
        assert [m.member_id for m in one.members] == [joined.member_id]
        assert one.authorized_operations != -(2**31)
