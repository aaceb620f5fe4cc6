"""InitProducerId, and (with the transactions issue) the transaction APIs."""

from __future__ import annotations

import datetime
from typing import Any

from onceflow.broker.handlers.base import Handler, RequestContext
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey


async def handle_init_producer_id(ctx: RequestContext, request: Any) -> Any:
    """An idempotent producer (no transactional id) always gets a brand-new producer id at
    epoch 0, whatever id and epoch it sends (KIP-360 clients send their current ones):
    a fresh id can never collide with state any partition still holds."""
    if request.transactional_id is not None:
        return ctx.response(
            throttle_time=datetime.timedelta(0),
            error_code=ErrorCode.transactional_id_authorization_failed,
            producer_id=-1,
            producer_epoch=-1,
        )
    return ctx.response(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        producer_id=ctx.broker.producer_ids.next_id(),
        producer_epoch=0,
    )


HANDLERS: dict[int, Handler] = {ApiKey.INIT_PRODUCER_ID: handle_init_producer_id}
