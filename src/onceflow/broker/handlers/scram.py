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
from onceflow.security.scram import ScramCredential, ScramUpsertion, validate_upsertion

_NO_TIME = datetime.timedelta(0)
#: Kafka's ScramMechanism codes on the wire.
MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MECHANISM_CODES = {name: code for code, name in MECHANISMS.items()}


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
                    mechanism=MECHANISM_CODES[mechanism],
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


def _user_error(
    name: str, deletions: list[Any], upsertions: list[Any], stored: Any
) -> tuple[ErrorCode, str] | None:
    """Kafka's checks of one user's alterations, in Kafka's order; one failure fails them all.
    Like Kafka's kafka-configs.sh, a request may set both mechanisms of one user; the same
    (user, mechanism) twice is DUPLICATE_RESOURCE."""
    mechanisms = [d.mechanism for d in deletions] + [u.mechanism for u in upsertions]
    if not name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if any(m not in MECHANISMS for m in mechanisms):
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    if len(set(mechanisms)) < len(mechanisms):
        return (
            ErrorCode.duplicate_resource,
            "A user credential cannot be altered twice in the same request",
        )
    for deletion in deletions:
        if MECHANISMS[deletion.mechanism] not in stored.get(name, {}):
            return (
                ErrorCode.resource_not_found,
                "Attempt to delete a user credential that does not exist",
            )
    for u in upsertions:
        code, message = validate_upsertion(
            ScramUpsertion(
                u.name, u.mechanism, u.iterations, bytes(u.salt), bytes(u.salted_password)
            )
        )
        if code is not ErrorCode.none:
            return code, message or code.name
    return None


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
    stored = security.credentials
    errors: dict[str, tuple[ErrorCode, str] | None] = {}
    upserts: list[tuple[str, ScramCredential]] = []
    deletes: list[tuple[str, str]] = []
    for name in users:
        deletions = [d for d in request.deletions if d.name == name]
        upsertions = [u for u in request.upsertions if u.name == name]
        errors[name] = _user_error(name, deletions, upsertions, stored)
        if errors[name] is not None:
            continue
        deletes += [(name, MECHANISMS[d.mechanism]) for d in deletions]
        upserts += [
            (
                name,
                ScramCredential.from_salted_password(
                    MECHANISMS[u.mechanism], bytes(u.salt), bytes(u.salted_password), u.iterations
                ),
            )
            for u in upsertions
        ]
    if upserts or deletes:
        await security.change_credentials(upserts, deletes)
    results = tuple(
        ctx.entity(
            "AlterUserScramCredentialsResult",
            user=name,
            error_code=error[0] if error else ErrorCode.none,
            error_message=error[1] if error else None,
        )
        for name, error in errors.items()
    )
    return ctx.response(throttle_time=_NO_TIME, results=results)


HANDLERS: dict[int, Handler] = {
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: handle_describe_user_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: handle_alter_user_scram_credentials,
}
