"""ApiVersions: the versions this broker implements, so clients can negotiate."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.static.primitive import i16

from onceflow.broker.handlers.base import RequestContext
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import SUPPORTED_VERSIONS


async def handle_api_versions(ctx: RequestContext, request: Any) -> Any:
    keys = tuple(
        ctx.entity("ApiVersion", api_key=key, min_version=lo, max_version=hi)
        for key, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())
    )
    return ctx.response(
        error_code=ErrorCode.none,
        api_keys=keys,
        throttle_time=datetime.timedelta(0),
        supported_features=(),
        finalized_features_epoch=-1,
        finalized_features=(),
        zk_migration_ready=False,
    )


def unsupported_version_response() -> Any:
    """Kafka's answer to an ApiVersions version it does not know: v0, error 35, and the
    range it supports, so the client retries at a version both sides speak."""
    return ApiVersionsResponseV0(
        error_code=ErrorCode.unsupported_version,
        api_keys=tuple(
            ApiVersionV0(api_key=i16(key), min_version=i16(lo), max_version=i16(hi))
            for key, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())
        ),
    )
