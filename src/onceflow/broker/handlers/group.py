"""Consumer group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, TxnOffsetCommit, OffsetFetch, DescribeGroups and ListGroups.

Each handler serves every advertised version of its API: it reads the fields the request's
version has (older versions simply lack some, e.g. group_instance_id before v5), asks the
group coordinator, and builds the response with ctx.response(), which drops what the
version does not carry. Version-specific behaviour is spelled out where Kafka has it.

Authorization is Kafka's, checked before the coordinator is asked (so a refused request
changes nothing): FindCoordinator needs DESCRIBE on the group or transactional id; joining,
syncing, heartbeats and leaving READ on the group; OffsetCommit READ on the group, then on
each topic; TxnOffsetCommit WRITE on the transactional id, READ on the group, then on each
topic; OffsetFetch DESCRIBE on the group, and topics the principal may not DESCRIBE are
refused (or left out, when all are asked for); DescribeGroups DESCRIBE on each group;
ListGroups shows every group to DESCRIBE on the cluster, else only the groups it may DESCRIBE.
"""

from __future__ import annotations

import asyncio
import datetime
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from onceflow.broker.handlers import authz
from onceflow.broker.handlers.base import Handler, RequestContext
from onceflow.broker.handlers.share_groups import share_overviews
from onceflow.coordinator.group import GroupCoordinator, OffsetCommitEntry, TopicPartition
from onceflow.coordinator.group.results import FetchedOffset
from onceflow.errors import ErrorCode
from onceflow.protocol import txn_support
from onceflow.protocol.api_versions import ApiKey
from onceflow.security.acl import AclOperation, ResourceType

NO_THROTTLE = datetime.timedelta(0)
_ONE_MS = datetime.timedelta(milliseconds=1)
KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
KEY_TYPE_SHARE = 2  # KIP-932's share coordinators (FindCoordinator v6)
DEFAULT_RETENTION = -1  # OffsetCommit v2-v4: "use offsets.retention.minutes"
# DescribeGroups v3+: Integer.MIN_VALUE when the client did not ask; else the bitfield of
# the group's supported operations the principal may do (authz.authorized_operations).
OPERATIONS_NOT_REQUESTED = -(2**31)
GROUP_DENIED = ErrorCode.group_authorization_failed
_GROUP_NOT_FOUND_FROM = 6  # DescribeGroups: GROUP_ID_NOT_FOUND instead of a "Dead" group
# OffsetCommit v9 (KIP-848): a generation for an unknown group is GROUP_ID_NOT_FOUND, not
# ILLEGAL_GENERATION. A classic group takes v9's member epoch as its generation (-1: none).
_GROUP_NOT_FOUND_ON_COMMIT = 9
_MULTI_GROUP = 8  # OffsetFetch's first version with `groups`
_NULLABLE_PROTOCOL = 7  # JoinGroup: protocol_type answered, protocol_name nullable
_SKIP_ASSIGNMENT = 9  # JoinGroup (KIP-814); v8's `reason` is only for Kafka's logs


def _coordinator(ctx: RequestContext) -> GroupCoordinator:
    coordinator: GroupCoordinator = ctx.broker.group_coordinator
    return coordinator


