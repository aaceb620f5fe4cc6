"""Fetch: long polling completed by appends, with record bytes sent straight from files.

Consumers read up to the high watermark (or the last stable offset) of a partition this
broker leads. A follower's fetch (replica_id set) reads up to the log end, tells the leader
how far the follower has copied (which may move the high watermark), and waits for appends
rather than for the high watermark.

The response is encoded by kio entity by entity, but each partition's `records` field is
spliced in as a FileRegion, so record bytes never become Python objects on the way from the
segment file to the socket.

Authorization is Kafka's: a follower needs CLUSTER_ACTION on the cluster, a consumer READ
on each topic; a partition refused answers TOPIC_AUTHORIZATION_FAILED, checked once per
request (not on every pass of a long poll) and before anything else.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from onceflow.broker.fetch_sessions import (
    FetchSession,
    PartitionKey,
    SessionPartition,
    Topic,
    session_for,
)
from onceflow.broker.handlers import authz
from onceflow.broker.handlers.base import RequestContext
from onceflow.broker.responses import RawBody
from onceflow.errors import ErrorCode, KafkaError, ProtocolError
from onceflow.protocol import codec
from onceflow.protocol.compact import compact_length
from onceflow.security.acl import AclOperation, ResourceType
from onceflow.storage.indexes import AbortedTxn
from onceflow.storage.partition_log import FileRegion, PartitionLog

if TYPE_CHECKING:
    from onceflow.broker.services import BrokerServices

READ_UNCOMMITTED = 0
READ_COMMITTED = 1

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_ERROR_SESSION = struct.Struct(">hi")


@dataclass(slots=True)
class _PartitionRead:
    partition: int
    error: ErrorCode
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    region: FileRegion | None = None
    aborted: Sequence[AbortedTxn] | None = None
    diverging: tuple[int, int] | None = None  # (epoch, end offset), v12+ follower fetches
    leader: tuple[int, int] | None = None  # (id, epoch) after a leader change, v16+


async def handle_fetch(ctx: RequestContext, request: Any) -> Any:
    if request.topics is None or any(t.partitions is None for t in request.topics):
        # Flexible versions can encode a null array where Kafka allows none: its parser
        # refuses the request, and the connection is closed.
        raise ProtocolError("malformed Fetch request: null topics or partitions")
    broker = ctx.broker
    clock = broker.clock
    deadline = clock.monotonic_ms() + int(request.max_wait.total_seconds() * 1000)
    names = _topic_names(ctx, request)
    keys = [
        (name, p.partition)
        for name, t in zip(names, request.topics, strict=True)
        if name is not None
        for p in t.partitions
    ]
    replica = request.replica_id if ctx.api_version < 15 else request.replica_state.replica_id
    purgatory = broker.replica_purgatory if replica >= 0 else broker.purgatory
    try:
        session, full = session_for(broker.fetch_sessions, replica, ctx.api_version, request)
    except KafkaError as exc:
        return RawBody(_encode(ctx, [], [], exc.code), (exc.code,))
    if session is not None:
        session.update(names, request, full=full)
    topics = _wanted(names, request)
    incremental = session if session is not None and not full else None
    named = set(keys)
    if incremental is not None:
        keys = list(incremental.partitions)
    denied = _denied_topics(ctx, list({name for name, _ in keys}), replica)
    # A session's passes look at what it names, what the last pass read and what changed
    # since (an append, a high watermark): on a follower's session of dozens of partitions,
    # one or two. A pass after a timeout, a wake of all waiters or the full-pass interval
    # looks at every partition (fetch_sessions.py).
    looked_at: set[PartitionKey] | None = None
    news: set[PartitionKey] = set()
    if incremental is not None:
        looked_at = incremental.first_look(clock.monotonic_ms(), _full_pass_ms(broker))
    while True:
        if incremental is not None:
            topics, news = _session_reads(ctx, incremental, named, looked_at)
            named = set()  # what it named is recorded now: later passes read only news
        reads, total, failed = _read_all(ctx, request, topics, replica, denied)
        remaining = deadline - clock.monotonic_ms()
        if total >= request.min_bytes or failed or remaining <= 0 or not keys:
            break
        if incremental is not None and incremental.untold_log_start(topics, reads):
            break  # DeleteRecords waits for the follower to move its log start too
        waiter = purgatory.watch(keys)
        try:
            await asyncio.wait_for(asyncio.shield(waiter), remaining / 1000)
        except TimeoutError:
            pass
        finally:
            purgatory.forget(keys, waiter)
        if incremental is not None:
            timed_out = not waiter.done()
            looked_at = incremental.next_look(news, clock.monotonic_ms(), timed_out)
    if incremental is not None:
        incremental.carry = news
    errors = (
        tuple(r.error for rs in reads for r in rs if r.error is not ErrorCode.none)
        if failed
        else ()
    )
    if session is not None:
        topics, reads = session.answered(topics, reads, full)
    session_id = session.id if session is not None else 0
    return RawBody(_encode(ctx, topics, reads, session_id=session_id), errors)


def _session_reads(
    ctx: RequestContext,
    session: FetchSession,
    named: set[PartitionKey],
    only: set[PartitionKey] | None = None,
) -> tuple[list[Topic], set[PartitionKey]]:
    """The partitions of an incremental session fetch to read in this pass (as topics, and
    their keys): those the request named (a new fetch offset or log start to record) and
    those with news for the follower, among `only` if given. A quiet one, with its
    follower in the ISR at the log end and told its high watermark, LSO and log start, is
    only noted as caught up: reading it would find no records and answer nothing, and on
    a cluster most of a session's partitions are quiet on most fetches."""
    broker = ctx.broker
    now_ms = broker.clock.now_ms()
    topics: dict[str, tuple[Any, list[Any]]] = {}
    read: set[PartitionKey] = set()
    partitions = session.partitions
    if only is None:
        candidates: Iterable[tuple[PartitionKey, SessionPartition]] = partitions.items()
    else:
        candidates = ((key, partitions[key]) for key in only | named if key in partitions)
    for key, entry in candidates:
        if key in named or not _quiet(broker, key, entry, session.replica, now_ms):
            topics.setdefault(key[0], (entry.topic_id, []))[1].append(entry.fetch)
            read.add(key)
    return [(name, topic_id, fetches) for name, (topic_id, fetches) in topics.items()], read


