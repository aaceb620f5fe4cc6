"""InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn.

EndTxn v5 and AddPartitionsToTxn v5 without verify_only are transaction version 2 (KIP-890
part 2): an epoch bump at every end, and a partition added by its leader for a write.

InitProducerId v6 is KIP-939's two-phase commit: enable2Pc (transactions no timeout aborts)
and keepPreparedTxn (a new instance keeps the open transaction to complete it).

Authorization is Kafka's, before the coordinator is asked: a transactional id needs WRITE
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED), and TWO_PHASE_COMMIT too with enable2Pc; an
idempotent producer's InitProducerId needs IDEMPOTENT_WRITE on the cluster or WRITE on some
topic (CLUSTER_AUTHORIZATION_FAILED, KIP-679);
AddPartitionsToTxn also WRITE on each topic (an internal topic is always refused: only
the coordinators add those), and from v4 (brokers verifying, KIP-890) CLUSTER_ACTION;
AddOffsetsToTxn READ on the group.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from onceflow.broker.handlers import authz
from onceflow.broker.handlers.base import Handler, RequestContext
from onceflow.broker.responses import answered_later
from onceflow.broker.topics import INTERNAL_TOPICS, OFFSETS_TOPIC
from onceflow.errors import ErrorCode, KafkaError
from onceflow.protocol.api_versions import ApiKey
from onceflow.security.acl import AclOperation, ResourceType

_NO_THROTTLE = datetime.timedelta(0)
TXN_DENIED = ErrorCode.transactional_id_authorization_failed
_END_TXN_BUMPING = 5  # EndTxn v5: transaction version 2
_ADDED_BY_WRITE = 5  # AddPartitionsToTxn v5 without verify_only: a broker adds for a TV2 write


def _may_write(ctx: RequestContext, transactional_id: str) -> bool:
    return ctx.authorized(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


def _fenced_for(version: int, first_version_with_fenced: int, error: ErrorCode) -> ErrorCode:
    """PRODUCER_FENCED is newer than some API versions; older clients expect
    INVALID_PRODUCER_EPOCH for the same situation (as Kafka answers them)."""
    if error is ErrorCode.producer_fenced and version < first_version_with_fenced:
        return ErrorCode.invalid_producer_epoch
    return error


async def handle_init_producer_id(ctx: RequestContext, request: Any) -> Any:
    """Without a transactional id: a brand-new producer id at epoch 0, whatever id and
    epoch a KIP-360 client sends, since a fresh id can never collide with state a partition
    still holds. With one: the transaction coordinator's epoch bump and fencing. The two
    KIP-939 flags need a transactional id (INVALID_REQUEST without one)."""
    two_phase = bool(getattr(request, "enable2_pc", False))
    keep = bool(getattr(request, "keep_prepared_txn", False))
    denied = _init_denied(ctx, request.transactional_id, two_phase)
    if denied is None and request.transactional_id is None and (two_phase or keep):
        denied = ErrorCode.invalid_request
    if denied is not None:
        return ctx.response(
            throttle_time=_NO_THROTTLE, error_code=denied, producer_id=-1, producer_epoch=-1
        )
    if request.transactional_id is None:
        try:
            producer_id, error = ctx.broker.producer_ids.next_id(), ErrorCode.none
        except KafkaError as exc:  # on a cluster, ZooKeeper could not give a block
            producer_id, error = -1, exc.code
        return ctx.response(
            throttle_time=_NO_THROTTLE,
            error_code=error,
            producer_id=producer_id,
            producer_epoch=0 if producer_id >= 0 else -1,
        )
    version = ctx.api_version
    result = await ctx.broker.txn_coordinator.init_producer_id(
        request.transactional_id,
        int(request.transaction_timeout.total_seconds() * 1000),
        request.producer_id if version >= 3 else -1,
        request.producer_epoch if version >= 3 else -1,
        two_phase=two_phase,
        keep_prepared=keep,
    )
    return ctx.response(
        throttle_time=_NO_THROTTLE,
        error_code=_fenced_for(version, 4, result.error),
        producer_id=result.producer_id,
        producer_epoch=result.producer_epoch,
        ongoing_txn_producer_id=result.ongoing_producer_id,
        ongoing_txn_producer_epoch=result.ongoing_producer_epoch,
    )


def _init_denied(
    ctx: RequestContext, transactional_id: str | None, two_phase: bool
) -> ErrorCode | None:
    if transactional_id is not None:
        if not _may_write(ctx, transactional_id):
            return TXN_DENIED
        if two_phase and not ctx.authorized(
            AclOperation.TWO_PHASE_COMMIT, ResourceType.TRANSACTIONAL_ID, transactional_id
        ):
            return TXN_DENIED
        return None
    if authz.cluster_authorized(
        ctx, AclOperation.IDEMPOTENT_WRITE, quiet=True
    ) or ctx.authorized_any(AclOperation.WRITE, ResourceType.TOPIC):
        return None
    return ErrorCode.cluster_authorization_failed


async def handle_add_partitions_to_txn(ctx: RequestContext, request: Any) -> Any:
    if ctx.api_version >= 4:
        return await _add_partitions_batched(ctx, request)
    broker = ctx.broker
    txn_id = request.v3_and_below_transactional_id
    wanted = [
        (topic.name, partition)
        for topic in request.v3_and_below_topics
        for partition in topic.partitions
    ]
    refused = _refused_partitions(ctx, txn_id, wanted)
    if refused is not None:
        return _add_partitions_response(ctx, refused)
    # Registered with the coordinator now, answered later: librdkafka's AddOffsetsToTxn,
    # right behind on this connection, may join this add (coordinator/transaction/adds.py).
    added = broker.txn_coordinator.add_partitions(
        txn_id,
        request.v3_and_below_producer_id,
        request.v3_and_below_producer_epoch,
        wanted,
    )

    async def answer() -> Any:
        error = _fenced_for(ctx.api_version, 2, await added)
        return _add_partitions_response(ctx, dict.fromkeys(wanted, error))

    return answered_later(asyncio.ensure_future(answer()))


def _add_partitions_response(ctx: RequestContext, errors: dict[tuple[str, int], ErrorCode]) -> Any:
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), error in errors.items():
        by_topic.setdefault(topic, []).append(
            ctx.entity(
                "AddPartitionsToTxnPartitionResult",
                partition_index=partition,
                partition_error_code=error,
            )
        )
    return ctx.response(
        throttle_time=_NO_THROTTLE,
        results_by_topic_v3_and_below=tuple(
            ctx.entity("AddPartitionsToTxnTopicResult", name=t, results_by_partition=tuple(r))
            for t, r in by_topic.items()
        ),
    )


def _refused_partitions(
    ctx: RequestContext, txn_id: str, wanted: list[tuple[str, int]]
) -> dict[tuple[str, int], ErrorCode] | None:
    """Kafka's checks before the coordinator is asked: WRITE on the transactional id, WRITE
    on each topic (never an internal one: only coordinators add those), each partition
    known. A failure fails them all: its partitions with its error, the others with
    OPERATION_NOT_ATTEMPTED. None: all passed."""
    if not _may_write(ctx, txn_id):
        return dict.fromkeys(wanted, TXN_DENIED)
    names = (t for t, _ in wanted if t not in INTERNAL_TOPICS)
    denied = authz.denied(ctx, AclOperation.WRITE, ResourceType.TOPIC, names)
    errors: dict[tuple[str, int], ErrorCode] = {}
    for tp in wanted:
        if tp[0] in denied or tp[0] in INTERNAL_TOPICS:
            errors[tp] = ErrorCode.topic_authorization_failed
        elif not ctx.broker.has_partition(*tp):
            errors[tp] = ErrorCode.unknown_topic_or_partition
    if not errors:
        return None
    return {tp: errors.get(tp, ErrorCode.operation_not_attempted) for tp in wanted}


async def _add_partitions_batched(ctx: RequestContext, request: Any) -> Any:
    """v4+, sent by brokers (Kafka 3.6+): several transactions at once; with verify_only,
    only whether each partition is in the producer's ongoing transaction (KIP-890); from
    v5 without it, the partition leader adding the partition a transaction version 2
    write goes to (KIP-890 part 2)."""
    broker = ctx.broker
    if not authz.cluster_authorized(ctx, AclOperation.CLUSTER_ACTION):
        return ctx.response(
            throttle_time=_NO_THROTTLE,
            error_code=ErrorCode.cluster_authorization_failed,
            results_by_transaction=(),
        )
    results = []
    for txn in request.transactions:
        wanted = [(topic.name, p) for topic in txn.topics for p in topic.partitions]
        errors: dict[tuple[str, int], ErrorCode] = {}
        if txn.verify_only:
            for tp in wanted:
                try:
                    broker.txn_coordinator.verify(
                        txn.transactional_id, txn.producer_id, txn.producer_epoch, tp
                    )
                    errors[tp] = ErrorCode.none
                except KafkaError as exc:
                    errors[tp] = exc.code
        else:
            error = await broker.txn_coordinator.add_partitions(
                txn.transactional_id,
                txn.producer_id,
                txn.producer_epoch,
                wanted,
                client_version=2 if ctx.api_version >= _ADDED_BY_WRITE else 0,
            )
            errors = dict.fromkeys(wanted, error)
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), error in errors.items():
            by_topic.setdefault(topic, []).append(
                ctx.entity(
                    "AddPartitionsToTxnPartitionResult",
                    partition_index=partition,
                    partition_error_code=error,
                )
            )
        results.append(
            ctx.entity(
                "AddPartitionsToTxnResult",
                transactional_id=txn.transactional_id,
                topic_results=tuple(
                    ctx.entity(
                        "AddPartitionsToTxnTopicResult", name=t, results_by_partition=tuple(r)
                    )
                    for t, r in by_topic.items()
                ),
            )
        )
    return ctx.response(
        throttle_time=_NO_THROTTLE, error_code=ErrorCode.none, results_by_transaction=tuple(results)
    )


async def handle_add_offsets_to_txn(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    if not _may_write(ctx, request.transactional_id):
        return ctx.response(throttle_time=_NO_THROTTLE, error_code=TXN_DENIED)
    if not ctx.authorized(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ctx.response(
            throttle_time=_NO_THROTTLE, error_code=ErrorCode.group_authorization_failed
        )
    partition = broker.group_coordinator.partition_for(request.group_id)
    # Registered now, answered later: it may join the add right before it (adds.py).
    added = broker.txn_coordinator.add_partitions(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        [(OFFSETS_TOPIC, partition)],
    )

    async def answer() -> Any:
        error = _fenced_for(ctx.api_version, 2, await added)
        return ctx.response(throttle_time=_NO_THROTTLE, error_code=error)

    return answered_later(asyncio.ensure_future(answer()))


async def handle_end_txn(ctx: RequestContext, request: Any) -> Any:
    """v5 is transaction version 2 (KIP-890 part 2): every end bumps the producer epoch,
    and the answer carries the producer id and epoch of the next transaction."""
    if not _may_write(ctx, request.transactional_id):
        return ctx.response(
            throttle_time=_NO_THROTTLE, error_code=TXN_DENIED, producer_id=-1, producer_epoch=-1
        )
    if ctx.api_version >= _END_TXN_BUMPING:
        result = await ctx.broker.txn_coordinator.end_txn_bumping(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            bool(request.committed),
        )
        return ctx.response(
            throttle_time=_NO_THROTTLE,
            error_code=result.error,
            producer_id=result.producer_id,
            producer_epoch=result.producer_epoch,
        )
    error = await ctx.broker.txn_coordinator.end_txn(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        bool(request.committed),
    )
    return ctx.response(
        throttle_time=_NO_THROTTLE, error_code=_fenced_for(ctx.api_version, 2, error)
    )


HANDLERS: dict[int, Handler] = {
    ApiKey.INIT_PRODUCER_ID: handle_init_producer_id,
    ApiKey.ADD_PARTITIONS_TO_TXN: handle_add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: handle_add_offsets_to_txn,
    ApiKey.END_TXN: handle_end_txn,
}