def _ms(delta: datetime.timedelta) -> int:
    return int(delta // _ONE_MS)


def _group_allowed(ctx: RequestContext, operation: AclOperation, group_id: str) -> bool:
    return ctx.authorized(operation, ResourceType.GROUP, group_id)


def _client_host(ctx: RequestContext) -> str:
    """The client's address as Kafka shows it ("/127.0.0.1")."""
    return f"/{ctx.session.client_host}"


_BATCHED = 4  # FindCoordinator's first version with coordinator_keys
_FIRST_SHARE = 6
_FAILURE_MESSAGES = {
    ErrorCode.invalid_request: "unknown coordinator key type",
    ErrorCode.cluster_authorization_failed: authz.DENIED_MESSAGES[
        ErrorCode.cluster_authorization_failed
    ],
}
_CoordinatorAnswer = tuple[ErrorCode, str | None, tuple[int, str, int] | None]


async def handle_find_coordinator(ctx: RequestContext, request: Any) -> Any:
    """One key (v0-3) or a batch (v4+, KIP-699), as Kafka's handleFindCoordinatorRequest:
    per key DESCRIBE on the group or transactional id, then the leader of the key's internal
    partition. Share-group keys (v6, KIP-932) are the brokers' own, need CLUSTER_ACTION, and
    answer INVALID_REQUEST (no share coordinator here), as before v6; an unknown key type
    fails the whole request with INVALID_REQUEST."""
    version = ctx.api_version
    key_type = getattr(request, "key_type", KEY_TYPE_GROUP)
    keys = tuple(request.coordinator_keys) if version >= _BATCHED else (request.key,)
    failure = _find_coordinator_failure(ctx, key_type, keys)
    if failure is not None:
        answers: list[_CoordinatorAnswer] = [(failure, _FAILURE_MESSAGES[failure], None)] * len(
            keys
        )
    else:
        answers = list(
            await asyncio.gather(*(_find_coordinator_key(ctx, key_type, key) for key in keys))
        )
    if version < _BATCHED:
        error, message, node = answers[0]
        # Kafka's single-key error answer carries the error's message.
        if error is not ErrorCode.none and message is None:
            message = _FAILURE_MESSAGES.get(error, authz.DENIED_MESSAGES.get(error))
        return ctx.response(throttle_time=NO_THROTTLE, **_coordinator_fields(error, message, node))
    return ctx.response(
        throttle_time=NO_THROTTLE,
        coordinators=tuple(
            ctx.entity("Coordinator", key=key, **_coordinator_fields(*answer))
            for key, answer in zip(keys, answers, strict=True)
        ),
    )


def _find_coordinator_failure(
    ctx: RequestContext, key_type: int, keys: tuple[str, ...]
) -> ErrorCode | None:
    """What fails every key of the request (Kafka throws, and answers its error response)."""
    if key_type not in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION, KEY_TYPE_SHARE):
        return ErrorCode.invalid_request
    if (
        key_type == KEY_TYPE_SHARE
        and ctx.api_version >= _FIRST_SHARE
        and keys
        and not authz.cluster_authorized(ctx, AclOperation.CLUSTER_ACTION)
    ):
        return ErrorCode.cluster_authorization_failed
    return None


async def _find_coordinator_key(ctx: RequestContext, key_type: int, key: str) -> _CoordinatorAnswer:
    """One key's error, message (None where Kafka's batched answer has none) and node."""
    if key_type == KEY_TYPE_GROUP and not _group_allowed(ctx, AclOperation.DESCRIBE, key):
        return GROUP_DENIED, None, None
    if key_type == KEY_TYPE_TRANSACTION and not ctx.authorized(
        AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key
    ):
        return ErrorCode.transactional_id_authorization_failed, None, None
    if key_type == KEY_TYPE_SHARE:
        return ErrorCode.invalid_request, "share groups are not supported", None
    node = await ctx.broker.find_coordinator(key_type, key, ctx.session.listener)
    if node is None:
        message = (
            "no coordinator right now: its log partition has no leader (or is offline after a "
            "storage failure)"
        )
        return ErrorCode.coordinator_not_available, message, None
    return ErrorCode.none, None, node


def _coordinator_fields(
    error: ErrorCode, message: str | None, node: tuple[int, str, int] | None
) -> dict[str, Any]:
    node_id, host, port = node if node is not None else (-1, "", -1)
    return {
        "error_code": error,
        "error_message": message,
        "node_id": node_id,
        "host": host,
        "port": port,
    }


