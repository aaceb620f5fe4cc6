"""InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn."""

from __future__ import annotations

import datetime
from typing import Any

from onceflow.broker.handlers.base import Handler, RequestContext
from onceflow.errors import ErrorCode, KafkaError
from onceflow.protocol.api_versions import ApiKey

OFFSETS_TOPIC = "__consumer_offsets"
_NO_THROTTLE = datetime.timedelta(0)


def _fenced_for(version: int, first_version_with_fenced: int, error: ErrorCode) -> ErrorCode:
    """PRODUCER_FENCED is newer than some API versions; older clients expect
    INVALID_PRODUCER_EPOCH for the same situation (as Kafka answers them)."""
    if error is ErrorCode.producer_fenced and version < first_version_with_fenced:
        return ErrorCode.invalid_producer_epoch
    return error


async def handle_init_producer_id(ctx: RequestContext, request: Any) -> Any:
    """Without a transactional id: a brand-new producer id at epoch 0, whatever id and
    epoch a KIP-360 client sends, since a fresh id can never collide with state a partition
    still holds. With one: the transaction coordinator's epoch bump and fencing."""
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
    )
    return ctx.response(
        throttle_time=_NO_THROTTLE,
        error_code=_fenced_for(version, 4, result.error),
        producer_id=result.producer_id,
        producer_epoch=result.producer_epoch,
    )


async def handle_add_partitions_to_txn(ctx: RequestContext, request: Any) -> Any:
    if ctx.api_version >= 4:
        return await _add_partitions_batched(ctx, request)
    broker = ctx.broker
    wanted = [
        (topic.name, partition)
        for topic in request.v3_and_below_topics
        for partition in topic.partitions
    ]
    unknown = {tp for tp in wanted if not broker.has_partition(*tp)}
    if unknown:
        # Kafka answers the unknown partitions and marks the rest as not attempted.
        errors = {
            tp: ErrorCode.unknown_topic_or_partition
            if tp in unknown
            else ErrorCode.operation_not_attempted
            for tp in wanted
        }
    else:
        error = await broker.txn_coordinator.add_partitions(
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            wanted,
        )
        error = _fenced_for(ctx.api_version, 2, error)
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
    return ctx.response(
        throttle_time=_NO_THROTTLE,
        results_by_topic_v3_and_below=tuple(
            ctx.entity("AddPartitionsToTxnTopicResult", name=t, results_by_partition=tuple(r))
            for t, r in by_topic.items()
        ),
    )


async def _add_partitions_batched(ctx: RequestContext, request: Any) -> Any:
    """v4+, sent by brokers (Kafka 3.6+): several transactions at once; with verify_only,
    only whether each partition is in the producer's ongoing transaction (KIP-890)."""
    broker = ctx.broker
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
                txn.transactional_id, txn.producer_id, txn.producer_epoch, wanted
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
    partition = broker.group_coordinator.partition_for(request.group_id)
    error = await broker.txn_coordinator.add_partitions(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        [(OFFSETS_TOPIC, partition)],
    )
    return ctx.response(
        throttle_time=_NO_THROTTLE, error_code=_fenced_for(ctx.api_version, 2, error)
    )


async def handle_end_txn(ctx: RequestContext, request: Any) -> Any:
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
