"""ACLs and SCRAM credentials in ZooKeeper, where every broker of the cluster sees them.

Each is one znode holding the whole set, changed by compare-and-set, so two brokers
changing ACLs at once both land; every broker watches both znodes and swaps its in-memory
copy when either changes. The sets are small (ACLs and users, not data), so whole-set
writes cost nothing that matters.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from onceflow.cluster.zk_store import ZkMetadataStore
from onceflow.cluster.znodes import SECURITY_ACLS, SECURITY_CREDENTIALS
from onceflow.security.acl import AclBinding
from onceflow.security.authorizer import decode_bindings, encode_bindings
from onceflow.security.scram import ScramCredential, decode_credentials, encode_credentials

Credentials = dict[str, dict[str, ScramCredential]]
T = TypeVar("T")


class ZkSecurityStore:
    def __init__(self, store: ZkMetadataStore, loop: asyncio.AbstractEventLoop) -> None:
        self.store = store
        self.loop = loop
        # The newest znode version applied per path: a watch event that arrives after this
        # broker's own, newer write must not bring the older set back.
        self._applied: dict[str, int] = {}

    def load(self) -> tuple[frozenset[AclBinding], Credentials]:
        acls = self.store.read(SECURITY_ACLS)
        credentials = self.store.read(SECURITY_CREDENTIALS)
        return (
            decode_bindings(acls[0]) if acls else frozenset(),
            decode_credentials(credentials[0]) if credentials else {},
        )

    async def update_acls(
        self, change: Callable[[frozenset[AclBinding]], frozenset[AclBinding]]
    ) -> frozenset[AclBinding]:
        return await self._update(
            SECURITY_ACLS, decode_bindings, encode_bindings, change, frozenset()
        )

    async def update_credentials(self, change: Callable[[Credentials], Credentials]) -> Credentials:
        return await self._update(
            SECURITY_CREDENTIALS, decode_credentials, encode_credentials, change, {}
        )

    async def _update(
        self,
        path: str,
        decode: Callable[[bytes], T],
        encode: Callable[[T], bytes],
        change: Callable[[T], T],
        empty: T,
    ) -> T:
        def apply(raw: bytes | None) -> bytes:
            return encode(change(empty if raw is None else decode(raw)))

        written, version = await asyncio.to_thread(self.store.update, path, apply)
        self._applied[path] = max(version, self._applied.get(path, -1))
        return decode(written)

    def watch(
        self,
        on_acls: Callable[[frozenset[AclBinding]], None],
        on_credentials: Callable[[Credentials], None],
    ) -> None:
        """Call back on the event loop with each new set, whoever changed it."""

        def acls_changed(data: bytes | None, version: int) -> bool:
            value = decode_bindings(data) if data else frozenset()
            self.loop.call_soon_threadsafe(self._deliver, SECURITY_ACLS, version, on_acls, value)
            return True

        def credentials_changed(data: bytes | None, version: int) -> bool:
            value = decode_credentials(data) if data else {}
            self.loop.call_soon_threadsafe(
                self._deliver, SECURITY_CREDENTIALS, version, on_credentials, value
            )
            return True

        self.store.watch_data(SECURITY_ACLS, acls_changed)
        self.store.watch_data(SECURITY_CREDENTIALS, credentials_changed)

    def _deliver(self, path: str, version: int, deliver: Callable[[T], None], value: T) -> None:
        newest = self._applied.get(path, -1)
        if version != -1 and version <= newest:
            return  # this broker already applied this version or a newer one
        self._applied[path] = max(version, newest)
        deliver(value)
