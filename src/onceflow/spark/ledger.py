"""The sink's ledger: the last micro-batch each write task of a sink has committed.

One entry per (sink, task partition), that is per transactional id `<sink>-<partition>`:
the committed offset of consumer group `onceflow-sink-<sink>-<partition>` on partition 0 of
the ledger topic, which holds `last batch id + 1`, with the writer's owner (the streaming
query id, or empty) as the offset's metadata. The task writes the entry with
`send_offsets` (Kafka's sendOffsetsToTransaction) inside the same Kafka transaction as its
records, so the entry
and the records become visible together or not at all (TxnOffsetCommit semantics: pending
transactional offsets materialise only when the COMMIT marker reaches `__consumer_offsets`).

The ledger is read with OffsetFetch `require_stable` (as librdkafka does for a consumer with
`isolation.level=read_committed`): an entry whose transaction is still being decided is
waited out, never read half-way. The task reads it only after its producer's init, which
has fenced every older attempt of the task and completed (committed or aborted) its open
transaction, so what it reads cannot change behind its back.

The ledger topic never receives a record; it exists because Kafka accepts committed offsets
only for a partition that exists. A group per task (rather than one per sink) keeps it at a
single partition, so the sink never has to grow it (which would need CreatePartitions).
The task writes and reads the entry through the participant client (`send_offsets`,
`GroupOffsets`); `Ledger` creates the topic and reads entries through confluent-kafka. Both
speak only Kafka's protocol, so the ledger works on Apache Kafka unchanged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from onceflow.spark.access import (
    ACCESS_DENIED,
    ConnectionErrors,
    access_error,
    check_client,
    in_slices,
    list_topics,
)
from onceflow.spark.options import CLIENT_DEFAULTS

__all__ = [
    "DEFAULT_LEDGER_TOPIC",
    "LEDGER_GROUP_PREFIX",
    "LEDGER_PARTITION",
    "Ledger",
    "LedgerEntry",
    "ensure_ledger_topic",
    "forget_ledger_topic",
    "ledger_group",
    "topic_known",
]

DEFAULT_LEDGER_TOPIC = "__onceflow_sink_ledger"
LEDGER_GROUP_PREFIX = "onceflow-sink-"
LEDGER_PARTITION = 0
LEDGER_DENIED = ACCESS_DENIED | {KafkaError.GROUP_AUTHORIZATION_FAILED}

# Ledger topics this process has already seen exist (Python workers are reused across
# tasks, so most tasks skip the metadata round trip). Keyed by (bootstrap servers, user,
# topic): another user of the same process may not be allowed to see it.
_known_topics: set[tuple[str, str, str]] = set()
_known_lock = threading.Lock()


@dataclass(frozen=True)
class LedgerEntry:
    """A task's last committed write: `next_batch` is that batch id + 1; `owner` is who
    wrote it (the streaming query id, or "" for a plain batch write)."""

    next_batch: int
    owner: str


def ledger_group(transactional_id: str) -> str:
    """The consumer group that holds the ledger entry of one write task."""
    return LEDGER_GROUP_PREFIX + transactional_id


def topic_known(client_config: Mapping[str, str], topic: str) -> bool:
    """Whether this process has seen the ledger topic exist (so `ensure_topic` would return
    at once) for these client settings."""
    with _known_lock:
        return _topic_key(client_config, topic) in _known_topics


def ensure_ledger_topic(
    client_config: Mapping[str, str],
    topic: str,
    transactional_id: str,
    timeout_s: float,
    logger: logging.Logger,
) -> None:
    """Create the ledger topic unless this process has seen it exist (see Ledger), with a
    consumer of the entry of `transactional_id`: a group the sink may use."""
    if topic_known(client_config, topic):
        return
    ledger = Ledger(client_config, topic, transactional_id, timeout_s, logger)
    try:
        ledger.ensure_topic()
    finally:
        ledger.close()


def forget_ledger_topic(client_config: Mapping[str, str], topic: str) -> None:
    """Look the topic up again next time (after a failure, in case it was deleted)."""
    with _known_lock:
        _known_topics.discard(_topic_key(client_config, topic))


def _topic_key(config: Mapping[str, str], topic: str) -> tuple[str, str, str]:
    user = config.get("sasl.username", "") + "|" + config.get("ssl.certificate.location", "")
    return (config.get("bootstrap.servers", ""), user, topic)


class Ledger:
    """The ledger entry of one write task (one transactional id).

    `client_config` is the user's `kafka.*` configuration (security settings and the like);
    the ledger adds what it needs on top. `logger` receives librdkafka's log lines.
    """

    def __init__(
        self,
        client_config: Mapping[str, str],
        topic: str,
        transactional_id: str,
        timeout_s: float,
        logger: logging.Logger,
    ) -> None:
        self.topic = topic
        self.group_id = ledger_group(transactional_id)
        self.timeout_s = timeout_s
        self._client_config = dict(client_config)
        self._logger = logger
        self._errors = ConnectionErrors()
        consumer_config: dict[str, Any] = {
            **CLIENT_DEFAULTS,
            **self._client_config,
            "group.id": self.group_id,
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            # Makes committed() send OffsetFetch with require_stable.
            "isolation.level": "read_committed",
            "allow.auto.create.topics": False,
            "logger": logger,
            "error_cb": self._errors,
        }
        self._consumer = Consumer(consumer_config)

    def ensure_topic(self) -> None:
        """Create the ledger topic (one partition) unless it exists. Concurrent tasks may
        race to create it; losing the race is fine."""
        key = self._topic_key()
        with _known_lock:
            if key in _known_topics:
                return
        deadline = time.monotonic() + self.timeout_s
        admin: AdminClient | None = None
        while True:
            if self._topic_exists():
                with _known_lock:
                    _known_topics.add(key)
                return
            if time.monotonic() > deadline:
                raise KafkaException(
                    KafkaError(
                        KafkaError._TIMED_OUT,
                        f"ledger topic '{self.topic}' did not appear within {self.timeout_s} s",
                    )
                )
            if admin is None:
                admin_config: dict[str, Any] = {
                    **CLIENT_DEFAULTS,
                    **self._client_config,
                    "logger": self._logger,
                }
                admin = AdminClient(admin_config)
            new = NewTopic(self.topic, num_partitions=1, replication_factor=-1)
            future = admin.create_topics([new], request_timeout=self.timeout_s)[self.topic]
            try:
                future.result(timeout=self.timeout_s)
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if not (
                    isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS
                ):
                    raise
            time.sleep(0.05)  # let metadata catch up with the creation before looking again

    def _topic_key(self) -> tuple[str, str, str]:
        return _topic_key(self._client_config, self.topic)

    def _topic_exists(self) -> bool:
        # The task's first Kafka call: a refused login fails it here, at once.
        md = list_topics(self._consumer, self._errors, self.timeout_s, self.topic)
        t = md.topics.get(self.topic)
        if t is not None and isinstance(t.error, KafkaError) and t.error.code() in ACCESS_DENIED:
            raise access_error(t.error, f"cannot describe the sink's ledger topic '{self.topic}'")
        return t is not None and t.error is None and LEDGER_PARTITION in t.partitions

    def read(self) -> LedgerEntry | None:
        """The committed entry, or None when the task has written nothing yet. Waits out a
        pending (undecided) entry."""
        tp = TopicPartition(self.topic, LEDGER_PARTITION)
        # Without READ on the group librdkafka finds no coordinator and committed() would
        # wait out its timeout; the consumer's error events say why at once.
        (got,) = in_slices(
            lambda t: self._consumer.committed([tp], timeout=t),
            lambda: check_client(
                self._consumer,
                self._errors,
                f"cannot read the ledger group '{self.group_id}'",
                LEDGER_DENIED,
            ),
            self._errors,
            self.timeout_s,
        )
        if got.error is not None:
            raise KafkaException(got.error)
        if got.offset < 0:
            return None
        return LedgerEntry(got.offset, got.metadata or "")

    def close(self) -> None:
        self._consumer.close()
