"""Partitions and offsets on the driver, for planning the `onceflow` source's reads (and
for a read task's range check): confluent-kafka's AdminClient, ListOffsets at
READ_COMMITTED so a partition's end is its last stable offset."""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, no __all__
    AdminClient,
    OffsetSpec,
)

from onceflow.retry import Backoff, retry
from onceflow.spark.access import (
    ACCESS_DENIED,
    ConnectionErrors,
    access_error,
    await_broker,
    check_client,
    list_topics,
)
from onceflow.spark.offsets import EARLIEST, LATEST, PartitionOffsets, TopicPartitionKey
from onceflow.spark.options import CLIENT_DEFAULTS, OffsetsOption, OptionError, Subscription

__all__ = ["KafkaMetadata", "PartitionGone", "require_assigned", "resolve_offsets"]

# Kafka's own internal topics, which a pattern subscription never matches (as Kafka's
# consumer with exclude.internal.topics=true).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

# Deadline of one metadata or ListOffsets round trip on the driver.
ADMIN_TIMEOUT_S = 60.0
# One ListOffsets attempt's own limit, within ADMIN_TIMEOUT_S: a request librdkafka sent
# to a broker that was then killed can stay unanswered long after the broker is back, and
# a new client with a new connection answers in milliseconds.
LIST_OFFSETS_ATTEMPT_S = 15.0
# ListOffsets is retried this often on retriable errors (as Spark's fetchOffset.numRetries).
LIST_OFFSETS_ATTEMPTS = 3
LIST_OFFSETS_BACKOFF_S = 1.0
# Answers meaning the partition's leader is moving: retried until ADMIN_TIMEOUT_S.
LEADER_MOVING = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.REPLICA_NOT_AVAILABLE,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError.OFFSET_NOT_AVAILABLE,  # a new leader's high watermark not yet caught up
        KafkaError._TRANSPORT,
        KafkaError._TIMED_OUT,
    }
)


class PartitionGone(RuntimeError):
    """ListOffsets answered that the partition does not exist (its topic was deleted)."""


# Answers that mean the partition itself is gone, not that Kafka could not be asked.
PARTITION_GONE = frozenset(
    {
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._UNKNOWN_TOPIC,
    }
)


