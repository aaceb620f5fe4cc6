"""Dynamic broker configs: what AlterConfigs changes on BROKER resources.

Kafka keeps them in two entities: the cluster-wide default (resource name "", `<default>`
in ZooKeeper) and each broker's own (its id). A broker's config is its own entity over the
default over server.properties. Onceflow makes the defaults of the topic-level keys dynamic
(`DYNAMIC_BROKER_KEYS`: log.retention.ms, log.segment.bytes, message.max.bytes,
min.insync.replicas...), as Kafka's DynamicLogConfig does; every other key stays as started.

A broker alone keeps both entities in one file of its log dir; on a cluster they are
Kafka's znodes, changed by compare-and-set and watched by every broker. A change applies at
once: the broker's config is rebuilt and every log re-derives its own from it (a topic's
overrides still win).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable
from typing import Protocol

from onceflow.cluster.zk_store import ZkMetadataStore
from onceflow.cluster.znodes import (
    DEFAULT_BROKER_ENTITY,
    broker_config_path,
    decode_config,
    encode_topic_config,
)
from onceflow.config import BrokerConfig, ConfigError
from onceflow.errors import ErrorCode, KafkaError
from onceflow.storage.fs import FileSystem

log = logging.getLogger(__name__)

ENTITIES_FILE = "onceflow-broker-configs.json"

Settings = dict[str, str]
Change = Callable[[Settings], Settings]


class DynamicConfigStore(Protocol):
    def load(self) -> dict[str, Settings]:
        """Entity ("<default>" or a node id) -> its settings, for the entities kept."""
        ...

    async def update(self, entity: str, change: Change) -> Settings:
        """Write `change(current)` durably and return it."""
        ...


class LocalDynamicConfigStore:
    """Both entities in one JSON file, replaced atomically at each change."""

    def __init__(self, fs: FileSystem, log_dir: str) -> None:
        self.fs = fs
        self.path = os.path.join(log_dir, ENTITIES_FILE)
        self._entities: dict[str, Settings] = {}

    def load(self) -> dict[str, Settings]:
        if self.fs.exists(self.path):
            raw = json.loads(self.fs.read_file(self.path))
            self._entities = {
                str(entity): {str(k): str(v) for k, v in settings.items()}
                for entity, settings in raw["entities"].items()
            }
        return {entity: dict(settings) for entity, settings in self._entities.items()}

    async def update(self, entity: str, change: Change) -> Settings:
        settings = change(dict(self._entities.get(entity, {})))
        entities = {**self._entities, entity: settings}
        body = {"version": 1, "entities": {e: s for e, s in sorted(entities.items()) if s}}
        self.fs.makedirs(os.path.dirname(self.path))
        self.fs.write_file_atomic(self.path, json.dumps(body, indent=1, sort_keys=True).encode())
        self._entities = entities
        return settings


class ZkDynamicConfigStore:
    """This broker's two entities as Kafka's znodes, watched; a watch event older than this
    broker's own write is not applied (versions tracked per znode)."""

    def __init__(
        self, store: ZkMetadataStore, loop: asyncio.AbstractEventLoop, entities: tuple[str, ...]
    ) -> None:
        self.store = store
        self.loop = loop
        self.entities = entities
        self._applied: dict[str, int] = {}

    def load(self) -> dict[str, Settings]:
        loaded = {}
        for entity in self.entities:
            found = self.store.read(broker_config_path(entity))
            if found is not None:
                loaded[entity] = decode_config(broker_config_path(entity), found[0])
                self._applied[entity] = found[1]
        return loaded

    async def update(self, entity: str, change: Change) -> Settings:
        path = broker_config_path(entity)

        def apply(raw: bytes | None) -> bytes:
            return encode_topic_config(change({} if raw is None else decode_config(path, raw)))

        written, version = await asyncio.to_thread(self.store.update, path, apply)
        self._applied[entity] = max(version, self._applied.get(entity, -1))
        return decode_config(path, written)

    def watch(self, deliver: Callable[[str, Settings], None]) -> None:
        """Call back on the event loop with each entity's new settings, whoever wrote them."""
        for entity in self.entities:
            self.store.watch_data(broker_config_path(entity), self._relay(entity, deliver))

    def _relay(
        self, entity: str, deliver: Callable[[str, Settings], None]
    ) -> Callable[[bytes | None, int], bool]:
        path = broker_config_path(entity)

        def changed(raw: bytes | None, version: int) -> bool:
            try:
                settings = {} if raw is None else decode_config(path, raw)
            except ValueError as exc:
                log.warning("%s", exc)
                return True
            self.loop.call_soon_threadsafe(self._deliver, entity, version, settings, deliver)
            return True

        return changed

    def _deliver(
        self,
        entity: str,
        version: int,
        settings: Settings,
        deliver: Callable[[str, Settings], None],
    ) -> None:
        newest = self._applied.get(entity, -1)
        if version != -1 and version <= newest:
            return  # this broker applied this version or a newer one already
        self._applied[entity] = max(version, newest)
        deliver(entity, settings)


class DynamicBrokerConfig:
    """The static config and the two dynamic entities on it; `on_change` gets the config
    they make whenever it is rebuilt."""

    def __init__(
        self,
        static: BrokerConfig,
        store: DynamicConfigStore,
        on_change: Callable[[BrokerConfig], None],
    ) -> None:
        self.static = static
        self.node_id = static.node_id
        self.store = store
        self.entities: dict[str, Settings] = {}
        self._on_change = on_change

    @property
    def own_entities(self) -> tuple[str, ...]:
        return (DEFAULT_BROKER_ENTITY, str(self.node_id))

    @staticmethod
    def entity(resource_name: str) -> str:
        return resource_name or DEFAULT_BROKER_ENTITY

    def load(self) -> None:
        self.entities = self.store.load()
        self._rebuild()

    def check(self, entity: str, current: Settings, change: Change) -> Settings:
        """The entity's settings after `change(current)`, refused as Kafka refuses a dynamic
        broker config it cannot apply: INVALID_REQUEST, with the ConfigError's words."""
        settings = change(dict(current))
        layers = {**self.entities, entity: settings}
        try:
            self.static.with_dynamic(
                layers.get(DEFAULT_BROKER_ENTITY, {}), layers.get(str(self.node_id), {})
            )
        except ConfigError as exc:
            raise KafkaError(ErrorCode.invalid_request, str(exc)) from exc
        return settings

    async def alter(self, entity: str, change: Change) -> None:
        """Write the entity's new settings (checked again against what is stored by then)
        and apply them here; the other brokers apply them from their watches."""
        try:
            written = await self.store.update(
                entity, lambda current: self.check(entity, current, change)
            )
        except KafkaError:
            raise
        except Exception as exc:  # the file or ZooKeeper could not be written
            raise KafkaError(
                ErrorCode.unknown_server_error, f"dynamic configs not written: {exc!r}"
            ) from exc
        self.set(entity, written)

    def set(self, entity: str, settings: Settings) -> None:
        if entity in self.own_entities:
            self.entities[entity] = settings
            self._rebuild()

    def _rebuild(self) -> None:
        try:
            config = self.static.with_dynamic(
                self.entities.get(DEFAULT_BROKER_ENTITY, {}),
                self.entities.get(str(self.node_id), {}),
            )
        except ConfigError as exc:  # written by another tool: keep the last good config
            log.warning("dynamic broker configs not applied: %s", exc)
            return
        self._on_change(config)