async def handle_join_group(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    if not _group_allowed(ctx, AclOperation.READ, request.group_id):
        return ctx.response(
            throttle_time=NO_THROTTLE,
            error_code=GROUP_DENIED,
            generation_id=-1,
            protocol_name=None if version >= _NULLABLE_PROTOCOL else "",
            leader="",
            member_id="",
            members=(),
        )
    session = _ms(request.session_timeout)
    # v0 has no rebalance timeout: the session timeout bounds the rebalance too.
    rebalance = _ms(request.rebalance_timeout) if version >= 1 else session
    instance_id = getattr(request, "group_instance_id", None)
    result = await _coordinator(ctx).join_group(
        request.group_id,
        request.member_id,
        protocol_type=request.protocol_type,
        protocols=[(p.name, p.metadata) for p in request.protocols],
        session_timeout_ms=session,
        rebalance_timeout_ms=rebalance,
        group_instance_id=instance_id,
        # v4+ clients understand MEMBER_ID_REQUIRED; static members never need it.
        require_known_member_id=version >= 4 and instance_id is None,
        supports_skipping_assignment=version >= _SKIP_ASSIGNMENT,
        client_id=ctx.header.client_id or "",
        client_host=_client_host(ctx),
    )
    members = tuple(
        ctx.entity(
            "JoinGroupResponseMember",
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            metadata=m.metadata,
        )
        for m in result.members
    )
    return ctx.response(
        throttle_time=NO_THROTTLE,
        error_code=result.error,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        # v7+ carry "no protocol" as null, as Kafka's JoinGroupResponse does
        protocol_name=result.protocol_name or (None if version >= _NULLABLE_PROTOCOL else ""),
        leader=result.leader_id,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=members,
    )


async def handle_sync_group(ctx: RequestContext, request: Any) -> Any:
    if not _group_allowed(ctx, AclOperation.READ, request.group_id):
        return ctx.response(throttle_time=NO_THROTTLE, error_code=GROUP_DENIED, assignment=b"")
    result = await _coordinator(ctx).sync_group(
        request.group_id,
        request.generation_id,
        request.member_id,
        assignments={a.member_id: a.assignment for a in request.assignments},
        group_instance_id=getattr(request, "group_instance_id", None),
        # v5+: checked against the group's (INCONSISTENT_GROUP_PROTOCOL), and answered
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None),
    )
    return ctx.response(
        throttle_time=NO_THROTTLE,
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


async def handle_heartbeat(ctx: RequestContext, request: Any) -> Any:
    if not _group_allowed(ctx, AclOperation.READ, request.group_id):
        return ctx.response(throttle_time=NO_THROTTLE, error_code=GROUP_DENIED)
    error = _coordinator(ctx).heartbeat(
        request.group_id,
        request.member_id,
        request.generation_id,
        group_instance_id=getattr(request, "group_instance_id", None),
    )
    return ctx.response(throttle_time=NO_THROTTLE, error_code=error)


async def handle_leave_group(ctx: RequestContext, request: Any) -> Any:
    if not _group_allowed(ctx, AclOperation.READ, request.group_id):
        return ctx.response(throttle_time=NO_THROTTLE, error_code=GROUP_DENIED, members=())
    if ctx.api_version < 3:
        result = await _coordinator(ctx).leave_group(request.group_id, [(request.member_id, None)])
        # One member, one code: the group's error, else the member's.
        return ctx.response(throttle_time=NO_THROTTLE, error_code=result.first_error)
    identities = [(m.member_id, m.group_instance_id) for m in request.members]
    result = await _coordinator(ctx).leave_group(request.group_id, identities)
    members = tuple(
        ctx.entity(
            "MemberResponse",
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            error_code=m.error,
        )
        for m in result.members
    )
    return ctx.response(throttle_time=NO_THROTTLE, error_code=result.error, members=members)


async def handle_offset_commit(ctx: RequestContext, request: Any) -> Any:
    if not _group_allowed(ctx, AclOperation.READ, request.group_id):
        return _commit_response(ctx, request, _all_failed(request, GROUP_DENIED), "OffsetCommit")
    errors, entries = _commit_entries(ctx, request)
    retention = getattr(request, "retention_time", None)  # v2-v4 only
    retention_ms = None if retention is None else _ms(retention)
    if entries:  # Kafka skips the coordinator when no partition is left to commit
        errors |= await _coordinator(ctx).commit_offsets(
            request.group_id,
            request.member_id,
            request.generation_id_or_member_epoch,
            entries,
            group_instance_id=getattr(request, "group_instance_id", None),
            retention_ms=None if retention_ms == DEFAULT_RETENTION else retention_ms,
            unknown_group=(
                ErrorCode.group_id_not_found
                if ctx.api_version >= _GROUP_NOT_FOUND_ON_COMMIT
                else ErrorCode.illegal_generation
            ),
            member_epochs=ctx.api_version >= _GROUP_NOT_FOUND_ON_COMMIT,
        )
    return _commit_response(ctx, request, errors, "OffsetCommit")


def _commit_entries(
    ctx: RequestContext, request: Any
) -> tuple[dict[TopicPartition, ErrorCode], dict[TopicPartition, OffsetCommitEntry]]:
    """The errors of partitions not to commit (a topic without READ, then an unknown
    partition, in Kafka's order) and the entries of the others, of OffsetCommit or
    TxnOffsetCommit (same fields; the leader epoch from OffsetCommit v6, TxnOffsetCommit v2)."""
    denied = authz.denied(
        ctx, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics)
    )
    errors: dict[TopicPartition, ErrorCode] = {}
    entries: dict[TopicPartition, OffsetCommitEntry] = {}
    for topic in request.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            if topic.name in denied:
                errors[tp] = ErrorCode.topic_authorization_failed
            elif not ctx.broker.has_partition(tp.topic, tp.partition):
                errors[tp] = ErrorCode.unknown_topic_or_partition
            else:
                entries[tp] = OffsetCommitEntry(
                    offset=p.committed_offset,
                    leader_epoch=getattr(p, "committed_leader_epoch", -1),
                    metadata=p.committed_metadata,
                )
    return errors, entries


