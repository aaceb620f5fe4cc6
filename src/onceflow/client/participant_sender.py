"""Sending the participant client's sealed batches: one Produce request (acks=all) per
leader carrying the oldest sealed batch of each of its partitions, until all are
acknowledged.

A batch the broker refused retriably (its leader moved, not enough replicas) or whose
answer was lost with the connection is sent again as it is, same bytes and sequence: the
broker answers a duplicate with the offsets it gave the first time. Partitions the
transaction does not hold yet are added (AddPartitionsToTxn) before their first batch.
Any other refusal is raised with Kafka's name.

`SendThread` runs the sending beside the producer, so the next batch is built while the
broker writes the last one (the socket wait frees the interpreter lock).
"""

from __future__ import annotations

import datetime
import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from onceflow.client.errors import KafkaApiError, Unreachable
from onceflow.client.participant_link import Link, version
from onceflow.client.participant_records import Accumulator, SealedBatch, TopicPartition
from onceflow.client.retry import retrying
from onceflow.client.wire import placeholder, request_entity
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, request_type

__all__ = ["PRODUCE_VERSIONS", "SendThread", "Sender"]

# Produce v3 is the first with one batch per partition and a transactional id; v12 would
# add partitions implicitly (transaction version 2), which this client does not use.
PRODUCE_VERSIONS = (3, 11)
_ACKNOWLEDGED = {ErrorCode.none, ErrorCode.duplicate_sequence_number}


class Sender:
    """Sends an accumulator's sealed batches for one transactional producer."""

    def __init__(
        self,
        link: Link,
        accumulator: Accumulator,
        transactional_id: str,
        request_timeout_ms: int,
        delivery_timeout_s: float,
    ) -> None:
        self.link = link
        self.accumulator = accumulator
        self.transactional_id = transactional_id
        self.timeout = datetime.timedelta(milliseconds=request_timeout_ms)
        self.delivery_timeout_s = delivery_timeout_s
        self._last_error = ErrorCode.none

    def send_sealed(
        self,
        add: Callable[[set[TopicPartition]], None],
        progress: Callable[[], None] = lambda: None,
    ) -> None:
        """Send until every sealed batch is acknowledged; `add` puts partitions into the
        transaction first, `progress` is told after each request. Raises after
        `delivery_timeout_s` without progress."""
        while self.accumulator.has_sealed():
            again = retrying(
                lambda: self._round(add, progress),
                lambda retry: retry,
                self.delivery_timeout_s,
                self.link.backoff_s,
            )
            if again:
                code = self._last_error
                what = f"{self.transactional_id}'s batches were not acknowledged in time"
                if code == ErrorCode.network_exception:
                    raise Unreachable(f"{what}: no leader could be reached")
                raise KafkaApiError(code, f"{what}: {ErrorCode(code).name.upper()}")

    def _round(
        self, add: Callable[[set[TopicPartition]], None], progress: Callable[[], None]
    ) -> bool:
        """One Produce request per leader; whether a retriable failure calls for a pause."""
        heads = self.accumulator.heads()
        add({batch.tp for batch in heads})
        by_leader: dict[int, list[SealedBatch]] = defaultdict(list)
        again = False
        for batch in heads:
            try:
                leader = self.link.leaders(batch.tp[0]).get(batch.tp[1], -1)
            except Unreachable:
                self._lost()
                return True
            except KafkaApiError as exc:
                if not ErrorCode(exc.code).retriable:
                    raise
                leader = -1
            if leader < 0:
                self.link.forget([batch.tp[0]])
                self._last_error = ErrorCode.leader_not_available
                again = True
            else:
                by_leader[leader].append(batch)
        for leader, batches in by_leader.items():
            try:
                connection = self.link.wire.node(leader)
                v = version(connection, ApiKey.PRODUCE, *PRODUCE_VERSIONS)
                # The batches go where their placeholders are, without a copy.
                blobs = [batch.data for batch in batches]
                answer = connection.call_at(ApiKey.PRODUCE, v, self._request(v, batches), blobs)
            except Unreachable:
                self._lost()
                return True
            again = self._acknowledge(batches, answer) or again
            progress()
        return again

    def _lost(self) -> None:
        self.link.reset()
        self._last_error = ErrorCode.network_exception

    def _request(self, v: int, batches: list[SealedBatch]) -> Any:
        """The Produce request, each batch's records a placeholder (`wire.placeholder`)."""
        by_topic: dict[str, list[Any]] = defaultdict(list)
        for i, batch in enumerate(batches):
            by_topic[batch.tp[0]].append(
                request_entity(
                    ApiKey.PRODUCE,
                    v,
                    "PartitionProduceData",
                    index=batch.tp[1],
                    records=placeholder(i),
                )
            )
        return build(
            request_type(ApiKey.PRODUCE, v),
            transactional_id=self.transactional_id,
            acks=-1,
            timeout=self.timeout,
            topic_data=tuple(
                request_entity(
                    ApiKey.PRODUCE, v, "TopicProduceData", name=name, partition_data=tuple(parts)
                )
                for name, parts in by_topic.items()
            ),
        )

    def _acknowledge(self, batches: list[SealedBatch], answer: Any) -> bool:
        codes = {
            (topic.name, part.index): int(part.error_code)
            for topic in answer.responses
            for part in topic.partition_responses
        }
        again = False
        for batch in batches:
            code = codes.get(batch.tp, ErrorCode.unknown_server_error)
            if code in _ACKNOWLEDGED:
                self.accumulator.sent(batch)
            elif ErrorCode(code).retriable:
                self.link.forget([batch.tp[0]])
                self._last_error = ErrorCode(code)
                again = True
            else:
                name = ErrorCode(code).name.upper()
                raise KafkaApiError(
                    code,
                    f"Produce to {batch.tp[0]}-{batch.tp[1]} of {self.transactional_id}: {name}",
                )
        return again


class SendThread:
    """Sends an accumulator's sealed batches on a thread of its own, when kicked.

    A failure stops the sending until `clear`; the producer's next call raises it.
    """

    def __init__(self, sender: Sender, add: Callable[[set[TopicPartition]], None]) -> None:
        self.sender = sender
        self.add = add
        self._cond = threading.Condition()
        self._work = self._busy = self._closed = False
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def kick(self) -> None:
        """Sealed batches are waiting; a failure of earlier sending is raised here."""
        with self._cond:
            self._raise()
            self._work = True
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="participant-sender", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def wait_below(self, limit: int) -> None:
        """Wait while more than `limit` bytes of sealed batches wait to be acknowledged."""
        with self._cond:
            while self.sender.accumulator.sealed_bytes > limit and self._active():
                self._cond.wait()
            self._raise()

    def wait_idle(self, *, raise_error: bool = True) -> None:
        """Wait until nothing is being sent; then raise a failure, if asked."""
        with self._cond:
            while self._active():
                self._cond.wait()
            if raise_error:
                self._raise()

    def clear(self) -> None:
        """Forget a failure (the producer starts over: new epoch, nothing sealed)."""
        with self._cond:
            self._error = None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()

    def _active(self) -> bool:
        return (self._work or self._busy) and self._error is None and not self._closed

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def _notify(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not (self._work and self._error is None) and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                self._work, self._busy = False, True
            try:
                self.sender.send_sealed(self.add, self._notify)
            except BaseException as exc:  # handed to the producer's thread
                with self._cond:
                    self._error = exc
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
