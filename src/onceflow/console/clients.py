"""The Kafka clients a console uses, all blocking: call them from worker threads only.

One AdminClient (librdkafka keeps its connections and reconnects by itself when a broker
comes back) and, per request, an `onceflow.client` `Cluster` for the KIP-664 APIs
confluent-kafka lacks; both with the `--command-config` security settings. Every call is
bounded by the settings' timeout.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, no __all__
    AdminClient,
    OffsetSpec,
)

from onceflow.client.cluster import Cluster
from onceflow.client.librdkafka import describe_kafka_error
from onceflow.console.settings import ConsoleSettings

__all__ = [
    "ActionRefused",
    "BadRequest",
    "ClusterUnavailable",
    "KafkaClients",
    "PartitionOffsets",
]


class ClusterUnavailable(Exception):
    """The cluster did not answer, or answered with an error: the page shows the message."""


class BadRequest(ValueError):
    """The page asked for something malformed (a bad offset, an unknown format)."""


class ActionRefused(Exception):
    """An action the console will not do as asked (the transaction no longer hangs)."""


@dataclass(frozen=True, slots=True)
class PartitionOffsets:
    """Where a partition's log starts, how far read_committed consumers may read (the last
    stable offset) and how far read_uncommitted ones may (the high watermark)."""

    earliest: int
    lso: int
    high_watermark: int

    def end(self, isolation_level: str) -> int:
        """The offset a consumer at this isolation level reads up to (exclusive)."""
        return self.lso if isolation_level == "read_committed" else self.high_watermark


class KafkaClients:
    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        self._admin: Any = None
        self._lock = threading.Lock()

    @property
    def timeout_s(self) -> float:
        return self.settings.timeout_s

    @property
    def admin(self) -> Any:
        with self._lock:
            if self._admin is None:
                self._admin = AdminClient(self.settings.client_config())
            return self._admin

    def wire(self) -> Cluster:
        """A fresh connection to the cluster for the transaction APIs (close it: `with`)."""
        return Cluster(self.settings.bootstrap, self.timeout_s, self.settings.wire_security())

    def consumer(self, isolation_level: str) -> Any:
        """A consumer for the record browser: assign() only, never commits."""
        return Consumer(
            self.settings.client_config(
                **{
                    "group.id": "onceflow-console",
                    "enable.auto.commit": False,
                    "enable.partition.eof": False,
                    "isolation.level": isolation_level,
                }
            )
        )

    def result(self, future: Future[Any]) -> Any:
        """A confluent-kafka future's value; its error or a timeout as ClusterUnavailable."""
        try:
            return future.result(timeout=self.timeout_s)
        except TimeoutError:
            raise ClusterUnavailable(
                f"the cluster did not answer within {self.timeout_s:g} s"
            ) from None
        except KafkaException as exc:
            raise ClusterUnavailable(describe_kafka_error(exc)) from None

    def metadata(self, topic: str | None = None) -> Any:
        """confluent-kafka's ClusterMetadata: brokers, topics, replicas and ISRs."""
        try:
            return self.admin.list_topics(topic=topic, timeout=self.timeout_s)
        except KafkaException as exc:
            raise ClusterUnavailable(describe_kafka_error(exc)) from None

    def latest_offsets(
        self, partitions: list[tuple[str, int]], committed: bool
    ) -> dict[tuple[str, int], int]:
        """ListOffsets latest: the LSO with `committed` (read_committed), else the HWM."""
        if not partitions:
            return {}
        level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        return self.list_offsets(partitions, latest, level)

    def earliest_offsets(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        if not partitions:
            return {}
        earliest = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
        return self.list_offsets(partitions, earliest, IsolationLevel.READ_UNCOMMITTED)

    def list_offsets(
        self, partitions: list[tuple[str, int]], spec: Any, level: Any
    ) -> dict[tuple[str, int], int]:
        futures = self._list_offsets(partitions, spec, level)
        return {(tp.topic, tp.partition): int(self.result(f).offset) for tp, f in futures.items()}

    def partition_offsets(self, topic: str, partition: int) -> PartitionOffsets:
        """One partition's earliest offset, LSO and high watermark: three ListOffsets sent
        at once, so that a live page pays for one round trip."""
        key = [(topic, partition)]
        earliest = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        calls = [
            self._list_offsets(key, earliest, IsolationLevel.READ_UNCOMMITTED),
            self._list_offsets(key, latest, IsolationLevel.READ_COMMITTED),
            self._list_offsets(key, latest, IsolationLevel.READ_UNCOMMITTED),
        ]
        first, stable, high = (
            int(self.result(f).offset) for futures in calls for f in futures.values()
        )
        return PartitionOffsets(earliest=first, lso=stable, high_watermark=high)

    def _list_offsets(
        self, partitions: list[tuple[str, int]], spec: Any, level: Any
    ) -> dict[Any, Future[Any]]:
        futures: dict[Any, Future[Any]] = self.admin.list_offsets(
            {TopicPartition(t, p): spec for t, p in partitions},
            isolation_level=level,
            request_timeout=self.timeout_s,
        )
        return futures
