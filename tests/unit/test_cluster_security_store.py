"""ZkSecurityStore: a watch event older than this broker's own write never brings an older
ACL or credential set back."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from onceflow.cluster.security_store import ZkSecurityStore
from onceflow.cluster.znodes import SECURITY_ACLS
from onceflow.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePattern,
    ResourceType,
)
from onceflow.security.authorizer import decode_bindings, encode_bindings


def _binding(topic: str) -> AclBinding:
    return AclBinding(
        ResourcePattern(ResourceType.TOPIC, topic),
        AccessControlEntry("User:a", "*", AclOperation.READ, AclPermissionType.ALLOW),
    )


class FakeZk:
    """One znode per path with a version, and watches that fire when told to."""

    def __init__(self) -> None:
        self.data: dict[str, tuple[bytes, int]] = {}
        self.watches: dict[str, Callable[[bytes | None, int], bool]] = {}

    def read(self, path: str) -> tuple[bytes, int] | None:
        return self.data.get(path)

    def update(self, path: str, change: Callable[[bytes | None], bytes]) -> tuple[bytes, int]:
        current = self.data.get(path)
        data = change(None if current is None else current[0])
        version = 0 if current is None else current[1] + 1
        self.data[path] = (data, version)
        return data, version

    def watch_data(self, path: str, callback: Callable[[bytes | None, int], bool]) -> None:
        self.watches[path] = callback


def test_a_late_watch_event_does_not_undo_a_newer_local_write() -> None:
    async def run() -> list[frozenset[AclBinding]]:
        zk = FakeZk()
        store = ZkSecurityStore(zk, asyncio.get_running_loop())  # type: ignore[arg-type]
        seen: list[frozenset[AclBinding]] = []
        store.watch(seen.append, lambda _c: None)
        old = frozenset({_binding("old")})
        await store.update_acls(lambda _cur: old)  # version 0
        await store.update_acls(lambda cur: cur | {_binding("new")})  # version 1
        # The watch now reports version 0 (late), then version 1: both already applied.
        zk.watches[SECURITY_ACLS](encode_bindings(old), 0)
        zk.watches[SECURITY_ACLS](zk.data[SECURITY_ACLS][0], 1)
        # Another broker's newer write (version 2) is delivered.
        newer: Any = frozenset({_binding("other")})
        zk.watches[SECURITY_ACLS](encode_bindings(newer), 2)
        await asyncio.sleep(0)
        return seen

    seen = asyncio.run(run())
    assert seen == [frozenset({_binding("other")})]
    assert decode_bindings(encode_bindings(seen[0])) == seen[0]
