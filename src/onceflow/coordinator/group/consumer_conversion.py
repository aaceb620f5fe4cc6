"""Groups with members changing protocol (Kafka's online upgrade and downgrade).

As Kafka's convertToConsumerGroup: when the first KIP-848 member joins a classic group
whose members use the "consumer" embedded protocol, and `group.consumer.migration.policy`
allows upgrades, every classic member becomes a classic member of a consumer group at the
classic generation as its epoch, Stable, keeping its last assignment as its partitions and
target. The joining member's subscription then bumps the group epoch, so the classic
members are told to rejoin (REBALANCE_IN_PROGRESS) and move through consumer_classic.py.
Parked JoinGroup and SyncGroup requests are answered REBALANCE_IN_PROGRESS: they rejoin.

As Kafka's convertToClassicGroup: when the last KIP-848 member leaves (or is fenced) and
only classic members remain, and the policy allows downgrades, the group becomes a Stable
classic group at the group epoch as generation, each member's target assignment as its
classic assignment (encoded in its subscription's version); the coordinator then starts a
rebalance, so the members rejoin and the classic leader assigns again.
"""

from __future__ import annotations

from onceflow.coordinator.group.config import GroupCoordinatorConfig
from onceflow.coordinator.group.consumer_embedded import (
    MalformedProtocol,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    subscription_version,
)
from onceflow.coordinator.group.consumer_group import (
    ClassicMetadata,
    ConsumerGroup,
    ConsumerMember,
)
from onceflow.coordinator.group.consumer_records import tombstones
from onceflow.coordinator.group.metadata import (
    CONSUMER_PROTOCOL_TYPE,
    GroupMetadata,
    MemberMetadata,
)
from onceflow.coordinator.group.offsets import encode_group_key, encode_group_value
from onceflow.coordinator.group.reconcile import MemberState, Reconciliation
from onceflow.coordinator.group.results import JoinResult, SyncResult
from onceflow.coordinator.group.state import GroupState
from onceflow.errors import ErrorCode


def can_upgrade(group: GroupMetadata, config: GroupCoordinatorConfig) -> bool:
    """Kafka's validateOnlineUpgrade, plus a chosen protocol to read the members by."""
    return (
        config.upgrade_allowed
        and group.protocol_type == CONSUMER_PROTOCOL_TYPE
        and group.protocol is not None
        and 0 < len(group.members) <= config.consumer_max_size
    )


def to_consumer_group(group: GroupMetadata, now_ms: int, monotonic_ms: int) -> ConsumerGroup | None:
    """The consumer group the classic members make; None (nothing changed) when one's
    embedded protocol does not parse."""
    assert group.protocol is not None  # can_upgrade checked it
    generation = group.generation_id
    consumer = ConsumerGroup()
    try:
        for classic in group.members.values():
            subscription = decode_subscription(classic.metadata(group.protocol))
            assigned = decode_assignment(classic.assignment)
            member = ConsumerMember(
                classic.member_id,
                classic.client_id,
                classic.client_host,
                instance_id=classic.group_instance_id,
                rack_id=subscription.rack_id,
                rebalance_timeout_ms=classic.rebalance_timeout_ms,
                subscribed=tuple(sorted(set(subscription.topics))),
                recon=Reconciliation(MemberState.STABLE, generation, generation, assigned),
                session_deadline_ms=monotonic_ms + classic.session_timeout_ms,
                classic=ClassicMetadata(classic.session_timeout_ms, classic.protocols),
            )
            consumer.restore(member, assigned)
    except MalformedProtocol:
        return None
    consumer.group_epoch = consumer.assignment_epoch = generation
    consumer.group_changed = consumer.replaces_classic = True
    consumer.changed_members = set(consumer.members)
    _end_classic(group, now_ms)
    return consumer


def _end_classic(group: GroupMetadata, now_ms: int) -> None:
    """Answer what is parked and leave the classic side empty (offsets stay)."""
    for member in group.members.values():
        member.complete_join(JoinResult.failed(member.member_id, ErrorCode.rebalance_in_progress))
        member.complete_sync(SyncResult(ErrorCode.rebalance_in_progress))
    group.members.clear()
    group.static_members.clear()
    group.pending_members.clear()
    group.pending_sync.clear()
    group.leader_id = group.protocol = group.protocol_type = None
    group.join_deadline_ms = group.sync_deadline_ms = None
    group.initial_delay = None
    group.subscribed_topics = None
    group.transition_to(GroupState.EMPTY, now_ms)


def can_downgrade(consumer: ConsumerGroup, config: GroupCoordinatorConfig) -> bool:
    """Kafka's validateOnlineDowngrade*, once the leaving member is gone."""
    return (
        config.downgrade_allowed
        and 0 < len(consumer.members) <= config.group_max_size
        and all(m.classic is not None for m in consumer.members.values())
    )


def to_classic_group(group: GroupMetadata, now_ms: int) -> list[tuple[bytes, bytes | None]]:
    """Make `group`'s classic side from its consumer group, and drop that; the records
    that say so in the log (the consumer group's tombstones, then the classic record)."""
    consumer = group.consumer
    assert consumer is not None
    records = tombstones(group.group_id, consumer)
    assignments: dict[str, bytes] = {}
    for member in consumer.members.values():
        classic = member.classic
        assert classic is not None  # can_downgrade checked it
        target = consumer.target.get(member.member_id, frozenset())
        version = subscription_version(classic.protocols[0][1])
        assignments[member.member_id] = encode_assignment(target, version)
        group.add(
            MemberMetadata(
                member.member_id,
                member.instance_id,
                member.client_id,
                member.client_host,
                member.rebalance_timeout_ms,
                classic.session_timeout_ms,
                CONSUMER_PROTOCOL_TYPE,
                classic.protocols,
                assignment=assignments[member.member_id],
            )
        )
    group.generation_id = consumer.group_epoch
    group.protocol = group.select_protocol()
    group.subscribed_topics = group.compute_subscribed_topics()
    group.consumer = None
    group.transition_to(GroupState.STABLE, now_ms)
    records.append(
        (encode_group_key(group.group_id), encode_group_value(group.to_record(assignments)))
    )
    return records


def undo_classic_group(
    group: GroupMetadata, consumer: ConsumerGroup, generation: int, now_ms: int
) -> None:
    """`to_classic_group`'s records were not written: the consumer group is back as it
    was, and tries again later (memory never runs ahead of the log)."""
    _end_classic(group, now_ms)
    group.generation_id = generation
    group.consumer = consumer
    consumer.consumer_member_left = True
