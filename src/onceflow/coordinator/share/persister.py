"""Where the share coordinator reads and writes share-partition snapshots: the store here
(a single broker, or a state partition this broker leads), or another broker's share
coordinator (broker/share_persister.py), as Kafka's persister does."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol

from onceflow.coordinator.share.records import Ranges, ShareKey, ShareSnapshot
from onceflow.coordinator.share.store import ShareStateStore


class SnapshotPersister(Protocol):
    """Reads and writes share-partition snapshots wherever their state partition is led
    (the store here, or another broker's share coordinator)."""

    async def read(self, key: ShareKey) -> ShareSnapshot | None: ...

    def write(self, key: ShareKey, snapshot: ShareSnapshot, now_ms: int) -> Awaitable[Any]: ...

    def delete(self, key: ShareKey, now_ms: int) -> Awaitable[Any]: ...

    def write_txn(
        self,
        key: ShareKey,
        ranges: Ranges,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        now_ms: int,
    ) -> Awaitable[Any]:
        """Append a transactional acknowledgement as the producer's record in the key's
        state partition (added to the transaction before), wherever it is led."""
        ...

    async def group_configs(self, group_id: str) -> dict[str, str] | None:
        """A group's config overrides where its partition is led (None: here)."""
        ...

    async def alter_group_configs(self, group_id: str, request: Any, version: int) -> Any:
        """Forward an IncrementalAlterConfigs of the group to where its partition is led;
        the answer (None: here)."""
        ...


class LocalPersister:
    """A single broker's: the store leads every state partition."""

    def __init__(self, store: ShareStateStore) -> None:
        self._store = store

    async def read(self, key: ShareKey) -> ShareSnapshot | None:
        return self._store.read_with_pending(key)

    def write(self, key: ShareKey, snapshot: ShareSnapshot, now_ms: int) -> Awaitable[Any]:
        return self._store.write(key, snapshot, now_ms)

    def delete(self, key: ShareKey, now_ms: int) -> Awaitable[Any]:
        return self._store.delete(key, now_ms)

    def write_txn(
        self,
        key: ShareKey,
        ranges: Ranges,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        now_ms: int,
    ) -> Awaitable[Any]:
        return self._store.write_txn_update(
            key, ranges, transactional_id, producer_id, producer_epoch, now_ms
        )

    async def group_configs(self, group_id: str) -> dict[str, str] | None:
        return None

    async def alter_group_configs(self, group_id: str, request: Any, version: int) -> Any:
        return None