#: The longest a follower's session goes without a pass over all its partitions, at most
#: half of replica.lag.time.max.ms (the quiet ones' caught-up notes are renewed by it).
FULL_PASS_MS = 250


def _full_pass_ms(broker: BrokerServices) -> int:
    return min(FULL_PASS_MS, broker.config.replica_lag_time_max_ms // 2)


def _quiet(
    broker: BrokerServices, key: PartitionKey, entry: SessionPartition, replica: int, now_ms: int
) -> bool:
    if entry.told is None:
        return False
    partition = entry.leader
    if partition is None or not partition.leading:
        try:
            partition = broker.replicated(broker.leader_log(*key))
        except KafkaError:
            return False  # read: the follower is told the error
        entry.leader = partition
        if partition is None:
            return False
    plog, fetch = partition.log, entry.fetch
    if (
        fetch.fetch_offset != plog.log_end_offset
        or getattr(fetch, "current_leader_epoch", -1) not in (-1, plog.leader_epoch)
        or entry.told != (plog.high_watermark, plog.last_stable_offset, plog.log_start_offset)
    ):
        return False
    return partition.still_caught_up(replica, now_ms)


def _topic_names(ctx: RequestContext, request: Any) -> list[str | None]:
    """Each requested topic's name: given before v13, looked up by topic id from v13
    (None for an id no topic has: UNKNOWN_TOPIC_ID, before any authorization, as Kafka)."""
    if ctx.api_version < 13:
        return [t.topic for t in request.topics]
    return [ctx.broker.topic_name_by_id(t.topic_id) for t in request.topics]


def _wanted(names: list[str | None], request: Any) -> list[Topic]:
    """The request's topics: name, topic id (v13+) and the partitions asked for."""
    return [
        (name, getattr(t, "topic_id", None), t.partitions)
        for name, t in zip(names, request.topics, strict=True)
    ]


def _denied_topics(ctx: RequestContext, names: list[str | None], replica: int) -> frozenset[str]:
    known = [n for n in names if n is not None]
    if replica < 0:
        return authz.denied(ctx, AclOperation.READ, ResourceType.TOPIC, known)
    if authz.cluster_authorized(ctx, AclOperation.CLUSTER_ACTION):
        return frozenset()
    return frozenset(known)  # Kafka answers TOPIC_AUTHORIZATION_FAILED everywhere


def _read_all(
    ctx: RequestContext,
    request: Any,
    topics: list[Topic],
    replica: int,
    denied: frozenset[str],
) -> tuple[list[list[_PartitionRead]], int, bool]:
    committed = ctx.api_version >= 4 and request.isolation_level == READ_COMMITTED
    limit = request.max_bytes if ctx.api_version >= 3 else 2**31 - 1
    if replica < 0:  # a consumer's response stays within its fetch quota's window
        quota = ctx.broker.client_quotas.fetch_limit_bytes(
            ctx.session.principal, ctx.header.client_id or ""
        )
        limit = limit if quota is None else min(limit, quota)
    min_one = True
    total = 0
    failed = False
    out: list[list[_PartitionRead]] = []
    for name, _, partitions in topics:
        reads = []
        for p in partitions:
            if name is None:
                read = _PartitionRead(p.partition, ErrorCode.unknown_topic_id)
            elif name in denied:
                read = _PartitionRead(p.partition, ErrorCode.topic_authorization_failed)
            else:
                read = _read_partition(
                    ctx,
                    name,
                    p,
                    committed,
                    min(limit, p.partition_max_bytes),
                    min_one,
                    replica,
                )
            if read.region is not None:
                limit = max(0, limit - read.region.size)
                total += read.region.size
                min_one = False
            failed = failed or read.error is not ErrorCode.none
            reads.append(read)
        out.append(reads)
    return out, total, failed


def _read_partition(
    ctx: RequestContext,
    topic: str,
    p: Any,
    committed: bool,
    max_bytes: int,
    min_one: bool,
    replica: int,
) -> _PartitionRead:
    broker = ctx.broker
    try:
        plog = broker.leader_log(topic, p.partition)
        check_leader_epoch(plog.leader_epoch, getattr(p, "current_leader_epoch", -1))
        last_fetched = getattr(p, "last_fetched_epoch", -1)
        if last_fetched >= 0:
            diverging = _diverging(plog, p.partition, last_fetched, p.fetch_offset)
            if diverging is not None:
                return diverging
        if replica >= 0:
            return _read_for_follower(ctx, plog, p, max_bytes, replica)
        lso = plog.last_stable_offset
        upper = lso if committed else plog.high_watermark
        result = plog.read(p.fetch_offset, max_bytes, upper, min_one)
    except KafkaError as exc:
        read = _PartitionRead(p.partition, exc.code)
        if ctx.api_version >= 16 and exc.code in LEADER_MOVED:
            read.leader = current_leader(ctx, topic, p.partition)
        return read
    # Only those overlapping what was read, as Kafka: never the whole history after it.
    aborted = plog.aborted_transactions(p.fetch_offset, result) if committed else None
    return _PartitionRead(
        p.partition,
        ErrorCode.none,
        result.high_watermark,
        lso,
        result.log_start_offset,
        result.region,
        aborted,
    )


def _diverging(
    plog: PartitionLog, partition: int, last_fetched: int, fetch_offset: int
) -> _PartitionRead | None:
    """v12+ (KIP-595): the log diverges from the fetcher's when the epoch it last fetched ends
    here before its fetch offset, or only a lower epoch is known; it gets where, no records."""
    epoch, end = plog.epochs.end_offset_for(last_fetched, plog.log_end_offset)
    if epoch < 0 or end < 0:
        raise KafkaError(
            ErrorCode.offset_out_of_range, f"epoch {last_fetched} is not in {plog.name}'s log"
        )
    if end >= fetch_offset and epoch >= last_fetched:
        return None
    return _PartitionRead(
        partition,
        ErrorCode.none,
        plog.high_watermark,
        plog.last_stable_offset,
        plog.log_start_offset,
        diverging=(epoch, end),
    )


#: Errors after which Kafka (KIP-951: Fetch v16+, Produce v10+) names the current leader.
LEADER_MOVED = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch})


