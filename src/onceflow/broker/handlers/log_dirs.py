"""DescribeLogDirs: the data dir, its partitions' sizes, and (v4) its total and usable
bytes, as `kafka-log-dirs.sh --describe` shows them.

A partition whose log went offline after a storage failure is left out of its dir, as
Kafka leaves out the partitions of an offline dir; Metadata lists it as offline.

It needs DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED with no dirs (v3+ carry
the code; older versions, as in Kafka, see only the empty list).
"""

from __future__ import annotations

import datetime
import os
from collections import defaultdict
from typing import Any

from onceflow.broker.handlers import authz
from onceflow.broker.handlers.base import Handler, RequestContext
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.security.acl import AclOperation


async def handle_describe_log_dirs(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    if not authz.cluster_authorized(ctx, AclOperation.DESCRIBE):
        return ctx.response(
            throttle_time=datetime.timedelta(0),
            error_code=ErrorCode.cluster_authorization_failed,
            results=(),
        )
    wanted: dict[str, set[int]] | None = None
    if request.topics is not None:
        wanted = {t.topic: set(t.partitions) for t in request.topics}
    sizes: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for plog in broker.logs:
        if plog.offline is not None:
            continue
        if wanted is not None and plog.partition not in wanted.get(plog.topic, ()):
            continue
        sizes[plog.topic].append((plog.partition, plog.size_bytes))
    topics = tuple(
        ctx.entity(
            "DescribeLogDirsTopic",
            name=name,
            partitions=tuple(
                ctx.entity(
                    "DescribeLogDirsPartition",
                    partition_index=index,
                    partition_size=size,
                    offset_lag=0,
                    is_future_key=False,
                )
                for index, size in sorted(parts)
            ),
        )
        for name, parts in sorted(sizes.items())
    )
    broker.disk.refresh()
    usage = broker.disk.usage
    result = ctx.entity(
        "DescribeLogDirsResult",
        error_code=ErrorCode.none,
        log_dir=os.path.abspath(broker.log_dir),
        topics=topics,
        total_bytes=usage.total,
        usable_bytes=usage.free,
    )
    return ctx.response(
        throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, results=(result,)
    )


HANDLERS: dict[int, Handler] = {ApiKey.DESCRIBE_LOG_DIRS: handle_describe_log_dirs}
