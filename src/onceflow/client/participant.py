"""A participant of two-phase commit (KIP-939): a transactional producer whose transaction
is prepared by one process and committed or aborted by any other.

No released client sends InitProducerId v6, so Onceflow has its own, on its client core::

    producer = TwoPhaseProducer("localhost:9092", "orders-writer-3")
    producer.init()
    producer.begin()
    producer.produce("orders", b"...", key=b"customer-17")
    prepared = producer.prepare()          # store prepared.to_json() with the decision
    ...
    complete(PreparedTransaction.from_json(stored), commit=True,
             bootstrap_servers="localhost:9092")

It uses transaction version 0: partitions join the transaction by AddPartitionsToTxn before
their first batch, so `prepare` ends with every partition added and every record
acknowledged, and the epoch the records carry is the one `complete` must find (version 2
bumps it at every end, and its implicit add would tie the add to a Produce retry). Writes
are idempotent v2 record batches, sealed per partition at `batch.size` or `linger.ms` (looked
at while producing) and sent by a thread of the producer's own; `flush` waits for them all.

With `two_phase=False` it is an ordinary transactional producer (`commit`, `abort`,
`send_offsets`) that takes the broker's InitProducerId version from v0, so it also works
with brokers without KIP-939; the Spark sink's per-task atomicity writes through it, because
`produce_columns` takes Arrow buffers whole where librdkafka takes one record per call.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from onceflow.allocator import keep_freed_memory_once
from onceflow.client.errors import ClientError, ConfigError, KafkaApiError
from onceflow.client.group_offsets import GroupOffsets
from onceflow.client.participant_columns import (
    BinaryColumn,
    Chunk,
    by_partition,
    partition_target,
)
from onceflow.client.participant_complete import complete
from onceflow.client.participant_link import (
    Identity,
    Link,
    add_offsets,
    add_partitions,
    end_txn,
    init_producer_id,
)
from onceflow.client.participant_records import Accumulator, TopicPartition, kafka_partition
from onceflow.client.participant_sender import Sender, SendThread
from onceflow.client.participant_state import (
    PreparedTransaction,
    ProducerSettings,
    StalePreparedTransaction,
    TransactionStateError,
)
from onceflow.errors import ErrorCode
from onceflow.records.record import Header

__all__ = [
    "BinaryColumn",
    "PreparedTransaction",
    "StalePreparedTransaction",
    "TransactionStateError",
    "TwoPhaseProducer",
    "complete",
]

# Errors after which this instance can do nothing more: a newer instance owns the id, or
# it may not use it. Kafka's producer treats them as fatal too.
FATAL = frozenset(
    {
        ErrorCode.producer_fenced,
        ErrorCode.invalid_producer_epoch,
        ErrorCode.transactional_id_authorization_failed,
        ErrorCode.invalid_producer_id_mapping,
        ErrorCode.cluster_authorization_failed,
        ErrorCode.unsupported_version,
    }
)
HeadersArg = Mapping[str, bytes | str | None] | Sequence[tuple[str, bytes | str | None]] | None
_LINGER_CHECK_EVERY = 256  # records between two looks at the clock


def _bytes(value: bytes | str | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def _headers(headers: HeadersArg) -> tuple[Header, ...]:
    if not headers:
        return ()
    items = headers.items() if isinstance(headers, Mapping) else headers
    return tuple((str(k), _bytes(v)) for k, v in items)


class TwoPhaseProducer:
    """A transactional producer for one transactional id, with two-phase commit.

    `init`, then per transaction `begin`, `produce`..., and either `prepare` (the decision
    is someone else's: `complete`) or `commit`/`abort`. Settings by Kafka's names or as
    keywords: `batch.size`, `linger.ms`, `compression.type`, `request.timeout.ms`,
    `delivery.timeout.ms`, `transaction.timeout.ms`, `retry.backoff.ms`, `client.id`,
    `security` (a `ClientSecurity`), `two_phase` (False: an ordinary transactional producer).
    """

    def __init__(self, bootstrap_servers: str, transactional_id: str, **settings: Any) -> None:
        if not transactional_id:
            raise ConfigError("a transactional id is required")
        self.transactional_id = transactional_id
        self.settings = ProducerSettings.of(settings)
        keep_freed_memory_once()  # megabyte batches, freed one after the other
        self._link = Link(bootstrap_servers, self.settings)
        s = self.settings
        self._accumulator = Accumulator(s.batch_size, s.linger_ms / 1000, s.compression)
        self._sender = Sender(
            self._link,
            self._accumulator,
            transactional_id,
            s.request_timeout_ms,
            s.delivery_timeout_ms / 1000,
        )
        self._thread = SendThread(self._sender, self._add)
        self._identity: Identity | None = None
        self._in_transaction = False
        self._prepared = False
        self._added: set[TopicPartition] = set()
        self._offset_groups: set[str] = set()  # groups whose offsets joined the transaction
        self._fatal: KafkaApiError | None = None
        self._abortable: ClientError | None = None
        self._next_partition: dict[str, itertools.count[int]] = {}
        # produce_columns' keyless partition per topic, and the bytes it took so far
        self._sticky: dict[str, tuple[int, int]] = {}
        self._records = 0

    # ---- identity ----------------------------------------------------------------------

    @property
    def producer_id(self) -> int:
        return self._require_identity().producer_id

    @property
    def producer_epoch(self) -> int:
        return self._require_identity().epoch

    def init(self) -> None:
        """InitProducerId (v6 with enable2Pc when two-phase): a producer id and a new epoch,
        which fences every earlier instance of the id and aborts a transaction they left
        open."""
        self._thread.wait_idle(raise_error=False)
        self._identity = self._call(
            lambda: init_producer_id(self._link, self.transactional_id, self.settings, keep=False)
        )
        self._accumulator.reset()
        self._thread.clear()
        self._added.clear()
        self._offset_groups.clear()
        self._in_transaction = self._prepared = False
        self._abortable = None

    # ---- one transaction ---------------------------------------------------------------

    def begin(self) -> None:
        self._usable()
        if self._in_transaction:
            raise TransactionStateError(
                "a transaction is already open: commit, abort or prepare it"
            )
        self._in_transaction = True

    def produce(
        self,
        topic: str,
        value: bytes | str | None,
        key: bytes | str | None = None,
        partition: int | None = None,
        headers: HeadersArg = None,
        timestamp: int | None = None,
    ) -> None:
        """Queue one record in the open transaction: to `partition`, or by the key's murmur2
        as Kafka's default partitioner, or round robin without a key."""
        if not self._in_transaction or self._prepared or self._fatal or self._abortable:
            self._refuse("produce")
        leaders = self._link.partitions.get(topic)
        if leaders is None:
            leaders = self._call(lambda: self._leaders(topic))
        count = len(leaders)
        key_bytes = _bytes(key)
        if partition is None:
            if key_bytes is not None:
                partition = kafka_partition(key_bytes, count)
            else:
                counter = self._next_partition.setdefault(topic, itertools.count())
                partition = next(counter) % count
        elif partition not in leaders:
            raise ConfigError(f"{topic} has no partition {partition} ({count} partitions)")
        ts = time.time_ns() // 1_000_000 if timestamp is None else int(timestamp)
        record = (key_bytes, _bytes(value), _headers(headers))
        full = self._accumulator.append((topic, partition), record, ts)
        self._records += 1
        if full or (self._records % _LINGER_CHECK_EVERY == 0 and self._accumulator.lingering()):
            self._send(everything=False)

    def produce_columns(
        self,
        topic: str,
        values: BinaryColumn,
        keys: BinaryColumn | None = None,
        partition: int | npt.NDArray[np.int64] | None = None,
        headers: BinaryColumn | None = None,
        timestamp: int | None = None,
    ) -> None:
        """Queue `len(values)` records at once, given as columns (e.g. Arrow buffers): what
        `produce` does per record, with numpy work per call instead. `partition` is one
        for all, or one per record (-1: none); `headers` holds each record's encoded
        headers section (`onceflow.records.columnar.header_sections`). Records without a
        partition go by key (murmur2, as `produce`); keyless ones go to one partition until
        `batch.size` bytes went there, then to the next (sticky, as Kafka's partitioner
        since KIP-794), so batches fill before they are sealed."""
        if not self._in_transaction or self._prepared or self._fatal or self._abortable:
            self._refuse("produce")
        if not len(values):
            return
        leaders = self._link.partitions.get(topic)
        if leaders is None:
            leaders = self._call(lambda: self._leaders(topic))
        ts = time.time_ns() // 1_000_000 if timestamp is None else int(timestamp)
        chunk = Chunk.checked(values, keys, headers, ts)
        target = partition_target(partition, len(values), len(leaders), topic)
        keyless, sent = self._sticky.get(topic, (0, 0))
        keyless %= len(leaders)
        for number, part in by_partition(chunk, len(leaders), target, keyless):
            if number == keyless:
                sent += int(part.record_sizes().sum())
            for _full in self._accumulator.append_chunk((topic, number), part):
                self._send(everything=False)
        full = sent >= self.settings.batch_size
        self._sticky[topic] = (keyless + 1, 0) if full else (keyless, sent)
        self._records += len(values)
        if self._accumulator.lingering():
            self._send(everything=False)

    def send_offsets(self, group: str, offsets: Mapping[tuple[str, int], tuple[int, str]]) -> None:
        """Commit `offsets` ((topic, partition) -> (offset, metadata)) for `group` in the
        open transaction (Kafka's sendOffsetsToTransaction, for a group this producer's
        process never joined): visible to the group when the transaction commits, gone
        when it aborts."""
        if not self._in_transaction or self._prepared or self._fatal or self._abortable:
            self._refuse("send offsets")
        identity = self._require_identity()
        pid_epoch = (identity.producer_id, identity.epoch)
        timeout_s = self.settings.delivery_timeout_ms / 1000
        # The connections are the sending thread's while it sends (as in `_leaders`).
        self._call(self._thread.wait_idle)
        if group not in self._offset_groups:
            self._call(
                lambda: add_offsets(self._link, self.transactional_id, pid_epoch, group, timeout_s)
            )
            self._offset_groups.add(group)
        offsets_of = GroupOffsets(self._link, group, timeout_s)
        self._call(
            lambda: offsets_of.commit_in_transaction(self.transactional_id, pid_epoch, offsets)
        )

    def group_offsets(self, group: str) -> GroupOffsets:
        """The committed offsets of `group`, read through this producer's connections;
        outside a transaction only, since its sending thread uses them during one."""
        if self._in_transaction:
            self._refuse("read a group's offsets")
        return GroupOffsets(self._link, group, self.settings.delivery_timeout_ms / 1000)

    def flush(self) -> None:
        """Send every queued record and wait for all of them to be acknowledged."""
        if self._accumulator.pending():
            self._send(everything=True)

    def prepare(self) -> PreparedTransaction:
        """Flush and hand over the transaction: every record is acknowledged and every
        partition added, so `complete` from any process commits or aborts it whole."""
        if not self._in_transaction or self._prepared:
            self._refuse("prepare")
        self.flush()
        identity = self._require_identity()
        self._prepared = True
        return PreparedTransaction(self.transactional_id, identity.producer_id, identity.epoch)

    def commit(self) -> None:
        """Flush and commit the open (or prepared) transaction."""
        if not self._in_transaction:
            self._refuse("commit")
        if self._abortable is not None:
            raise self._abortable
        self.flush()
        self._end(commit=True)

    def abort(self) -> None:
        """Drop what was not sent and abort the transaction. Batches sent but never
        acknowledged leave their sequences unknown, so the producer inits again."""
        if not self._in_transaction:
            self._refuse("abort")
        if self._fatal is not None:
            raise self._fatal
        self._accumulator.drop_open()
        self._thread.wait_idle(raise_error=False)
        unsure = self._accumulator.has_sealed()
        self._end(commit=False)
        if unsure:
            self.init()

    def close(self) -> None:
        """Close the connections. An open transaction stays open: a prepared one for
        `complete`, any other until a new instance of the id inits. Batches being sent
        are waited for."""
        self._thread.close()
        self._link.close()

    def __enter__(self) -> TwoPhaseProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- internals ---------------------------------------------------------------------

    def _send(self, *, everything: bool) -> None:
        identity = self._require_identity()
        self._accumulator.seal(identity.producer_id, identity.epoch, everything=everything)
        self._call(lambda: self._hand_over(everything))

    def _hand_over(self, everything: bool) -> None:
        """Let the sending thread have the sealed batches; wait for all of them
        (`everything`), or only while too many wait (`buffer.memory`)."""
        self._thread.kick()
        if everything:
            self._thread.wait_idle()
        else:
            self._thread.wait_below(self.settings.buffer_memory)

    def _leaders(self, topic: str) -> dict[int, int]:
        """A topic's partitions from Metadata, asked when the sending thread is not using
        the connections."""
        self._thread.wait_idle()
        return self._link.leaders(topic)

    def _add(self, partitions: set[TopicPartition]) -> None:
        new = partitions - self._added
        if not new:
            return
        by_topic: dict[str, list[int]] = {}
        for topic, number in new:
            by_topic.setdefault(topic, []).append(number)
        identity = self._require_identity()
        add_partitions(
            self._link,
            self.transactional_id,
            (identity.producer_id, identity.epoch),
            by_topic,
            self.settings.delivery_timeout_ms / 1000,
        )
        self._added |= new

    def _end(self, *, commit: bool) -> None:
        identity = self._require_identity()
        if self._added or self._offset_groups or commit:
            self._call(
                lambda: end_txn(
                    self._link,
                    self.transactional_id,
                    (identity.producer_id, identity.epoch),
                    commit,
                    self.settings.delivery_timeout_ms / 1000,
                )
            )
        self._added.clear()
        self._offset_groups.clear()
        self._in_transaction = self._prepared = False
        self._abortable = None

    def _call(self, action: Any) -> Any:
        """Run a request step; a fatal refusal sticks to this instance, any other failure
        during a transaction leaves it only abortable."""
        try:
            return action()
        except KafkaApiError as exc:
            if exc.code in FATAL:
                self._fatal = exc
            elif self._in_transaction:
                self._abortable = exc
            raise
        except ClientError as exc:
            if self._in_transaction:
                self._abortable = exc
            raise

    def _usable(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        self._require_identity()

    def _require_identity(self) -> Identity:
        if self._identity is None:
            raise TransactionStateError("init() the producer first")
        return self._identity

    def _refuse(self, what: str) -> None:
        self._usable()
        if self._abortable is not None:
            raise TransactionStateError(
                f"cannot {what}: the transaction failed ({self._abortable}); abort it"
            )
        state = "prepared" if self._prepared else "open" if self._in_transaction else "not open"
        raise TransactionStateError(f"cannot {what}: the transaction is {state}")

    complete = staticmethod(complete)