def current_leader(ctx: RequestContext, topic: str, partition: int) -> tuple[int, int]:
    """The partition's leader and epoch as this broker's metadata knows them (-1, -1: none)."""
    view = ctx.broker.partition_view(topic, partition)
    return (view.leader, view.leader_epoch) if view.leader >= 0 else (-1, -1)


def node_endpoints(ctx: RequestContext, leaders: set[int], entity: Any) -> tuple[Any, ...]:
    """KIP-951's node endpoints: the live ones among `leaders`, on the client's listener."""
    racks = ctx.broker.racks()
    return tuple(
        codec.build(entity, node_id=node, host=host, port=port, rack=racks.get(node))
        for node, host, port in ctx.broker.nodes(ctx.session.listener)
        if node in leaders
    )


def check_leader_epoch(leader_epoch: int, current: int) -> None:
    """KIP-320: a client that knows a newer epoch than ours talks to a stale leader; one
    that knows an older epoch must refresh its metadata first."""
    if current < 0 or current == leader_epoch:
        return
    if current < leader_epoch:
        raise KafkaError(ErrorCode.fenced_leader_epoch, f"epoch {current} < {leader_epoch}")
    raise KafkaError(ErrorCode.unknown_leader_epoch, f"epoch {current} > {leader_epoch}")


