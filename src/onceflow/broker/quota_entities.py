"""Client quota entities and their quotas, as Kafka's KIP-546 and ZooKeeper-era brokers name
them (pure: no I/O).

An entity is a user, a client id, or a user and a client id; either part may be the
default (`<default>`), which applies to every user (client id) without an entity of its
own. Which entity's quota binds a client is Kafka's precedence (`PRECEDENCE`), looked up
per quota type: the first entity in the order that sets the type's key wins. The entity
also says which clients share one budget (`metric_tags`): a quota set for a user alone is
shared by all of that user's clients, one set for the default client id is each client
id's own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote

from onceflow.errors import ErrorCode, KafkaError
from onceflow.invariants import invariant

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"

#: Kafka's quota keys of user and client-id entities, and whether each is a whole number
#: (LONG: bytes per second) or a DOUBLE (a percentage of one thread, mutations per second).
QUOTA_KEYS: Mapping[str, bool] = {
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
    CONTROLLER_MUTATION_RATE: False,
}

#: How ZooKeeper-era Kafka names the default entity in its znodes.
DEFAULT_ZNODE_NAME = "<default>"


class _Default:
    """The default user or client id (null in the protocol, `<default>` in ZooKeeper)."""

    _instance: _Default | None = None

    def __new__(cls) -> _Default:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return DEFAULT_ZNODE_NAME


DEFAULT = _Default()
Name = str | _Default
Values = dict[str, float]


def _invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.invalid_request, message)


def sanitize(name: str) -> str:
    """Kafka's Sanitizer: URL-encoded, so any user or client id is one znode name."""
    return quote(name, safe="").replace("~", "%7E")


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """A user, a client id or both; each part a name, DEFAULT, or None (not part of it)."""

    user: Name | None = None
    client_id: Name | None = None

    def components(self) -> list[tuple[str, str | None]]:
        """(entity type, name or None for the default), as the protocol lists them."""
        parts: list[tuple[str, str | None]] = []
        for kind, part in ((USER, self.user), (CLIENT_ID, self.client_id)):
            if part is not None:
                parts.append((kind, None if part is DEFAULT else str(part)))
        return parts

    def path(self) -> str:
        """Kafka's path under /config: users/U, users/U/clients/C or clients/C."""

        def znode(part: Name) -> str:
            return DEFAULT_ZNODE_NAME if part is DEFAULT else sanitize(str(part))

        if self.user is not None and self.client_id is not None:
            return f"users/{znode(self.user)}/clients/{znode(self.client_id)}"
        if self.user is not None:
            return f"users/{znode(self.user)}"
        invariant(self.client_id is not None, "a quota entity names a user or a client id")
        return f"clients/{znode(self.client_id or '')}"

    @staticmethod
    def from_path(path: str) -> QuotaEntity:
        """The entity of a path `path()` made (ValueError if it is not one)."""

        def part(znode: str) -> Name:
            return DEFAULT if znode == DEFAULT_ZNODE_NAME else unquote(znode)

        items = path.split("/")
        if len(items) == 4 and items[0] == "users" and items[2] == "clients":
            return QuotaEntity(part(items[1]), part(items[3]))
        if len(items) == 2 and items[0] == "users":
            return QuotaEntity(user=part(items[1]))
        if len(items) == 2 and items[0] == "clients":
            return QuotaEntity(client_id=part(items[1]))
        raise ValueError(f"not a client quota entity path: {path!r}")


def parse_entity(components: Iterable[tuple[str, str | None]]) -> QuotaEntity:
    """The entity of an AlterClientQuotas entry; INVALID_REQUEST as Kafka refuses one."""
    user: Name | None = None
    client: Name | None = None
    seen: set[str] = set()
    for kind, name in components:
        if kind in seen:
            raise _invalid(f"Duplicate {kind} entity type")
        seen.add(kind)
        if name == "":  # no znode can be named so; Kafka's ZooKeeper path fails on it too
            raise _invalid(f"Empty {kind} entity name")
        part: Name = DEFAULT if name is None else name
        if kind == USER:
            user = part
        elif kind == CLIENT_ID:
            client = part
        elif kind == IP:
            raise _invalid("ip quota entities (connection_creation_rate) are not supported")
        else:
            raise _invalid(f"Unhandled client quota entity type: {kind}")
    if user is None and client is None:
        raise _invalid("Invalid empty client quota entity")
    return QuotaEntity(user, client)


