"""ConsumerGroupHeartbeat's request and answer as the coordinator sees them, and Kafka's
checks of a request on its own (before any group or member is looked at)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from onceflow.client_regex import ClientRegex, PatternError
from onceflow.coordinator.group.reconcile import Partitions
from onceflow.errors import ErrorCode

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
LEAVE_STATIC_EPOCH = -2
NO_REBALANCE_TIMEOUT = -1
# ConsumerGroupHeartbeat v1 (KIP-1082): the client makes its member id, even to join.
CLIENT_MEMBER_ID_VERSION = 1


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = NO_REBALANCE_TIMEOUT
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Partitions | None = None  # the topic ids already turned into names
    client_id: str = ""
    client_host: str = ""
    api_version: int = CLIENT_MEMBER_ID_VERSION


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: Partitions | None = None  # None: unchanged, not sent


def invalid_request(request: HeartbeatRequest, assignors: Sequence[str]) -> HeartbeatResult | None:
    """Kafka's checks of the request alone, with its messages; None when it is valid."""

    def fail(message: str, error: ErrorCode = ErrorCode.invalid_request) -> HeartbeatResult:
        return failure(request, error, message)

    if not request.group_id:
        return fail("GroupId can't be empty.")
    if request.instance_id == "":
        return fail("InstanceId can't be empty.")
    if request.rack_id == "":
        return fail("RackId can't be empty.")
    if request.subscribed_topic_regex:  # "" (librdkafka sends it) means no regex, as in Kafka
        try:
            ClientRegex(request.subscribed_topic_regex)
        except PatternError as exc:
            return fail(
                f"SubscribedTopicRegex `{request.subscribed_topic_regex}` is not a valid "
                f"regular expression: {exc}.",
                ErrorCode.invalid_regular_expression,
            )
    epoch = request.member_epoch
    client_made_id = request.api_version >= CLIENT_MEMBER_ID_VERSION
    if (client_made_id or epoch != JOIN_EPOCH) and not request.member_id:
        return fail("MemberId can't be empty.")
    if epoch == JOIN_EPOCH:
        if request.rebalance_timeout_ms == NO_REBALANCE_TIMEOUT:
            return fail("RebalanceTimeoutMs must be provided in first request.")
        if request.owned is None or request.owned:
            return fail("TopicPartitions must be empty when (re-)joining.")
        if not request.subscribed_topic_names and not request.subscribed_topic_regex:
            return fail(
                "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
            )
    elif epoch == LEAVE_STATIC_EPOCH:
        if request.instance_id is None:
            return fail("InstanceId can't be null.")
    elif epoch < LEAVE_STATIC_EPOCH:
        return fail("MemberEpoch is invalid.")
    if request.server_assignor is not None and request.server_assignor not in assignors:
        return fail(
            f"ServerAssignor {request.server_assignor} is not supported. "
            f"Supported assignors: {', '.join(assignors)}.",
            ErrorCode.unsupported_assignor,
        )
    return None


def failure(request: HeartbeatRequest, error: ErrorCode, message: str | None) -> HeartbeatResult:
    return HeartbeatResult(error, message, request.member_id or None)
