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

        written = await asyncio.to_thread(self.store.update, path, apply)
        return decode(written)

    def watch(
        self,
        on_acls: Callable[[frozenset[AclBinding]], None],
        on_credentials: Callable[[Credentials], None],
    ) -> None:
        """Call back on the event loop with each new set, whoever changed it."""

        def acls_changed(data: bytes | None, _version: int) -> bool:
            self.loop.call_soon_threadsafe(on_acls, decode_bindings(data) if data else frozenset())
            return True

        def credentials_changed(data: bytes | None, _version: int) -> bool:
            self.loop.call_soon_threadsafe(on_credentials, decode_credentials(data) if data else {})
            return True

        self.store.watch_data(SECURITY_ACLS, acls_changed)
        self.store.watch_data(SECURITY_CREDENTIALS, credentials_changed)