def _all_failed(request: Any, error: ErrorCode) -> dict[TopicPartition, ErrorCode]:
    return {
        TopicPartition(topic.name, p.partition_index): error
        for topic in request.topics
        for p in topic.partitions
    }


def _commit_response(
    ctx: RequestContext, request: Any, errors: Mapping[TopicPartition, ErrorCode], api: str
) -> Any:
    """The per-partition answer of OffsetCommit or TxnOffsetCommit (same shape, own names)."""
    topics = tuple(
        ctx.entity(
            f"{api}ResponseTopic",
            name=topic.name,
            partitions=tuple(
                ctx.entity(
                    f"{api}ResponsePartition",
                    partition_index=p.partition_index,
                    error_code=errors[TopicPartition(topic.name, p.partition_index)],
                )
                for p in topic.partitions
            ),
        )
        for topic in request.topics
    )
    return ctx.response(throttle_time=NO_THROTTLE, topics=topics)


async def handle_txn_offset_commit(ctx: RequestContext, request: Any) -> Any:
    """TxnOffsetCommit v0-v4: offsets that take effect only if the producer's txn commits.

    v2 adds the leader epoch, v3 the member id, generation and instance id (KIP-447), which
    older versions lack and the coordinator then does not check; v4 clients understand
    TRANSACTION_ABORTABLE (KIP-890) when the group's partition is not in the transaction.
    """
    denied = None
    if not ctx.authorized(
        AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id
    ):
        denied = ErrorCode.transactional_id_authorization_failed
    elif not _group_allowed(ctx, AclOperation.READ, request.group_id):
        denied = GROUP_DENIED
    if denied is not None:
        return _commit_response(ctx, request, _all_failed(request, denied), "TxnOffsetCommit")
    errors, entries = _commit_entries(ctx, request)
    if entries:  # as for OffsetCommit, nothing left to commit skips the coordinator
        errors |= await _coordinator(ctx).txn_offset_commit(
            request.transactional_id,
            request.group_id,
            request.producer_id,
            request.producer_epoch,
            getattr(request, "member_id", ""),  # v3+
            getattr(request, "generation_id", -1),
            getattr(request, "group_instance_id", None),
            entries,
            txn_support.for_txn_offset_commit(ctx.api_version),
        )
    return _commit_response(ctx, request, errors, "TxnOffsetCommit")


async def handle_offset_fetch(ctx: RequestContext, request: Any) -> Any:
    """OffsetFetch v1-v9: one group, or several from v8 (each authorized and answered on its
    own). v9's member id and epoch are checked, as Kafka checks them, only for
    consumer-protocol groups (STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID)."""
    # v7+: read_committed consumers ask not to be given an offset a transaction may change;
    # such partitions answer UNSTABLE_OFFSET_COMMIT (per partition, as Kafka does) and retry.
    stable = getattr(request, "require_stable", False)
    if ctx.api_version < _MULTI_GROUP:
        error, partitions = _fetch_group(ctx, request.group_id, request.topics, stable)
        if error is not ErrorCode.none:
            return _offset_fetch_failed(ctx, request, error)
        topics = _offset_topics(ctx, request.topics, partitions, "Topic", "Partition")
        return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none, topics=topics)
    groups = []
    for group in request.groups:
        member = (getattr(group, "member_id", None), getattr(group, "member_epoch", -1))
        error, partitions = _fetch_group(ctx, group.group_id, group.topics, stable, member)
        topics = (
            _offset_topics(ctx, group.topics, partitions, "Topics", "Partitions")
            if error is ErrorCode.none
            else ()
        )
        groups.append(
            ctx.entity(
                "OffsetFetchResponseGroup", group_id=group.group_id, topics=topics, error_code=error
            )
        )
    return ctx.response(throttle_time=NO_THROTTLE, groups=tuple(groups))


