"""AlterConfigs and IncrementalAlterConfigs against a real in-process Broker: Kafka's checks
in Kafka's order, ALTER_CONFIGS on the topic or the cluster, validate_only, replace versus
incremental semantics, the change reaching the open logs, dynamic broker configs (the
cluster default and this broker's own, their precedence and their file surviving a
restart), and every response encoded at every advertised version."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import pytest
from kio.index import load_payload_module
from kio.static.constants import EntityType
from tests.helpers.broker import SMALL_DISK_FOOTPRINT

from onceflow.broker.broker import Broker
from onceflow.broker.handlers.base import RequestContext
from onceflow.broker.handlers.registry import HANDLERS
from onceflow.clock import ManualClock
from onceflow.config import BrokerConfig, ConfigSource
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey
from onceflow.protocol.codec import RequestHeader, build, encode_body, request_type
from onceflow.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from onceflow.security.session import Session

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
ALICE = Session(principal="User:alice")
Config = tuple[str, str | None] | tuple[str, str | None, int]


class Grants:
    """A fake authorizer allowing exactly the granted (operation, type, name) triples."""

    def __init__(self, *grants: tuple[AclOperation, ResourceType, str]) -> None:
        self.grants = set(grants)
        self.calls: list[tuple[AclOperation, ResourceType, str]] = []

    def authorize(
        self, session: Session, op: AclOperation, kind: ResourceType, name: str, **_: Any
    ) -> bool:
        self.calls.append((op, kind, name))
        return (op, kind, name) in self.grants


def nested(api: int, version: int, name: str, /, **fields: Any) -> Any:
    return build(getattr(load_payload_module(api, version, EntityType.request), name), **fields)


async def alter(
    broker: Broker,
    resources: list[tuple[int, str, list[Config]]],
    *,
    incremental: bool = True,
    validate_only: bool = False,
    version: int | None = None,
) -> list[tuple[ErrorCode, str | None]]:
    """Send one request; return (error, message) per resource, in request order."""
    api = ApiKey.INCREMENTAL_ALTER_CONFIGS if incremental else ApiKey.ALTER_CONFIGS
    version = SUPPORTED_VERSIONS[api][1] if version is None else version
    entities = []
    for kind, name, configs in resources:
        items = []
        for config in configs:
            fields: dict[str, Any] = {"name": config[0], "value": config[1]}
            if incremental:
                fields["config_operation"] = config[2] if len(config) == 3 else SET
            items.append(nested(api, version, "AlterableConfig", **fields))
        entities.append(
            nested(
                api,
                version,
                "AlterConfigsResource",
                resource_type=kind,
                resource_name=name,
                configs=tuple(items),
            )
        )
    request = build(
        request_type(api, version), resources=tuple(entities), validate_only=validate_only
    )
    ctx = RequestContext(RequestHeader(api, version, 1, "test"), broker, ALICE)
    response = await HANDLERS[api](ctx, request)
    encode_body(response)
    assert [(r.resource_type, r.resource_name) for r in response.responses] == [
        (kind, name) for kind, name, _ in resources
    ]
    return [(r.error_code, r.error_message) for r in response.responses]


def run(tmp_path: Path, body: Callable[[Broker], Awaitable[None]], **config: Any) -> None:
    async def main() -> None:
        settings = {
            "offsets_topic_num_partitions": 1,
            "transaction_state_log_num_partitions": 1,
            **SMALL_DISK_FOOTPRINT,
        }
        broker_config = BrokerConfig(log_dirs=(str(tmp_path / "data"),), **(settings | config))
        broker = Broker(broker_config, clock=ManualClock())
        await broker.start()
        try:
            if "orders" not in broker.logs.topics:
                await broker.create_topic("orders", 2, {"retention.ms": "100000"})
            await body(broker)
        finally:
            await broker.stop()

    asyncio.run(main())


OK = (ErrorCode.none, None)


def test_incremental_set_delete_append_subtract_and_the_logs_follow(tmp_path: Path) -> None:
    async def body(broker: Broker) -> None:
        ops: list[Config] = [
            ("max.message.bytes", "2000", SET),
            ("retention.ms", None, DELETE),
            ("cleanup.policy", "compact", APPEND),
            ("segment.ms", None, DELETE),  # not set: nothing to delete, no error
        ]
        assert await alter(broker, [(TOPIC, "orders", ops)]) == [OK]
        assert broker.topic_configs("orders") == {
            "max.message.bytes": "2000",
            "cleanup.policy": "delete,compact",
        }
        for partition in (0, 1):
            log_config = broker.logs.logs[("orders", partition)].config
            assert log_config.max_message_bytes == 2000
            assert log_config.retention_ms == broker.config.log_retention_ms
            assert log_config.cleanup_compact and log_config.cleanup_delete
        ops = [("cleanup.policy", "delete", SUBTRACT), ("cleanup.policy", "x", SET)]
        result = await alter(broker, [(TOPIC, "orders", ops)])
        assert result == [(ErrorCode.invalid_request, "Error due to duplicate config keys")]
        assert await alter(
            broker, [(TOPIC, "orders", [("cleanup.policy", "delete", SUBTRACT)])]
        ) == [OK]
        assert broker.topic_configs("orders") == {
            "max.message.bytes": "2000",
            "cleanup.policy": "compact",
        }
        assert not broker.logs.logs[("orders", 0)].config.cleanup_delete

    run(tmp_path, body)


def test_alter_configs_replaces_every_override(tmp_path: Path) -> None:
    async def body(broker: Broker) -> None:
        result = await alter(
            broker, [(TOPIC, "orders", [("segment.bytes", "4096")])], incremental=False
        )
        assert result == [OK]
        assert broker.topic_configs("orders") == {"segment.bytes": "4096"}  # retention.ms gone
        assert broker.logs.logs[("orders", 0)].config.retention_ms == broker.config.log_retention_ms
        assert await alter(broker, [(TOPIC, "orders", [])], incremental=False) == [OK]
        assert broker.topic_configs("orders") == {}

    run(tmp_path, body)


@pytest.mark.parametrize("incremental", [True, False])
def test_bad_input_gets_kafkas_errors_and_changes_nothing(
    tmp_path: Path, incremental: bool
) -> None:
    async def body(broker: Broker) -> None:
        cases: list[tuple[int, str, list[Config], ErrorCode, str]] = [
            (TOPIC, "orders", [("retention.ms", "soon")], ErrorCode.invalid_config, "retention.ms"),
            (
                TOPIC,
                "orders",
                [("no.such.key", "1")],
                ErrorCode.invalid_config,
                "Unknown topic config name: no.such.key",
            ),
            (TOPIC, "orders", [("segment.bytes", "1")], ErrorCode.invalid_config, "segment.bytes"),
            (
                TOPIC,
                "orders",
                [("retention.ms", None)],
                ErrorCode.invalid_request,
                "Null value not supported for : retention.ms",
            ),
            (
                TOPIC,
                "nowhere",
                [("retention.ms", "1")],
                ErrorCode.unknown_topic_or_partition,
                "nowhere",
            ),
            (
                TOPIC,
                "",
                [("retention.ms", "1")],
                ErrorCode.invalid_request,
                "Default topic resources are not allowed.",
            ),
            (
                TOPIC,
                "bad/name",
                [("retention.ms", "1")],
                ErrorCode.invalid_topic_exception,
                "bad/name",
            ),
            (
                BROKER_LOGGER,
                "0",
                [("root", "DEBUG")],
                ErrorCode.invalid_request,
                "Unknown resource type 8",
            ),
            (99, "x", [], ErrorCode.invalid_request, "Unknown resource type 99"),
        ]
        for kind, name, configs, code, words in cases:
            [(error, message)] = await alter(
                broker, [(kind, name, configs)], incremental=incremental
            )
            assert error == code, (name, configs, error, message)
            assert message is not None and words in message
        # An invalid config is reported before the topic is looked up, as Kafka does.
        result = await alter(
            broker, [(TOPIC, "nowhere", [("retention.ms", "x")])], incremental=incremental
        )
        assert result[0][0] == ErrorCode.invalid_config
        assert broker.topic_configs("orders") == {"retention.ms": "100000"}

    run(tmp_path, body)


def test_append_and_subtract_only_on_list_keys(tmp_path: Path) -> None:
    async def body(broker: Broker) -> None:
        for op, name in ((APPEND, "APPEND"), (SUBTRACT, "SUBTRACT")):
            result = await alter(broker, [(TOPIC, "orders", [("retention.ms", "5", op)])])
            assert result == [
                (
                    ErrorCode.invalid_config,
                    f"Can't {name} to key retention.ms because its type is not LIST.",
                )
            ]
        result = await alter(broker, [(TOPIC, "orders", [("retention.ms", "5", 7)])])
        assert result == [(ErrorCode.invalid_request, "Unknown operations type 7")]
        assert broker.topic_configs("orders") == {"retention.ms": "100000"}

    run(tmp_path, body)


def test_a_resource_given_twice_is_refused_both_times_and_others_proceed(tmp_path: Path) -> None:
    async def body(broker: Broker) -> None:
        one: list[Config] = [("retention.ms", "1")]
        two: list[Config] = [("log.retention.ms", "7200000")]
        twice, other = (TOPIC, "orders", one), (BROKER, "0", two)
        result = await alter(broker, [twice, other, twice])
        refused = (ErrorCode.invalid_request, "Each resource must appear at most once.")
        assert result == [refused, OK, refused]
        assert broker.config.log_retention_ms == 7_200_000

    run(tmp_path, body)


def test_validate_only_checks_everything_and_changes_nothing(tmp_path: Path) -> None:
    async def body(broker: Broker) -> None:
        resources: list[tuple[int, str, list[Config]]] = [
            (TOPIC, "orders", [("retention.ms", "5")]),
            (TOPIC, "nowhere", [("retention.ms", "5")]),
            (BROKER, "", [("log.segment.bytes", "5000")]),
        ]
        for incremental in (True, False):
            result = await alter(broker, resources, incremental=incremental, validate_only=True)
            assert [error for error, _ in result] == [
                ErrorCode.none,
                ErrorCode.unknown_topic_or_partition,
                ErrorCode.none,
            ]
        assert broker.topic_configs("orders") == {"retention.ms": "100000"}
        assert broker.config.log_segment_bytes == 1 << 30
        assert broker.dynamic_config.entities == {}

    run(tmp_path, body)


def test_authorization_is_alter_configs_on_the_topic_or_the_cluster(tmp_path: Path) -> None:
    async def body(broker: Broker) -> None:
        grants = Grants((AclOperation.ALTER_CONFIGS, ResourceType.TOPIC, "orders"))
        broker.security.authorizer = cast(Any, grants)
        resources: list[tuple[int, str, list[Config]]] = [
            (TOPIC, "orders", [("retention.ms", "5")]),
            (TOPIC, "secret", [("retention.ms", "5")]),  # does not exist: not revealed
            (BROKER, "0", [("log.retention.ms", "5")]),
            (BROKER, "0", [("num.partitions", "5")]),  # refused before authorization
        ]
        result = await alter(broker, resources[:3])
        assert result == [
            OK,
            (ErrorCode.topic_authorization_failed, "Topic authorization failed."),
            (ErrorCode.cluster_authorization_failed, "Cluster authorization failed."),
        ]
        assert grants.calls == [
            (AclOperation.ALTER_CONFIGS, ResourceType.TOPIC, "orders"),
            (AclOperation.ALTER_CONFIGS, ResourceType.TOPIC, "secret"),
            (AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME),
        ]
        [(error, _)] = await alter(broker, resources[3:], incremental=False)
        assert error == ErrorCode.invalid_request
        assert broker.config.log_retention_ms == 168 * 3_600_000
        grants.grants.add((AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME))
        assert await alter(broker, resources[2:3]) == [OK]
        assert broker.config.log_retention_ms == 5

    run(tmp_path, body)


def test_broker_configs_only_dynamic_keys_and_this_broker(tmp_path: Path) -> None:
    async def body(broker: Broker) -> None:
        cases: list[tuple[str, list[Config], ErrorCode, str]] = [
            ("0", [("num.partitions", "3"), ("log.dirs", "/x")], ErrorCode.invalid_request,
             "Cannot update these configs dynamically: Set(num.partitions, log.dirs)"),
            ("", [("auto.create.topics.enable", "false")], ErrorCode.invalid_request,
             "Cannot update these configs dynamically: Set(auto.create.topics.enable)"),
            ("0", [("log.retention.mss", "1")], ErrorCode.invalid_request,
             "Unknown broker config name: log.retention.mss (did you mean log.retention.ms?)"),
            ("0", [("log.retention.ms", "soon")], ErrorCode.invalid_request, "log.retention.ms"),
            ("0", [("log.retention.ms", "5", APPEND)], ErrorCode.invalid_config,
             "Config value append is not allowed for config key: log.retention.ms"),
            ("7", [("log.retention.ms", "5")], ErrorCode.invalid_request,
             "Unexpected broker id, expected 0, but received 7"),
            ("zero", [("log.retention.ms", "5")], ErrorCode.invalid_request,
             "Node id must be an integer, but it is: zero"),
        ]  # fmt: skip
        for name, configs, code, words in cases:
            [(error, message)] = await alter(broker, [(BROKER, name, configs)])
            assert (error, words in (message or "")) == (code, True), (configs, message)
        assert broker.dynamic_config.entities == {}

    run(tmp_path, body)


def test_dynamic_broker_configs_layer_persist_and_reach_the_logs(tmp_path: Path) -> None:
    hour = 3_600_000

    async def first(broker: Broker) -> None:
        await broker.create_topic("plain", 1)
        assert await alter(broker, [(BROKER, "", [("log.retention.hours", "5")])]) == [OK]
        assert broker.config.log_retention_ms == 5 * hour
        assert broker.logs.logs[("plain", 0)].config.retention_ms == 5 * hour
        assert broker.logs.logs[("orders", 0)].config.retention_ms == 100_000  # its override
        # This broker's own entity wins over the cluster default, whatever the synonym.
        assert await alter(broker, [(BROKER, "0", [("log.retention.minutes", "3")])]) == [OK]
        assert broker.logs.logs[("plain", 0)].config.retention_ms == 3 * 60_000
        ops: list[Config] = [
            ("log.cleanup.policy", "compact", APPEND),
            ("message.max.bytes", "5000"),
        ]
        assert await alter(broker, [(BROKER, "0", ops)]) == [OK]
        plain = broker.logs.logs[("plain", 0)].config
        assert plain.cleanup_compact and plain.cleanup_delete and plain.max_message_bytes == 5000

    run(tmp_path, first)

    async def after_restart(broker: Broker) -> None:
        assert broker.logs.logs[("plain", 0)].config.retention_ms == 3 * 60_000
        [topic] = await describe(broker, TOPIC, "plain", "retention.ms")
        assert (topic.value, topic.config_source) == (
            str(3 * 60_000),
            ConfigSource.DYNAMIC_BROKER_CONFIG,
        )
        assert [(s.name, s.source) for s in topic.synonyms] == [
            ("log.retention.minutes", ConfigSource.DYNAMIC_BROKER_CONFIG),
            ("log.retention.hours", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            ("log.retention.ms", ConfigSource.DEFAULT_CONFIG),
        ]
        [entry] = await describe(broker, BROKER, "0", "log.retention.ms")
        assert (entry.read_only, entry.config_source) == (False, ConfigSource.DYNAMIC_BROKER_CONFIG)
        [entry] = await describe(broker, BROKER, "0", "num.partitions")
        assert entry.read_only
        # The cluster-wide default shows what is set there, as kafka-configs.sh shows it.
        [entry] = await describe(broker, BROKER, "", None)
        assert (entry.name, entry.value, entry.config_source) == (
            "log.retention.hours",
            "5",
            ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
        )
        # AlterConfigs replaces this broker's whole entity: back to the cluster default.
        assert await alter(broker, [(BROKER, "0", [])], incremental=False) == [OK]
        assert broker.logs.logs[("plain", 0)].config.retention_ms == 5 * hour
        assert broker.logs.logs[("plain", 0)].config.max_message_bytes == 1_048_588

    run(tmp_path, after_restart)


async def describe(broker: Broker, kind: int, name: str, key: str | None) -> Any:
    api, version = ApiKey.DESCRIBE_CONFIGS, 3
    resource = nested(
        api, version, "DescribeConfigsResource", resource_type=kind, resource_name=name,
        configuration_keys=None if key is None else (key,),
    )  # fmt: skip
    request = build(
        request_type(api, version),
        resources=(resource,),
        include_synonyms=True,
        include_documentation=False,
    )
    ctx = RequestContext(RequestHeader(api, version, 1, "test"), broker, ALICE)
    response = await HANDLERS[api](ctx, request)
    [result] = response.results
    assert result.error_code == ErrorCode.none
    return result.configs


@pytest.mark.parametrize(
    ("incremental", "version"),
    [(False, 0), (False, 1), (False, 2), (True, 0), (True, 1)],
)
def test_every_advertised_version_answers(tmp_path: Path, incremental: bool, version: int) -> None:
    async def body(broker: Broker) -> None:
        resources: list[tuple[int, str, list[Config]]] = [
            (TOPIC, "orders", [("retention.ms", "1234")]),
            (TOPIC, "nowhere", [("retention.ms", "1")]),
        ]
        result = await alter(broker, resources, incremental=incremental, version=version)
        assert [error for error, _ in result] == [
            ErrorCode.none,
            ErrorCode.unknown_topic_or_partition,
        ]
        assert broker.topic_configs("orders") == {"retention.ms": "1234"}

    run(tmp_path, body)


def test_the_throttle_time_is_zero(tmp_path: Path) -> None:
    async def body(broker: Broker) -> None:
        api, version = ApiKey.ALTER_CONFIGS, 2
        request = build(request_type(api, version), resources=(), validate_only=False)
        ctx = RequestContext(RequestHeader(api, version, 1, "test"), broker, ALICE)
        response = await HANDLERS[api](ctx, request)
        assert response.throttle_time == datetime.timedelta(0)
        assert response.responses == ()

    run(tmp_path, body)
