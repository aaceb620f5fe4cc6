"""DescribeClientQuotas and AlterClientQuotas (KIP-546) through Onceflow's own client:
confluent-kafka's AdminClient has no client quota calls.

An entity is a list of (entity type, name) pairs, the name None for the default, as the
protocol and Kafka's Admin API give them: `[("user", "alice"), ("client-id", None)]`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from onceflow.client.blocking import Connection
from onceflow.client.errors import KafkaApiError, error_name
from onceflow.client.wire import request_entity
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, request_type

__all__ = [
    "MATCH_ANY",
    "MATCH_DEFAULT",
    "MATCH_EXACT",
    "alter_client_quotas",
    "describe_client_quotas",
]

Entity = tuple[tuple[str, str | None], ...]
MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_ANY = 2


def describe_client_quotas(
    connection: Connection,
    components: Iterable[tuple[str, int, str | None]],
    strict: bool = False,
) -> dict[Entity, dict[str, float]]:
    """The quotas of every entity the filter matches: (entity type, match type, name)
    components, as Kafka's ClientQuotaFilter. Raises KafkaApiError with the broker's code."""
    version = connection.version_for(ApiKey.DESCRIBE_CLIENT_QUOTAS)
    request = build(
        request_type(ApiKey.DESCRIBE_CLIENT_QUOTAS, version),
        components=tuple(
            request_entity(
                ApiKey.DESCRIBE_CLIENT_QUOTAS,
                version,
                "ComponentData",
                entity_type=kind,
                match_type=match_type,
                match=name,
            )
            for kind, match_type, name in components
        ),
        strict=strict,
    )
    response = connection.call_at(ApiKey.DESCRIBE_CLIENT_QUOTAS, version, request)
    if response.error_code != ErrorCode.none:
        detail = f" ({response.error_message})" if response.error_message else ""
        raise KafkaApiError(
            response.error_code,
            f"cannot describe client quotas: {error_name(response.error_code)}{detail}",
        )
    return {
        tuple((e.entity_type, e.entity_name) for e in entry.entity): {
            v.key: float(v.value) for v in entry.values
        }
        for entry in response.entries or ()
    }


def alter_client_quotas(
    connection: Connection,
    changes: Mapping[Entity, Mapping[str, float | None]],
    validate_only: bool = False,
) -> dict[Entity, KafkaApiError | None]:
    """Set (a value) or remove (None) quota keys per entity; each entity's error or None."""
    version = connection.version_for(ApiKey.ALTER_CLIENT_QUOTAS)

    def entry(entity: Entity, ops: Mapping[str, float | None]) -> Any:
        return request_entity(
            ApiKey.ALTER_CLIENT_QUOTAS,
            version,
            "EntryData",
            entity=tuple(
                request_entity(
                    ApiKey.ALTER_CLIENT_QUOTAS,
                    version,
                    "EntityData",
                    entity_type=kind,
                    entity_name=name,
                )
                for kind, name in entity
            ),
            ops=tuple(
                request_entity(
                    ApiKey.ALTER_CLIENT_QUOTAS,
                    version,
                    "OpData",
                    key=key,
                    value=0.0 if value is None else float(value),
                    remove=value is None,
                )
                for key, value in ops.items()
            ),
        )

    request = build(
        request_type(ApiKey.ALTER_CLIENT_QUOTAS, version),
        entries=tuple(entry(entity, ops) for entity, ops in changes.items()),
        validate_only=validate_only,
    )
    response = connection.call_at(ApiKey.ALTER_CLIENT_QUOTAS, version, request)
    results: dict[Entity, KafkaApiError | None] = {}
    for answered in response.entries:
        entity = tuple((e.entity_type, e.entity_name) for e in answered.entity)
        code = answered.error_code
        if code == ErrorCode.none:
            results[entity] = None
        else:
            detail = f" ({answered.error_message})" if answered.error_message else ""
            results[entity] = KafkaApiError(code, f"{error_name(code)}{detail}")
    return results
