"""DeleteTopics: by name (v1-5), by name or topic id (v6+, KIP-516), as Kafka's controller
answers it.

Each name or id is answered once: a repeated one is INVALID_REQUEST, as is an entry with
both a name and an id or neither. An unknown id is UNKNOWN_TOPIC_ID, an unknown name
UNKNOWN_TOPIC_OR_PARTITION. Deleting needs DELETE on the topic, and a topic given by name
DESCRIBE too (TOPIC_AUTHORIZATION_FAILED otherwise); DELETE on the CLUSTER grants both for
every topic, as in Kafka's controller. A refused topic given by id is named in the answer
only to who may DESCRIBE it, so ids reveal no names. v6 answers carry both the name and the
id of every topic found.
"""

from __future__ import annotations

import datetime
import uuid
from collections import Counter
from typing import Any, NamedTuple

from onceflow.broker.handlers import authz, client_quotas
from onceflow.broker.handlers.base import RequestContext
from onceflow.errors import ErrorCode, KafkaError
from onceflow.protocol.topic_ids import ZERO_UUID
from onceflow.security.acl import AclOperation, ResourceType

_BY_ID_VERSION = 6
_DISABLED_CODE_VERSION = 3  # before it, deletion being off is INVALID_REQUEST


class _Ref(NamedTuple):
    """One entry of the request: a topic name, a topic id, or (invalid) both or neither."""

    name: str | None
    topic_id: uuid.UUID | None


async def handle_delete_topics(ctx: RequestContext, request: Any) -> Any:
    refs = _refs(ctx.api_version, request)
    if not ctx.broker.config.delete_topic_enable:
        code = (
            ErrorCode.topic_deletion_disabled
            if ctx.api_version >= _DISABLED_CODE_VERSION
            else ErrorCode.invalid_request
        )
        results = [
            _result(ctx, r.name, r.topic_id, code, "Topic deletion is disabled.") for r in refs
        ]
        return _response(ctx, results)
    names = Counter(r.name for r in refs if r.name is not None and r.topic_id is None)
    ids = Counter(r.topic_id for r in refs if r.name is None and r.topic_id is not None)
    by_id = ctx.broker.topics_by_id() if ids else {}
    resolved = {r.name if r.topic_id is None else by_id.get(r.topic_id) for r in refs}
    known = [n for n in resolved if n is not None]
    if authz.cluster_authorized(ctx, AclOperation.DELETE, quiet=True):
        refused = hidden = frozenset[str]()
    else:
        refused = authz.denied(ctx, AclOperation.DELETE, ResourceType.TOPIC, known)
        hidden = authz.denied(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, known, quiet=True)
    # A deletable topic given once by name and once by id: both entries are refused and the
    # topic stays, as Kafka's controller answers (only when deletable, so no id is revealed).
    clash = {
        ctx.broker.topic_id(name) for name, n in names.items() if n == 1 and name not in refused
    } & {topic_id for topic_id, n in ids.items() if n == 1}
    results = []
    answered: set[_Ref] = set()
    for ref in refs:
        if ref in answered:
            continue  # a repeated entry is answered once
        answered.add(ref)
        name, topic_id = ref.name, ref.topic_id
        try:
            if name is None and topic_id is None:
                raise KafkaError(
                    ErrorCode.invalid_request, "Neither topic name nor id were specified."
                )
            if name is not None and topic_id is not None:
                raise KafkaError(
                    ErrorCode.invalid_request, "You may not specify both topic name and topic id."
                )
            if (name is not None and names[name] > 1) or (
                topic_id is not None and ids[topic_id] > 1
            ):
                what = "name" if topic_id is None else "id"
                raise KafkaError(ErrorCode.invalid_request, f"Duplicate topic {what}.")
            if topic_id is not None:
                name = by_id.get(topic_id)
                if name is None:
                    raise KafkaError(ErrorCode.unknown_topic_id, f"no topic with id {topic_id}")
            target: str = name if name is not None else ""
            if target in refused or (ref.name is not None and target in hidden):
                if ref.name is None and target in hidden:
                    name = None  # the id's name stays hidden
                raise KafkaError(ErrorCode.topic_authorization_failed)
            if ctx.broker.topic_partition_count(target) is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, f"no topic '{target}'")
            topic_id = ctx.broker.topic_id(target)
            if topic_id in clash:
                raise KafkaError(
                    ErrorCode.invalid_request,
                    "The provided topic name maps to an ID that was already supplied.",
                )
            client_quotas.check_mutation(ctx)
            partitions = ctx.broker.topic_partition_count(target) or 0
            await ctx.broker.delete_topic(target)
            client_quotas.record_mutation(ctx, partitions)
            results.append(_result(ctx, name, topic_id, ErrorCode.none, None))
        except KafkaError as exc:
            results.append(_result(ctx, name, topic_id, exc.code, exc.message))
    return _response(ctx, results)


def _refs(version: int, request: Any) -> list[_Ref]:
    if version < _BY_ID_VERSION:
        return [_Ref(name, None) for name in request.topic_names]
    return [
        _Ref(t.name, None if t.topic_id in (None, ZERO_UUID) else t.topic_id)
        for t in request.topics
    ]


def _result(
    ctx: RequestContext,
    name: str | None,
    topic_id: uuid.UUID | None,
    error: ErrorCode,
    message: str | None,
) -> Any:
    return ctx.entity(
        "DeletableTopicResult",
        name=name,
        topic_id=topic_id or ZERO_UUID,
        error_code=error,
        error_message=message,
    )


def _response(ctx: RequestContext, results: list[Any]) -> Any:
    return ctx.response(throttle_time=datetime.timedelta(0), responses=tuple(results))
