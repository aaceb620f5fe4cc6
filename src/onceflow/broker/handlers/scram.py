"""DescribeUserScramCredentials and AlterUserScramCredentials (KIP-554), as
`AdminClient.alter_user_scram_credentials` and `kafka-configs.sh --entity-type users` use
them. The client sends a salted password, never the password; the broker keeps only the
derived stored and server keys. Errors and their precedence are Kafka's."""

from __future__ import annotations

import datetime
from collections import Counter
from typing import Any

from onceflow.broker.handlers.base import Handler, RequestContext
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from onceflow.security.scram import (
    SCRAM_MECHANISMS,
    ScramCredential,
    ScramDeletion,
    ScramMechanism,
    ScramUpsertion,
    user_alteration_error,
)

_NO_TIME = datetime.timedelta(0)


def _mechanism(code: int) -> str:
    return ScramMechanism.from_code(code).mechanism_name


async def handle_describe_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return ctx.response(
            throttle_time=_NO_TIME,
            error_code=ErrorCode.cluster_authorization_failed,
            error_message=None,
            results=(),
        )
    stored = ctx.broker.security.credentials
    asked = [user.name for user in request.users] if request.users else sorted(stored)
    counts = Counter(asked)
    results = []
    for name in dict.fromkeys(asked):
        error, message, infos = ErrorCode.none, None, ()
        if counts[name] > 1:
            error, message = (
                ErrorCode.duplicate_resource,
                "Cannot describe SCRAM credentials for the same user twice in a single "
                f"request: {name}",
            )
        elif name not in stored:
            error, message = (
                ErrorCode.resource_not_found,
                f"Attempt to describe a user credential that does not exist: {name}",
            )
        else:
            infos = tuple(
                ctx.entity(
                    "CredentialInfo",
                    mechanism=SCRAM_MECHANISMS[mechanism].code,
                    iterations=credential.iterations,
                )
                for mechanism, credential in sorted(stored[name].items())
            )
        results.append(
            ctx.entity(
                "DescribeUserScramCredentialsResult",
                user=name,
                error_code=error,
                error_message=message,
                credential_infos=infos,
            )
        )
    return ctx.response(
        throttle_time=_NO_TIME,
        error_code=ErrorCode.none,
        error_message=None,
        results=tuple(results),
    )


async def handle_alter_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    users = list(
        dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions])
    )
    if not ctx.authorized(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        results = tuple(
            ctx.entity(
                "AlterUserScramCredentialsResult",
                user=name,
                error_code=ErrorCode.cluster_authorization_failed,
                error_message=None,
            )
            for name in users
        )
        return ctx.response(throttle_time=_NO_TIME, results=results)
    security = ctx.broker.security
    deletions = [ScramDeletion(d.name, d.mechanism) for d in request.deletions]
    upsertions = [
        ScramUpsertion(u.name, u.mechanism, u.iterations, bytes(u.salt), bytes(u.salted_password))
        for u in request.upsertions
    ]
    errors: dict[str, tuple[ErrorCode, str | None]] = {}
    upserts: list[tuple[str, ScramCredential]] = []
    deletes: list[tuple[str, str]] = []
    for name in users:
        mine_deleted = [d for d in deletions if d.name == name]
        mine_upserted = [u for u in upsertions if u.name == name]
        stored = security.credentials.get(name, {})
        errors[name] = user_alteration_error(name, mine_deleted, mine_upserted, stored)
        if errors[name][0] is not ErrorCode.none:
            continue
        deletes += [(name, _mechanism(d.mechanism)) for d in mine_deleted]
        upserts += [
            (
                name,
                ScramCredential.from_salted_password(
                    _mechanism(u.mechanism), u.salt, u.salted_password, u.iterations
                ),
            )
            for u in mine_upserted
        ]
    if upserts or deletes:
        await security.change_credentials(upserts, deletes)
    results = tuple(
        ctx.entity(
            "AlterUserScramCredentialsResult", user=name, error_code=code, error_message=message
        )
        for name, (code, message) in errors.items()
    )
    return ctx.response(throttle_time=_NO_TIME, results=results)


HANDLERS: dict[int, Handler] = {
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: handle_describe_user_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: handle_alter_user_scram_credentials,
}