class KafkaMetadata:
    """Partition discovery and ListOffsets through one lazily created AdminClient."""

    def __init__(self, kafka: Mapping[str, str]) -> None:
        # Looking a named topic up must never create it.
        self._conf: dict[str, Any] = {
            **CLIENT_DEFAULTS,
            **kafka,
            "allow.auto.create.topics": False,
        }
        self._admin: AdminClient | None = None
        self._errors = ConnectionErrors()
        self._connected = False

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self._errors = ConnectionErrors()
            conf: dict[str, Any] = {**self._conf, "error_cb": self._errors}
            self._admin = AdminClient(conf)
            self._connected = False
        return self._admin

    def close(self) -> None:
        self._admin = None

    def partitions(self, sub: Subscription) -> list[TopicPartitionKey]:
        """The partitions of the subscription that exist now, sorted. A named topic the
        principal may not describe is a KafkaAccessError, not a topic that does not exist."""
        md = list_topics(self.admin, self._errors, ADMIN_TIMEOUT_S)
        existing: dict[str, list[int]] = {
            name: sorted(t.partitions) for name, t in md.topics.items() if t.error is None
        }
        if sub.kind == "subscribe":
            self.check_access(t for t in sub.topics if t not in existing)
            names = [t for t in sub.topics if t in existing]
        elif sub.kind == "subscribePattern":
            rx = re.compile(sub.pattern or "")
            names = [t for t in existing if t not in INTERNAL_TOPICS and rx.fullmatch(t)]
        else:
            self.check_access({t for t, _ in sub.partitions if t not in existing})
            return [tp for tp in sub.partitions if tp[1] in existing.get(tp[0], ())]
        return sorted((t, p) for t in names for p in existing[t])

    def check_access(self, topics: Iterable[str]) -> None:
        """Topics missing from the full listing: Kafka leaves out those the principal may
        not describe, so ask for each by name, which says TOPIC_AUTHORIZATION_FAILED."""
        for topic in sorted(set(topics)):
            md = list_topics(self.admin, self._errors, ADMIN_TIMEOUT_S, topic)
            found = md.topics.get(topic)
            err = found.error if found is not None else None
            if isinstance(err, KafkaError) and err.code() in ACCESS_DENIED:
                raise access_error(err, f"cannot describe topic '{topic}'")

    def _gone(self, keys: Iterable[TopicPartitionKey]) -> bool:
        """Whether Metadata no longer has one of the partitions. librdkafka's "no leaders
        found" means that, or a partition with no leader just now: only Metadata tells."""
        for topic, partition in keys:
            md = list_topics(self.admin, self._errors, ADMIN_TIMEOUT_S, topic)
            found = md.topics.get(topic)
            err = found.error if found is not None else None
            if isinstance(err, KafkaError) and err.code() in ACCESS_DENIED:
                raise access_error(err, f"cannot describe topic '{topic}'")
            if found is None or err is not None or partition not in found.partitions:
                return True
        return False

    def earliest(self, tps: Iterable[TopicPartitionKey]) -> PartitionOffsets:
        """Log start offsets."""
        return self._list_offsets(tps, OffsetSpec.earliest())  # type: ignore[no-untyped-call]

    def latest(self, tps: Iterable[TopicPartitionKey]) -> PartitionOffsets:
        """Last stable offsets: the end of what read_committed may read."""
        return self._list_offsets(tps, OffsetSpec.latest())  # type: ignore[no-untyped-call]

    def _list_offsets(self, tps: Iterable[TopicPartitionKey], spec: OffsetSpec) -> PartitionOffsets:
        keys = sorted(set(tps))
        if not keys:
            return {}
        attempts = 0
        deadline = time.monotonic() + ADMIN_TIMEOUT_S

        def once() -> PartitionOffsets | None:
            """The offsets, or None after a failure worth another attempt."""
            nonlocal attempts
            attempts += 1
            if not self._connected:  # a new admin client
                await_broker(self.admin, self._errors, ADMIN_TIMEOUT_S, keys[0][0])
                self._connected = True
            limit = max(min(LIST_OFFSETS_ATTEMPT_S, deadline - time.monotonic()), 1.0)
            futures = self.admin.list_offsets(
                {TopicPartition(t, p): spec for t, p in keys},
                isolation_level=IsolationLevel.READ_COMMITTED,
                request_timeout=limit,
            )
            out: PartitionOffsets = {}
            try:
                for tp, fut in futures.items():
                    out[(tp.topic, tp.partition)] = int(fut.result(timeout=limit).offset)
                # An answer without an offset (librdkafka's OFFSET_INVALID, -1001, with no
                # error; seen once as a new leader took over): never a log start or an LSO,
                # which are never negative. Asked again until the deadline.
                if unknown := sorted(k for k, offset in out.items() if offset < 0):
                    if time.monotonic() >= deadline:
                        raise RuntimeError(f"ListOffsets of {_names(unknown)}: no offset")
                    self.close()
                    return None
                return out
            except TimeoutError as exc:  # unanswered: a new client, until the deadline
                if time.monotonic() >= deadline:
                    raise RuntimeError(f"ListOffsets of {_names(keys)}: no answer") from exc
                self.close()
                return None
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                code = err.code() if isinstance(err, KafkaError) else None
                self._raise_if_denied(err, f"ListOffsets of {_names(keys)}")
                if code in PARTITION_GONE or (code == KafkaError._NOENT and self._gone(keys)):
                    raise PartitionGone(f"ListOffsets of {_names(keys)}: {exc}") from exc
                # A leader moving (a broker died or shut down, on a cluster) is waited out
                # until the deadline; librdkafka's admin client does not call it retriable.
                # Its "no leaders found" (_NOENT) for a partition that still exists is one:
                # the partition has no leader until the controller elects another.
                leaderless = code in LEADER_MOVING or code == KafkaError._NOENT
                moving = leaderless and time.monotonic() < deadline
                retriable = isinstance(err, KafkaError) and err.retriable()
                if not moving and (not retriable or attempts >= LIST_OFFSETS_ATTEMPTS):
                    raise RuntimeError(f"ListOffsets failed for {keys}: {exc}") from exc
                self.close()  # a new client asks the cluster afresh who leads
                return None

        # No limit here: once() raises when it gives up, by the two rules above.
        offsets = retry(once, Backoff(LIST_OFFSETS_BACKOFF_S), retry_if=lambda got: got is None)
        assert offsets is not None
        return offsets

    def _raise_if_denied(self, err: object, what: str) -> None:
        """A denied operation or a refused login is a KafkaAccessError: never retried, and
        never mistaken for a partition that was deleted."""
        if isinstance(err, KafkaError) and err.code() in ACCESS_DENIED:
            raise access_error(err, what)
        check_client(self.admin, self._errors, what)


def _names(tps: Iterable[TopicPartitionKey]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in tps)


def resolve_offsets(
    option: OffsetsOption,
    name: str,
    tps: Sequence[TopicPartitionKey],
    sub: Subscription,
    meta: KafkaMetadata,
) -> PartitionOffsets:
    """Turn `earliest`, `latest` or JSON offsets into offsets of every partition in `tps`.
    JSON offsets must name exactly the subscribed partitions, as in Spark."""
    if option == "earliest":
        return meta.earliest(tps)
    if option == "latest":
        return meta.latest(tps)
    given, have = set(option), set(tps)
    if given != have:
        missing = ", ".join(f"{t}-{p}" for t, p in sorted(have - given))
        unknown = ", ".join(f"{t}-{p}" for t, p in sorted(given - have))
        problems = []
        if missing:
            problems.append(f"it has no offset for {missing}")
        if unknown:
            problems.append(f"{unknown} is not a partition of {sub.describe()} that exists")
        raise OptionError(
            f"option '{name}' must give an offset for every partition of the subscription: "
            + "; ".join(problems)
        )
    out = dict(option)
    need_earliest = [tp for tp, o in option.items() if o == EARLIEST]
    need_latest = [tp for tp, o in option.items() if o == LATEST]
    out.update(meta.earliest(need_earliest))
    out.update(meta.latest(need_latest))
    return out


def require_assigned(sub: Subscription, tps: Sequence[TopicPartitionKey]) -> None:
    if sub.kind == "assign":
        missing = sorted(set(sub.partitions) - set(tps))
        if missing:
            names = ", ".join(f"{t}-{p}" for t, p in missing)
            raise OptionError(f"option 'assign' names partitions that do not exist: {names}")