def _fetch_group(
    ctx: RequestContext,
    group_id: str,
    topics: Any,
    require_stable: bool,
    member: tuple[str | None, int] = (None, -1),
) -> tuple[ErrorCode, Mapping[TopicPartition, FetchedOffset]]:
    """One group's committed offsets, of the partitions asked for or (topics null, v2+) of
    every partition, with Kafka's authorization: the group's error, else per partition."""
    if not _group_allowed(ctx, AclOperation.DESCRIBE, group_id):
        return GROUP_DENIED, {}
    requested: list[TopicPartition] | None = None
    denied: frozenset[str] = frozenset()
    if topics is not None:
        requested = [TopicPartition(t.name, index) for t in topics for index in t.partition_indexes]
        denied = authz.denied(
            ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in topics)
        )
    wanted = requested if not denied else [tp for tp in requested or () if tp.topic not in denied]
    result = _coordinator(ctx).fetch_offsets(
        group_id,
        wanted,
        require_stable=require_stable,
        member_id=member[0],
        member_epoch=member[1],
    )
    if result.error is not ErrorCode.none:
        return result.error, {}
    partitions = result.partitions
    if requested is None:  # every topic: those the principal may not DESCRIBE are left out
        hidden = authz.denied(
            ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (tp.topic for tp in partitions)
        )
        if hidden:
            partitions = {tp: f for tp, f in partitions.items() if tp.topic not in hidden}
    elif denied:
        refused = FetchedOffset(-1, -1, "", ErrorCode.topic_authorization_failed)
        partitions = dict(partitions) | {tp: refused for tp in requested if tp.topic in denied}
    return ErrorCode.none, partitions


def _offset_fetch_failed(ctx: RequestContext, request: Any, error: ErrorCode) -> Any:
    """A group-level error of v1-v7: in its own field from v2 (with no topics), else on
    every partition asked for."""
    if ctx.api_version >= 2:
        return ctx.response(throttle_time=NO_THROTTLE, error_code=error, topics=())
    failed = FetchedOffset(-1, -1, "", error)
    partitions = {
        TopicPartition(t.name, i): failed for t in request.topics for i in t.partition_indexes
    }
    topics = _offset_topics(ctx, request.topics, partitions, "Topic", "Partition")
    return ctx.response(throttle_time=NO_THROTTLE, error_code=ErrorCode.none, topics=topics)


def _offset_topics(
    ctx: RequestContext,
    asked: Any,
    partitions: Mapping[TopicPartition, FetchedOffset],
    topic_entity: str,
    partition_entity: str,
) -> tuple[Any, ...]:
    """The answer's topics in the order asked (sorted when all were asked for). The entity
    names differ from v8 on ("OffsetFetchResponseTopics", "...Partitions")."""
    by_topic: dict[str, list[tuple[int, FetchedOffset]]] = defaultdict(list)
    for tp, fetched in partitions.items():
        by_topic[tp.topic].append((tp.partition, fetched))
    if asked is None:
        order = sorted(by_topic)
        for entries in by_topic.values():
            entries.sort()
    else:
        order = [t.name for t in asked]
    return tuple(
        ctx.entity(
            f"OffsetFetchResponse{topic_entity}",
            name=name,
            partitions=tuple(
                ctx.entity(
                    f"OffsetFetchResponse{partition_entity}",
                    partition_index=index,
                    committed_offset=f.offset,
                    committed_leader_epoch=f.leader_epoch,
                    metadata=f.metadata,
                    error_code=f.error,
                )
                for index, f in by_topic[name]
            ),
        )
        for name in dict.fromkeys(order)
    )


