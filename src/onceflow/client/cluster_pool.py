"""Connections kept for the next short-lived client of the same process.

A Spark worker runs task after task, and each task of the onceflow sink opens a
participant producer and reads its decision log; the driver opens the decision log and
completes the transactions at every micro-batch. Without reuse each of them connects,
asks ApiVersions, authenticates (a TLS handshake, SASL rounds) and finds its coordinator
again. The pool keeps a client's `Cluster` when it closes cleanly and hands it to the next
client with the same bootstrap servers, timeout and security. A cluster is only reused if
all its connections are idle and still open (`Cluster.reusable`), for at most
`MAX_IDLE_S`; a connection that failed is never given back (`Link.reset` closes it).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Hashable

from onceflow.client.cluster import Cluster
from onceflow.security.client_config import ClientSecurity

__all__ = ["MAX_IDLE_S", "ClusterPool", "pool"]

MAX_IDLE_S = 60.0  # well under brokers' connections.max.idle.ms (10 minutes by default)
MAX_IDLE_PER_KEY = 4  # a worker runs one task at a time; a driver a few commits at once

_Key = tuple[str, float, Hashable]


class ClusterPool:
    """Idle clusters by bootstrap servers, timeout and security settings."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[_Key, list[tuple[float, Cluster]]] = {}
        self._pid = os.getpid()

    def take(self, bootstrap: str, timeout_s: float, security: ClientSecurity | None) -> Cluster:
        """An idle cluster for these settings that may still be used, or a new one."""
        key = _key(bootstrap, timeout_s, security)
        while (found := self._pop(key)) is not None:
            since, cluster = found
            if time.monotonic() - since < MAX_IDLE_S and cluster.reusable():
                return cluster
            cluster.close()
        return Cluster(bootstrap, timeout_s, security)

    def give_back(
        self, cluster: Cluster, bootstrap: str, timeout_s: float, security: ClientSecurity | None
    ) -> None:
        """Keep a cluster its client no longer uses (closed if the pool is full)."""
        key = _key(bootstrap, timeout_s, security)
        with self._lock:
            self._forget_after_fork()
            idle = self._idle.setdefault(key, [])
            if len(idle) < MAX_IDLE_PER_KEY:
                idle.append((time.monotonic(), cluster))
                return
        cluster.close()

    def clear(self) -> None:
        """Close every idle cluster."""
        with self._lock:
            idle = [c for entries in self._idle.values() for _, c in entries]
            self._idle.clear()
        for cluster in idle:
            cluster.close()

    def _pop(self, key: _Key) -> tuple[float, Cluster] | None:
        with self._lock:
            self._forget_after_fork()
            idle = self._idle.get(key)
            return idle.pop() if idle else None

    def _forget_after_fork(self) -> None:
        """A forked child must not share its parent's sockets: it drops them unclosed."""
        if self._pid != os.getpid():
            self._idle.clear()
            self._pid = os.getpid()


def _key(bootstrap: str, timeout_s: float, security: ClientSecurity | None) -> _Key:
    return (bootstrap, timeout_s, None if security is None else security.identity())


pool = ClusterPool()
