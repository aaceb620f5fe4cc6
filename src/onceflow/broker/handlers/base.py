"""What every request handler receives, and the shape of a handler."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from onceflow.protocol.codec import RequestHeader, build, nested, response_type
from onceflow.security.acl import AclOperation, ResourceType
from onceflow.security.session import Session

#: The session of a request on a PLAINTEXT listener: anonymous.
ANONYMOUS_SESSION = Session()

if TYPE_CHECKING:
    from onceflow.broker.authentication import ConnectionAuth
    from onceflow.broker.services import BrokerServices


@dataclass(frozen=True, slots=True)
class RequestContext:
    """One request's header, the broker serving it and who sent it."""

    header: RequestHeader
    broker: BrokerServices
    session: Session = ANONYMOUS_SESSION
    #: The connection's authentication state (SaslHandshake and SaslAuthenticate use it).
    auth: ConnectionAuth | None = None

    @property
    def api_version(self) -> int:
        return self.header.api_version

    def authorized(
        self,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
        *,
        log_denied: bool = True,
    ) -> bool:
        """Whether this request's principal may do `operation` on the named resource
        (always, when no authorizer is configured). A denial is logged for the audit unless
        `log_denied` is false (Kafka's logIfDenied: filtering, not refusing)."""
        authorizer = self.broker.authorizer
        return authorizer is None or authorizer.authorize(
            self.session, operation, resource_type, name, log_denied=log_denied
        )

    def authorized_any(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Whether the principal may do `operation` on at least one resource of the type
        (Kafka's authorizeByResourceType, KIP-679): for example WRITE on any topic grants
        idempotent produce."""
        authorizer = self.broker.authorizer
        return authorizer is None or authorizer.authorize_any(
            self.session, operation, resource_type
        )

    def response(self, **fields: Any) -> Any:
        """The response entity of this request's API and version, from the given fields."""
        return build(response_type(self.header.api_key, self.header.api_version), **fields)

    def entity(self, entity_name: str, /, **fields: Any) -> Any:
        """A nested response entity of this request's API and version."""
        return build(nested(self.header.api_key, self.header.api_version, entity_name), **fields)


# A handler takes the context and the decoded kio request, and returns the kio response.
Handler = Callable[[RequestContext, Any], Awaitable[Any]]
