"""CompleteTransactions, Onceflow's own API (protocol/onceflow_apis.py): end several
prepared two-phase-commit transactions as one decision.

Each transactional id needs what completing it alone needs, WRITE and TWO_PHASE_COMMIT;
one refused id refuses the whole request (TRANSACTIONAL_ID_AUTHORIZATION_FAILED for it,
OPERATION_NOT_ATTEMPTED for the others), since a decision is taken whole or not at all.
"""

from __future__ import annotations

import datetime
from typing import Any

from onceflow.broker.handlers.base import Handler, RequestContext
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.security.acl import AclOperation, ResourceType

_NO_THROTTLE = datetime.timedelta(0)


def _may_complete(ctx: RequestContext, transactional_id: str) -> bool:
    return all(
        ctx.authorized(operation, ResourceType.TRANSACTIONAL_ID, transactional_id)
        for operation in (AclOperation.WRITE, AclOperation.TWO_PHASE_COMMIT)
    )


async def handle_complete_transactions(ctx: RequestContext, request: Any) -> Any:
    members = [(t.transactional_id, t.producer_id, t.producer_epoch) for t in request.transactions]
    denied = {txn_id for txn_id, _, _ in members if not _may_complete(ctx, txn_id)}
    if denied:
        answers = {
            txn_id: ErrorCode.transactional_id_authorization_failed
            if txn_id in denied
            else ErrorCode.operation_not_attempted
            for txn_id, _, _ in members
        }
        error = ErrorCode.none
    else:
        error, answers = await ctx.broker.txn_coordinator.complete_prepared(
            members, bool(request.committed)
        )
    return ctx.response(
        throttle_time=_NO_THROTTLE,
        error_code=error,
        transactions=tuple(
            ctx.entity(
                "TransactionResult",
                transactional_id=txn_id,
                error_code=answers.get(txn_id, error),
            )
            for txn_id, _, _ in members
        ),
    )


HANDLERS: dict[int, Handler] = {ApiKey.COMPLETE_TRANSACTIONS: handle_complete_transactions}