async def handle_describe_groups(ctx: RequestContext, request: Any) -> Any:
    wants_operations = getattr(request, "include_authorized_operations", False)
    coordinator = _coordinator(ctx)
    groups = []
    for group_id in request.groups:
        if not _group_allowed(ctx, AclOperation.DESCRIBE, group_id):
            groups.append(
                ctx.entity(
                    "DescribedGroup",
                    error_code=GROUP_DENIED,
                    group_id=group_id,
                    group_state="",
                    protocol_type="",
                    protocol_data="",
                    members=(),
                    authorized_operations=OPERATIONS_NOT_REQUESTED,
                )
            )
            continue
        summary = coordinator.describe_group(group_id)
        if ctx.api_version >= _GROUP_NOT_FOUND_FROM and _absent(summary.state, summary.error):
            groups.append(_described_not_found(ctx, group_id))
            continue
        members = tuple(
            ctx.entity(
                "DescribedGroupMember",
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata,
                member_assignment=m.assignment,
            )
            for m in summary.members
        )
        operations = OPERATIONS_NOT_REQUESTED
        if wants_operations and summary.error is ErrorCode.none:
            operations = authz.authorized_operations(ctx, ResourceType.GROUP, group_id)
        groups.append(
            ctx.entity(
                "DescribedGroup",
                error_code=summary.error,
                group_id=group_id,
                group_state=summary.state,
                protocol_type=summary.protocol_type,
                protocol_data=summary.protocol,
                members=members,
                authorized_operations=operations,
            )
        )
    return ctx.response(throttle_time=NO_THROTTLE, groups=tuple(groups))


def _absent(state: str, error: ErrorCode) -> bool:
    return error is ErrorCode.none and state == "Dead"


def _described_not_found(ctx: RequestContext, group_id: str) -> Any:
    """DescribeGroups v6+ (KIP-1043): an unknown group is an error with Kafka's message, its
    state still "Dead" as before."""
    return ctx.entity(
        "DescribedGroup",
        error_code=ErrorCode.group_id_not_found,
        error_message=f"Group {group_id} not found.",
        group_id=group_id,
        group_state="Dead",
        protocol_type="",
        protocol_data="",
        members=(),
        authorized_operations=OPERATIONS_NOT_REQUESTED,
    )


async def handle_list_groups(ctx: RequestContext, request: Any) -> Any:
    """ListGroups v0-v5: v4 filters by state, v5 by type ("classic", "consumer", "share"),
    both case-insensitive, as Kafka."""
    error, overviews = _coordinator(ctx).list_groups()
    overviews += share_overviews(ctx)
    states = {s.strip().lower() for s in getattr(request, "states_filter", ())}
    types = {t.strip().lower() for t in getattr(request, "types_filter", ())}
    if types:
        overviews = [g for g in overviews if g.group_type in types]
    if states:
        overviews = [g for g in overviews if g.state.lower() in states]
    if not authz.cluster_authorized(ctx, AclOperation.DESCRIBE, quiet=True):
        # Only the groups the principal may describe, filtered without an audit line each.
        overviews = [
            g
            for g in overviews
            if authz.allowed(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id, quiet=True)
        ]
    groups = tuple(
        ctx.entity(
            "ListedGroup",
            group_id=g.group_id,
            protocol_type=g.protocol_type,
            group_state=g.state,
            group_type=g.group_type,
        )
        for g in overviews
    )
    return ctx.response(throttle_time=NO_THROTTLE, error_code=error, groups=groups)


HANDLERS: dict[int, Handler] = {
    ApiKey.FIND_COORDINATOR: handle_find_coordinator,
    ApiKey.JOIN_GROUP: handle_join_group,
    ApiKey.SYNC_GROUP: handle_sync_group,
    ApiKey.HEARTBEAT: handle_heartbeat,
    ApiKey.LEAVE_GROUP: handle_leave_group,
    ApiKey.OFFSET_COMMIT: handle_offset_commit,
    ApiKey.OFFSET_FETCH: handle_offset_fetch,
    ApiKey.TXN_OFFSET_COMMIT: handle_txn_offset_commit,
    ApiKey.DESCRIBE_GROUPS: handle_describe_groups,
    ApiKey.LIST_GROUPS: handle_list_groups,
}