def _read_for_follower(
    ctx: RequestContext, plog: PartitionLog, p: Any, max_bytes: int, replica: int
) -> _PartitionRead:
    partition = ctx.broker.replicated(plog)
    if (
        partition is None
        or replica not in partition.state.replicas
        or replica == ctx.broker.node_id
    ):
        # Only the partition's own followers fetch as replicas: a client that sets
        # replica_id gets this error, never the unreplicated tail of the log.
        raise KafkaError(
            ErrorCode.replica_not_available,
            f"{replica} is not a follower of {plog.name}",
        )
    # A throttled replica outside the ISR gets no records while the leader's replication
    # throttle is over its rate (Kafka's shouldLeaderThrottle); what it gets counts.
    quota = partition.leader_throttle if replica not in partition.isr else None
    region = None
    log_start = plog.log_start_offset
    if quota is None or not quota.exceeded():
        result = plog.read(p.fetch_offset, max_bytes, plog.log_end_offset, True)
        region, log_start = result.region, result.log_start_offset
        if quota is not None and region is not None:
            quota.record(region.size)
    ctx.broker.writes.follower_fetched(
        plog, replica, p.fetch_offset, getattr(p, "log_start_offset", -1)
    )
    return _PartitionRead(
        p.partition,
        ErrorCode.none,
        plog.high_watermark,
        plog.last_stable_offset,
        log_start,
        region,
        None,
    )


