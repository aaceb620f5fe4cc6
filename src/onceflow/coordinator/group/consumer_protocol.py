"""ConsumerGroupHeartbeat (KIP-848): join, heartbeat, leave and reconcile in one request.

Each heartbeat (Kafka's GroupMetadataManager.consumerGroupHeartbeat, step by step):
1. checks the request (INVALID_REQUEST, UNSUPPORTED_ASSIGNOR) and finds or makes the group
   and the member (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH, GROUP_MAX_SIZE_REACHED);
2. bumps the group epoch when the member is new or changed its subscription, or when the
   subscribed topics changed (created, deleted, grown: read from the broker each time);
3. computes a new target assignment when the group epoch is ahead of the assignment epoch;
4. moves the member one step towards its target (reconcile.py) and answers its assignment
   when it changed or the request was a full one.

`expire` fences members past their session timeout, or past their rebalance timeout while
asked to revoke partitions. What changed is marked on the group; the coordinator writes it
to `__consumer_offsets` (consumer_records.py) before the heartbeat is answered.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable

from onceflow.client_regex import ClientRegex
from onceflow.clock import Clock
from onceflow.coordinator.group.assignors import ASSIGNORS
from onceflow.coordinator.group.config import GroupCoordinatorConfig
from onceflow.coordinator.group.consumer_conversion import can_upgrade, to_consumer_group
from onceflow.coordinator.group.consumer_group import (
    ConsumerGroup,
    ConsumerMember,
    TopicsMetadata,
)
from onceflow.coordinator.group.consumer_members import leave, member_for
from onceflow.coordinator.group.consumer_messages import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    LEAVE_STATIC_EPOCH,
    NO_REBALANCE_TIMEOUT,
    HeartbeatRequest,
    HeartbeatResult,
    failure,
    invalid_request,
)
from onceflow.coordinator.group.manager import GroupMetadataManager
from onceflow.coordinator.group.metadata import GroupMetadata
from onceflow.coordinator.group.offsets import TopicPartition
from onceflow.coordinator.group.reconcile import MemberState, Partitions, reconcile
from onceflow.coordinator.group.state import GroupState
from onceflow.errors import ErrorCode

log = logging.getLogger(__name__)

# A topic's id and partition count, None when it does not exist.
TopicLookup = Callable[[str], tuple[uuid.UUID | None, int] | None]
# Every topic a regex may match (internal topics left out, as Kafka leaves them out).
TopicNames = Callable[[], Iterable[str]]
# How often a group's regexes are matched against the topics again (Kafka's is 10 s too):
# a topic created since then joins the subscription at the first heartbeat after that.
REGEX_REFRESH_INTERVAL_MS = 10_000


class ConsumerHeartbeats:
    def __init__(
        self,
        clock: Clock,
        config: GroupCoordinatorConfig,
        manager: GroupMetadataManager,
        topics: TopicLookup,
        topic_names: TopicNames,
        new_uuid: Callable[[], str],
    ) -> None:
        self._clock = clock
        self._config = config
        self._manager = manager
        self._topics = topics
        self._topic_names = topic_names
        self._new_uuid = new_uuid
        self._assignors = tuple(a for a in config.consumer_assignors if a in ASSIGNORS)

    def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResult:
        invalid = invalid_request(request, self._assignors)
        if invalid is not None:
            return invalid
        found = self._group(request)
        if isinstance(found, HeartbeatResult):
            return found
        group = found
        if request.member_epoch in (LEAVE_EPOCH, LEAVE_STATIC_EPOCH):
            return leave(group, request)
        member = member_for(group, request, self._config.consumer_max_size, self._new_uuid)
        if isinstance(member, HeartbeatResult):
            return member
        before = member.recon.assigned
        described = _described(member)
        subscription_changed = _update_member(member, request)
        if subscription_changed:
            group.subscriptions_changed()
        if _described(member) != described:
            group.changed_members.add(member.member_id)
        self.advance(request.group_id, group, member, request.owned, subscription_changed)
        member.session_deadline_ms = (
            self._clock.monotonic_ms() + self._config.consumer_session_timeout_ms
        )
        full = request.member_epoch == JOIN_EPOCH or (
            request.rebalance_timeout_ms != NO_REBALANCE_TIMEOUT
            and request.subscribed_topic_names is not None
            and request.owned is not None
        )
        changed = member.recon.assigned != before
        return HeartbeatResult(
            ErrorCode.none,
            member_id=member.member_id,
            member_epoch=member.recon.epoch,
            heartbeat_interval_ms=self._config.consumer_heartbeat_interval_ms,
            assignment=member.recon.assigned if full or changed else None,
        )

    def advance(
        self,
        group_id: str,
        group: ConsumerGroup,
        member: ConsumerMember,
        owned: Partitions | None,
        subscription_changed: bool,
    ) -> None:
        """Steps 2-4 for a member of either protocol: bump the group epoch if needed, compute
        a new target if behind, and move the member towards its target."""
        regexes_changed = self._refresh_regexes(group)
        if self._refresh_topics(group) or subscription_changed or regexes_changed:
            group.bump_epoch()
        if group.group_epoch > group.assignment_epoch:
            group.compute_target(self._assignors[0])
            log.info(
                "consumer group %s: target assignment of epoch %d by %s",
                group_id,
                group.assignment_epoch,
                group.assignor_name,
            )
        self._reconcile(group, member, owned)

    def _group(self, request: HeartbeatRequest) -> ConsumerGroup | HeartbeatResult:
        """The group's consumer-protocol side, made or converted on a join."""
        group = self._manager.get(request.group_id)
        joining = request.member_epoch == JOIN_EPOCH
        if group is None:
            if not joining:
                return failure(
                    request,
                    ErrorCode.group_id_not_found,
                    f"Consumer group {request.group_id} not found.",
                )
            group = self._manager.add(GroupMetadata(request.group_id, self._clock.now_ms()))
        if group.is_(GroupState.DEAD):
            return failure(request, ErrorCode.coordinator_not_available, None)
        if group.consumer is not None:
            return group.consumer
        if joining and group.members and can_upgrade(group, self._config):
            upgraded = to_consumer_group(group, self._clock.now_ms(), self._clock.monotonic_ms())
            if upgraded is not None:
                log.info("group %s: upgraded from classic to consumer", request.group_id)
                group.consumer = upgraded
                return upgraded
        if not joining or group.members or not group.is_(GroupState.EMPTY):
            return failure(
                request,
                ErrorCode.group_id_not_found,
                f"Group {request.group_id} is not a consumer group",
            )
        # An empty classic group (offsets only) changes protocol; its offsets stay, its
        # classic record goes (the heartbeat's writes include a tombstone for it).
        group.consumer = ConsumerGroup()
        group.consumer.group_changed = True
        group.consumer.replaces_classic = True
        return group.consumer

    def _refresh_regexes(self, group: ConsumerGroup) -> bool:
        """Match the members' regexes against the topics when one is new or the refresh
        interval passed; True when what some regex matches changed."""
        regexes = group.regexes()
        now = self._clock.monotonic_ms()
        if set(group.regex_topics) == regexes and now < group.regex_refresh_ms:
            return False
        group.regex_refresh_ms = now + REGEX_REFRESH_INTERVAL_MS
        names = list(self._topic_names()) if regexes else []
        resolved = {}
        for regex in regexes:  # checked by the heartbeat that brought it: RE2 compiles it
            compiled = ClientRegex(regex)
            resolved[regex] = frozenset(n for n in names if compiled.matches(n))
        if resolved == group.regex_topics:
            return False
        group.regex_topics = resolved
        group.subscriptions_changed()
        return True

    def _refresh_topics(self, group: ConsumerGroup) -> bool:
        """Whether a subscribed topic appeared, vanished or grew (a new assignment is due)."""
        topics: TopicsMetadata = {}
        for name in sorted(group.subscribed_topics()):
            found = self._topics(name)
            if found is not None:
                topics[name] = found
        if topics == group.topics:
            return False
        group.topics = topics
        return True

    def _reconcile(
        self, group: ConsumerGroup, member: ConsumerMember, owned: Partitions | None
    ) -> None:
        def owned_by_other(tp: TopicPartition) -> bool:
            owner = group.owner(tp)
            return owner is not None and owner != member.member_id

        was_revoking = member.recon.state is MemberState.UNREVOKED_PARTITIONS
        recon = reconcile(
            member.recon,
            group.assignment_epoch,
            group.target.get(member.member_id, frozenset()),
            owned,
            owned_by_other,
        )
        group.set_reconciliation(member, recon)
        if recon.state is not MemberState.UNREVOKED_PARTITIONS:
            member.revocation_deadline_ms = None
        elif not was_revoking:
            member.revocation_deadline_ms = self._clock.monotonic_ms() + member.rebalance_timeout_ms

    def expire(self, group_id: str, group: ConsumerGroup) -> None:
        """Fence members whose session or revocation deadline has passed."""
        now = self._clock.monotonic_ms()
        for member in list(group.members.values()):
            if member.session_deadline_ms <= now:
                reason = "its session timed out"
            elif member.revocation_deadline_ms is not None and member.revocation_deadline_ms <= now:
                reason = "it did not revoke its partitions within its rebalance timeout"
            elif member.sync_deadline_ms is not None and member.sync_deadline_ms <= now:
                reason = "the classic member did not sync within its rebalance timeout"
            elif member.join_deadline_ms is not None and member.join_deadline_ms <= now:
                reason = "the classic member did not rejoin within its rebalance timeout"
            else:
                continue
            group.remove(member.member_id)
            log.info("consumer group %s: member %s fenced: %s", group_id, member.member_id, reason)


