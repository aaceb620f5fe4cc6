"""The Kafka clients a console uses, all blocking: call them from worker threads only.

One AdminClient (librdkafka keeps its connections and reconnects by itself when a broker
comes back) and, per request, a `kafka_wire.Cluster` for the KIP-664 APIs confluent-kafka
lacks; both with the `--command-config` security settings. Every call is bounded by the
settings' timeout.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

from confluent_kafka import Consumer, IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, no __all__
    AdminClient,
    OffsetSpec,
)

from onceflow.cli.common import describe_kafka_error
from onceflow.cli.kafka_wire import Cluster
from onceflow.console.settings import ConsoleSettings

__all__ = ["ActionRefused", "BadRequest", "ClusterUnavailable", "KafkaClients"]


class ClusterUnavailable(Exception):
    """The cluster did not answer, or answered with an error: the page shows the message."""


class BadRequest(ValueError):
    """The page asked for something malformed (a bad offset, an unknown format)."""


class ActionRefused(Exception):
    """An action the console will not do as asked (the transaction no longer hangs)."""


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
        futures = self.admin.list_offsets(
            {TopicPartition(t, p): spec for t, p in partitions},
            isolation_level=level,
            request_timeout=self.timeout_s,
        )
        return {(tp.topic, tp.partition): int(self.result(f).offset) for tp, f in futures.items()}