def _encode(
    ctx: RequestContext,
    topics: list[Topic],
    reads: list[list[_PartitionRead]],
    error: ErrorCode = ErrorCode.none,
    session_id: int = 0,
) -> list[Any]:
    """The response as pieces, each partition's records a region of its segment file. The
    top, topics and common partitions are packed here (byte for byte kio's encoding,
    tests/property/test_fetch_encoding_props.py); a partition with aborted transactions,
    a diverging epoch or a leader hint is encoded by kio with empty records, cut off and
    replaced by the region's length and the region. Flexible versions (v12+) end an array
    with a compact count (n+1) and every entity with a tag buffer; records' compact length
    is size+1."""
    version = ctx.api_version
    key = ctx.header.api_key
    flexible = version >= 12
    cut = 2 if flexible else 4  # compact empty array/bytes + tag buffer, or an int32
    count = compact_length if flexible else _I32.pack
    tags = b"\x00" if flexible else b""
    # The top and each topic up to their arrays, packed here like the partitions below.
    top = _I32.pack(0)  # throttle time: a quota sets it later (throttling.with_throttle)
    if version >= 7:
        top += _ERROR_SESSION.pack(error, session_id)  # 0: no session (fetch_sessions.py)
    parts: list[Any] = [top, count(len(reads))]
    leaders: set[int] = set()
    topic_cls = codec.nested(key, version, "FetchableTopicResponse")
    partition_cls = codec.nested(key, version, "PartitionData")
    aborted_cls = codec.nested(key, version, "AbortedTransaction")
    for (name, topic_id, _), topic_reads in zip(topics, reads, strict=True):
        if version >= 13 and topic_id is not None:
            parts.append(topic_id.bytes)  # by topic id
        elif version >= 13 or name is None:
            head = codec.build(topic_cls, topic=None, topic_id=topic_id, partitions=())
            parts.append(codec.encode_body(head)[:-cut])
        else:
            raw = name.encode()
            parts.append((compact_length(len(raw)) if flexible else _I16.pack(len(raw))) + raw)
        parts.append(count(len(topic_reads)))
        for read in topic_reads:
            if read.aborted is None and read.leader is None and read.diverging is None:
                parts.extend(_plain_partition(version, read))
                continue
            aborted = None
            if read.aborted is not None:
                aborted = tuple(
                    codec.build(aborted_cls, producer_id=t.producer_id, first_offset=t.first_offset)
                    for t in read.aborted
                )
            fields = dict(
                partition_index=read.partition,
                error_code=read.error,
                high_watermark=read.high_watermark,
                last_stable_offset=read.last_stable_offset,
                log_start_offset=read.log_start_offset,
                aborted_transactions=aborted,
                preferred_read_replica=-1,
                records=b"",
            )
            if read.leader is not None:
                leaders.add(read.leader[0])
                fields["current_leader"] = codec.build(
                    codec.nested(key, version, "LeaderIdAndEpoch"),
                    leader_id=read.leader[0],
                    leader_epoch=read.leader[1],
                )
            if read.diverging is not None:
                fields["diverging_epoch"] = codec.build(
                    codec.nested(key, version, "EpochEndOffset"),
                    epoch=read.diverging[0],
                    end_offset=read.diverging[1],
                )
            encoded = codec.encode_body(codec.build(partition_cls, **fields))
            if read.region is None:
                parts.append(encoded)
            elif not flexible:
                parts.append(encoded[:-4] + _I32.pack(read.region.size))
                parts.append(read.region)
            else:
                # A region is never sent with a diverging epoch, so the tag buffer is empty.
                parts.append(encoded[:-2] + compact_length(read.region.size))
                parts.append(read.region)
                parts.append(tags)
        if flexible:
            parts.append(tags)  # the topic's
    if flexible:
        parts.append(_top_tags(ctx, leaders))
    return parts


# A partition's entry up to its records, for the common case (no aborted transactions, no
# diverging epoch, no leader hint): packed here, byte for byte what kio writes
# (tests/property/test_fetch_encoding_props.py), as kio's generic writer costs a few
# microseconds per field on a path every fetch takes. Aborted transactions are a null
# array; v11+ has preferred_read_replica -1.
_HEAD_V4 = struct.Struct(">ihqq")  # partition, error, high watermark, LSO
_HEAD_V5 = struct.Struct(">ihqqq")  # and log start
_NULL_ARRAY = _I32.pack(-1)
_NO_READ_REPLICA = _I32.pack(-1)


def _plain_partition(version: int, read: _PartitionRead) -> list[Any]:
    """The encoded pieces of one partition without aborted transactions, diverging epoch or
    leader hint: its fields, its records (a region or none) and, when flexible, tags."""
    if version >= 5:
        head = _HEAD_V5.pack(
            read.partition,
            read.error,
            read.high_watermark,
            read.last_stable_offset,
            read.log_start_offset,
        )
    else:
        head = _HEAD_V4.pack(
            read.partition, read.error, read.high_watermark, read.last_stable_offset
        )
    size = read.region.size if read.region is not None else 0
    if version >= 12:  # flexible: compact null array, compact bytes, empty tag buffers
        head += b"\x00" + _NO_READ_REPLICA + compact_length(size)
        return [head, read.region, b"\x00"] if read.region is not None else [head + b"\x00"]
    head += _NULL_ARRAY + (_NO_READ_REPLICA if version >= 11 else b"") + _I32.pack(size)
    return [head, read.region] if read.region is not None else [head]


def _top_tags(ctx: RequestContext, leaders: set[int]) -> bytes:
    """The response's tag buffer: empty, or v16+'s node endpoints of the leaders named."""
    if not leaders:
        return b"\x00"
    entity = codec.nested(ctx.header.api_key, ctx.api_version, "NodeEndpoint")
    endpoints = node_endpoints(ctx, leaders, entity)
    if not endpoints:
        return b"\x00"
    top = ctx.response(
        throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=0, responses=()
    )
    without = codec.encode_body(top)
    with_endpoints = codec.encode_body(dataclasses.replace(top, node_endpoints=endpoints))
    return with_endpoints[len(without) - 1 :]