def _described(member: ConsumerMember) -> tuple[object, ...]:
    """What of a member, besides its assignment, its record holds."""
    return (
        member.client_id,
        member.client_host,
        member.instance_id,
        member.rack_id,
        member.rebalance_timeout_ms,
        member.subscribed,
        member.regex,
        member.server_assignor,
    )


def _update_member(member: ConsumerMember, request: HeartbeatRequest) -> bool:
    """Apply what the heartbeat changed; True when the group needs a new assignment."""
    member.client_id = request.client_id
    member.client_host = request.client_host
    if request.instance_id is not None:
        member.instance_id = request.instance_id
    if request.rack_id is not None:
        member.rack_id = request.rack_id
    if request.rebalance_timeout_ms != NO_REBALANCE_TIMEOUT:
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
    changed = False
    if request.subscribed_topic_names is not None:
        subscribed = tuple(sorted(set(request.subscribed_topic_names)))
        changed = subscribed != member.subscribed
        member.subscribed = subscribed
    if request.subscribed_topic_regex is not None:
        regex = request.subscribed_topic_regex or None
        changed = changed or regex != member.regex
        member.regex = regex
    if request.server_assignor is not None and request.server_assignor != member.server_assignor:
        member.server_assignor = request.server_assignor
        changed = True
    return changed
