"""OffsetForLeaderEpoch (KIP-101, KIP-279): where a leader epoch ends in the leader's log.

Followers ask it after a leader change to find where their log diverges; consumers ask it
to validate their position after a leader change (KIP-320). The answer comes from the
leader-epoch cache: the largest epoch not above the one asked for, and the offset where the
next epoch starts (the log end for the latest).

Authorization is Kafka's (KIP-320): CLUSTER_ACTION on the cluster (the followers') covers
every topic, else each topic needs DESCRIBE (the consumers'), or its partitions answer
TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import datetime
from typing import Any

from onceflow.broker.handlers import authz
from onceflow.broker.handlers.base import RequestContext
from onceflow.broker.handlers.fetch import check_leader_epoch
from onceflow.errors import ErrorCode, KafkaError
from onceflow.security.acl import AclOperation, ResourceType

UNDEFINED = -1


async def handle_offset_for_leader_epoch(ctx: RequestContext, request: Any) -> Any:
    denied: frozenset[str] = frozenset()
    if not authz.cluster_authorized(ctx, AclOperation.CLUSTER_ACTION, quiet=True):
        names = (t.topic for t in request.topics)
        denied = authz.denied(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
    topics = []
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            try:
                if topic.topic in denied:
                    raise KafkaError(ErrorCode.topic_authorization_failed)
                plog = ctx.broker.leader_log(topic.topic, p.partition)
                check_leader_epoch(plog.leader_epoch, p.current_leader_epoch)
                if plog.offline is not None:
                    raise KafkaError(ErrorCode.kafka_storage_error, plog.offline)
                if plog.epochs.latest_epoch is None and p.leader_epoch == plog.leader_epoch:
                    epoch, end = plog.leader_epoch, plog.log_end_offset  # nothing written yet
                else:
                    epoch, end = plog.epochs.end_offset_for(p.leader_epoch, plog.log_end_offset)
                error = ErrorCode.none
            except KafkaError as exc:
                error, epoch, end = exc.code, UNDEFINED, UNDEFINED
            partitions.append(
                ctx.entity(
                    "EpochEndOffset",
                    error_code=error,
                    partition=p.partition,
                    leader_epoch=epoch,
                    end_offset=end,
                )
            )
        topics.append(
            ctx.entity(
                "OffsetForLeaderTopicResult", topic=topic.topic, partitions=tuple(partitions)
            )
        )
    return ctx.response(throttle_time=datetime.timedelta(0), topics=tuple(topics))
