"""ApiVersions: the versions this broker implements, so clients can negotiate, and (v3+)
the feature levels (KIP-584) it supports and has finalized.

As Kafka's handleApiVersionsRequest: from v3 the client's software name and version must
match Kafka's pattern, else INVALID_REQUEST with no API list; below v4 a supported feature
whose minimum level is 0 is left out (KAFKA-17492: older clients cannot read it); a feature
finalized at level 0 is never listed. Onceflow's own APIs are listed only to its own
clients (protocol/onceflow_apis.py).
"""

from __future__ import annotations

import datetime
import re
from typing import Any

from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.static.primitive import i16

from onceflow.broker.handlers.base import RequestContext
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import (
    ADVERTISED_VERSIONS,
    SUPPORTED_FEATURES,
    SUPPORTED_VERSIONS,
    ApiKey,
    finalized_features,
)
from onceflow.protocol.onceflow_apis import CLIENT_SOFTWARE_NAME, OWN_API_KEYS

# Kafka's ApiVersionsRequest.SOFTWARE_NAME_VERSION_PATTERN.
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")
_FEATURES = 3  # the first version with feature levels (KIP-584)
# From this version a supported feature with minimum level 0 may be listed.
_LEVEL_ZERO_LISTED = 4


async def handle_api_versions(ctx: RequestContext, request: Any) -> Any:
    version = ctx.api_version
    if version >= 3 and not (
        _SOFTWARE.fullmatch(request.client_software_name)
        and _SOFTWARE.fullmatch(request.client_software_version)
    ):
        return ctx.response(
            error_code=ErrorCode.invalid_request,
            api_keys=(),
            throttle_time=datetime.timedelta(0),
        )
    ours = version >= 3 and request.client_software_name == CLIENT_SOFTWARE_NAME
    keys = tuple(
        ctx.entity("ApiVersion", api_key=key, min_version=lo, max_version=hi)
        for key, (lo, hi) in sorted(ADVERTISED_VERSIONS.items())
        if ours or key not in OWN_API_KEYS
    )
    if version < _FEATURES:
        return ctx.response(
            error_code=ErrorCode.none, api_keys=keys, throttle_time=datetime.timedelta(0)
        )
    supported = tuple(
        ctx.entity("SupportedFeatureKey", name=name, min_version=lo, max_version=hi)
        for name, (lo, hi) in sorted(SUPPORTED_FEATURES.items())
        if lo > 0 or version >= _LEVEL_ZERO_LISTED
    )
    levels, epoch = finalized_features(ctx.broker.config.onceflow_transaction_version)
    finalized = tuple(
        ctx.entity("FinalizedFeatureKey", name=name, max_version_level=lvl, min_version_level=lvl)
        for name, lvl in sorted(levels.items())
        if lvl != 0
    )
    return ctx.response(
        error_code=ErrorCode.none,
        api_keys=keys,
        throttle_time=datetime.timedelta(0),
        supported_features=supported,
        finalized_features_epoch=epoch,
        finalized_features=finalized,
        zk_migration_ready=False,
    )


def unsupported_version_response() -> Any:
    """Kafka's answer to an ApiVersions version it does not know (KIP-511): v0, error 35,
    and only ApiVersions' own range, so the client retries at a version both sides speak."""
    lo, hi = SUPPORTED_VERSIONS[ApiKey.API_VERSIONS]
    return ApiVersionsResponseV0(
        error_code=ErrorCode.unsupported_version,
        api_keys=(
            ApiVersionV0(
                api_key=i16(ApiKey.API_VERSIONS), min_version=i16(lo), max_version=i16(hi)
            ),
        ),
    )
