"""Where client quotas are kept: a file of a broker alone, or Kafka's znodes on a cluster.

On a cluster they are where ZooKeeper-era Kafka keeps them, so Kafka's tools and a
migration read them: `/config/users/<user>`, `/config/users/<user>/clients/<client-id>`,
`/config/clients/<client-id>` (names URL-encoded, `<default>` for the default), each
`{"version":1,"config":{"producer_byte_rate":"1048576"}}`. A change writes the entity's
znode and a sequential `/config/changes/config_change_<n>` naming it
(`{"version":2,"entity_path":"users/alice"}`) in one ZooKeeper transaction; every broker
watches the notifications and reads the quotas again, so every broker enforces a quota set
through any of them, and none misses one because the writer died between the two writes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable
from typing import Protocol

from onceflow.broker.quota_entities import QuotaEntity, Values
from onceflow.cluster.zk_store import ZkMetadataStore
from onceflow.cluster.znodes import CONFIG_CHANGES, decode_config, encode_topic_config
from onceflow.storage.fs import FileSystem

log = logging.getLogger(__name__)

QUOTAS_FILE = "onceflow-client-quotas.json"
CONFIG_ROOT = "/config"
CHANGES = CONFIG_CHANGES
CHANGE_PREFIX = f"{CHANGES}/config_change_"
#: Notifications kept: readers reload every quota on any change, so old ones only show
#: history; Kafka deletes them after 15 minutes.
KEPT_CHANGES = 100

Quotas = dict[QuotaEntity, Values]
Change = Callable[[Values], Values]


class QuotaStore(Protocol):
    def load(self) -> Quotas:
        """Every entity with a quota."""
        ...

    async def update(self, entity: QuotaEntity, change: Change) -> Values:
        """Write `change(current)` for the entity durably and return it."""
        ...


class LocalQuotaStore:
    """Every entity in one JSON file of the log dir, replaced atomically at each change."""

    def __init__(self, fs: FileSystem, log_dir: str) -> None:
        self.fs = fs
        self.path = os.path.join(log_dir, QUOTAS_FILE)
        self._quotas: Quotas = {}

    def load(self) -> Quotas:
        if self.fs.exists(self.path):
            raw = json.loads(self.fs.read_file(self.path))
            self._quotas = {
                QuotaEntity.from_path(path): {str(k): float(v) for k, v in values.items()}
                for path, values in raw["entities"].items()
            }
        return dict(self._quotas)

    async def update(self, entity: QuotaEntity, change: Change) -> Values:
        values = change(dict(self._quotas.get(entity, {})))
        quotas = {**self._quotas, entity: values}
        body = {
            "version": 1,
            "entities": {e.path(): v for e, v in sorted(quotas.items(), key=_order) if v},
        }
        self.fs.makedirs(os.path.dirname(self.path))
        self.fs.write_file_atomic(self.path, json.dumps(body, indent=1, sort_keys=True).encode())
        self._quotas = {e: v for e, v in quotas.items() if v}
        return values


def _order(item: tuple[QuotaEntity, Values]) -> str:
    return item[0].path()


def _encode(values: Values) -> bytes:
    return encode_topic_config({k: _render(v) for k, v in values.items()})


def _render(value: float) -> str:
    """Whole numbers as Kafka's LONG keys are written ("1048576"), others as doubles."""
    return str(int(value)) if value.is_integer() else repr(value)


def _decode(path: str, raw: bytes) -> Values:
    values: Values = {}
    for key, text in decode_config(path, raw).items():
        try:
            values[key] = float(text)
        except ValueError:
            log.warning("%s: %s=%r is not a number; ignored", path, key, text)
    return values


class ZkQuotaStore:
    """The quotas as Kafka's znodes, with change notifications every broker watches."""

    def __init__(self, store: ZkMetadataStore, loop: asyncio.AbstractEventLoop) -> None:
        self.store = store
        self.loop = loop
        self._reloading = False
        self._again = False

    def load(self) -> Quotas:
        """Every quota entity in ZooKeeper (blocking: at join, or from a thread)."""
        quotas: Quotas = {}

        def read(path: str) -> None:
            found = self.store.read(f"{CONFIG_ROOT}/{path}")
            if found is None:
                return
            try:
                values = _decode(path, found[0])
                entity = QuotaEntity.from_path(path)
            except ValueError as exc:
                log.warning("client quotas at %s not applied: %s", path, exc)
                return
            if values:
                quotas[entity] = values

        for user in self.store.children(f"{CONFIG_ROOT}/users"):
            read(f"users/{user}")
            for client in self.store.children(f"{CONFIG_ROOT}/users/{user}/clients"):
                read(f"users/{user}/clients/{client}")
        for client in self.store.children(f"{CONFIG_ROOT}/clients"):
            read(f"clients/{client}")
        return quotas

    async def update(self, entity: QuotaEntity, change: Change) -> Values:
        path = entity.path()

        def apply(raw: bytes | None) -> bytes:
            return _encode(change({} if raw is None else _decode(path, raw)))

        notice = json.dumps({"version": 2, "entity_path": path}).encode()
        written, _ = await asyncio.to_thread(
            self.store.update_notified, f"{CONFIG_ROOT}/{path}", apply, CHANGE_PREFIX, notice
        )
        await asyncio.to_thread(self._purge)
        return _decode(path, written)

    def _purge(self) -> None:
        changes = self.store.children(CHANGES)
        for old in changes[: max(0, len(changes) - KEPT_CHANGES)]:
            self.store.delete(f"{CHANGES}/{old}")

    def watch(self, deliver: Callable[[Quotas], None]) -> None:
        """Call back on the event loop with every quota after each change notification,
        whoever wrote it. Reloads run one at a time; one asked for meanwhile runs after, so
        the last delivery reads ZooKeeper after the last notification."""

        def changed(children: list[str]) -> None:
            self.loop.call_soon_threadsafe(self._reload, deliver)

        self.store.watch_children(CHANGES, changed)

    def _reload(self, deliver: Callable[[Quotas], None]) -> None:
        if self._reloading:
            self._again = True
            return
        self._reloading = True
        self.loop.create_task(self._run_reload(deliver))

    async def _run_reload(self, deliver: Callable[[Quotas], None]) -> None:
        try:
            while True:
                self._again = False
                try:
                    quotas = await asyncio.to_thread(self.load)
                except Exception as exc:  # ZooKeeper away: the next notification retries
                    log.warning("client quotas not reloaded: %r", exc)
                else:
                    deliver(quotas)
                if not self._again:
                    return
        finally:
            self._reloading = False