def apply_ops(current: Mapping[str, float], ops: Iterable[tuple[str, float, bool]]) -> Values:
    """The entity's quotas after the (key, value, remove) operations; INVALID_REQUEST for an
    unknown key, a fraction where Kafka wants a whole number, or a value not above zero
    (which Kafka's ZooKeeper path accepted and then mis-enforced: a rate of 0 divides by
    zero, a negative one throttles everything)."""
    values = dict(current)
    seen: set[str] = set()
    for key, value, remove in ops:
        if key in seen:
            raise _invalid(f"Duplicate quota key {key}")
        seen.add(key)
        if remove:  # removing what is not there (even an unknown key) changes nothing
            values.pop(key, None)
            continue
        if key not in QUOTA_KEYS:
            raise _invalid(f"Invalid configuration key {key}")
        if not math.isfinite(value) or value <= 0:
            raise _invalid(f"Configuration {key} must be a positive value, not {value}")
        if QUOTA_KEYS[key]:
            whole = round(value)
            if abs(whole - value) > 1e-6:
                raise _invalid(f"Configuration {key} must be a Long value")
            value = float(whole)
        values[key] = value
    return values


# ---- DescribeClientQuotas filters ------------------------------------------------------

MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_ANY = 2


@dataclass(frozen=True, slots=True)
class FilterComponent:
    entity_type: str
    match_type: int
    match: str | None


def check_filter(components: Iterable[FilterComponent]) -> list[FilterComponent]:
    """The filter's components, refused (INVALID_REQUEST) as Kafka refuses them."""
    checked: list[FilterComponent] = []
    seen: set[str] = set()
    for component in components:
        if not component.entity_type:
            raise _invalid("Invalid empty client quota entity type")
        if component.entity_type in seen:
            raise _invalid(f"Duplicate {component.entity_type} filter component entity type")
        seen.add(component.entity_type)
        if component.entity_type not in (USER, CLIENT_ID, IP):
            raise KafkaError(
                ErrorCode.unsupported_version,
                f"Unsupported quota entity type {component.entity_type}",
            )
        if component.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
            raise _invalid(f"Unknown match type: {component.match_type}")
        if component.match_type == MATCH_EXACT and component.match is None:
            raise _invalid(f"Exact match of {component.entity_type} needs a name")
        if component.match_type != MATCH_EXACT and component.match is not None:
            raise _invalid(f"Only an exact match of {component.entity_type} takes a name")
        checked.append(component)
    if IP in seen and len(seen) > 1:
        raise _invalid("Invalid entity filter component combination: ip with user or client-id")
    return checked


def matches(entity: QuotaEntity, components: list[FilterComponent], strict: bool) -> bool:
    """Whether a filter selects the entity: every component matches its part, and with
    `strict` the entity has no part the filter does not name."""
    parts = {USER: entity.user, CLIENT_ID: entity.client_id}
    for component in components:
        part = parts.get(component.entity_type)
        if part is None:
            return False
        if component.match_type == MATCH_EXACT and (part is DEFAULT or part != component.match):
            return False
        if component.match_type == MATCH_DEFAULT and part is not DEFAULT:
            return False
    if strict:
        named = {c.entity_type for c in components}
        return all(kind in named for kind, part in parts.items() if part is not None)
    return True


# ---- which quota binds a client ----------------------------------------------------------


def precedence(user: str, client_id: str) -> tuple[QuotaEntity, ...]:
    """Kafka's order (ClientQuotaManager): the most specific entity first."""
    return (
        QuotaEntity(user, client_id),
        QuotaEntity(user, DEFAULT),
        QuotaEntity(user, None),
        QuotaEntity(DEFAULT, client_id),
        QuotaEntity(DEFAULT, DEFAULT),
        QuotaEntity(DEFAULT, None),
        QuotaEntity(None, client_id),
        QuotaEntity(None, DEFAULT),
    )


MetricTags = tuple[str, str]  # (user, client-id), "" where the quota does not separate


@dataclass(frozen=True, slots=True)
class BoundQuota:
    """The quota that binds a client for one key, and the budget it shares (its tags)."""

    limit: float
    tags: MetricTags
    entity: QuotaEntity


def resolve(
    quotas: Mapping[QuotaEntity, Mapping[str, float]], key: str, user: str, client_id: str
) -> BoundQuota | None:
    """The quota of `key` for this user and client id, or None when no entity sets it."""
    for entity in precedence(user, client_id):
        values = quotas.get(entity)
        if values is not None and key in values:
            tags = (
                user if entity.user is not None else "",
                client_id if entity.client_id is not None else "",
            )
            return BoundQuota(values[key], tags, entity)
    return None
