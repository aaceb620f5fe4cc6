"""Per-batch atomicity: a micro-batch's tasks are committed all together or not at all,
through two-phase commit (KIP-939) and Onceflow's participant client.

Each task writes its rows in a 2PC transaction under its usual transactional id
`<sinkId>-<task partition>` (the init fences and aborts every older attempt of the task) and
prepares it; its commit message carries the prepared state. The driver's commit then:

1. records its decision: an offset commit of group `onceflow-sink-decisions-<sinkId>` on the
   ledger topic, offset `batchId + 1`, metadata the owner (query id) and every task's
   prepared state. An OffsetCommit is acknowledged once replicated and is idempotent (the
   same value written twice is one decision), and it is read back with `require_stable`;
2. completes every task's transaction: all in one CompleteTransactions request where the
   broker serves it (Onceflow's own API, see `onceflow.client.participant_group`), so a
   reader sees the batch appear at once, never in part, even if the driver dies meanwhile;
   one by one otherwise (a broker with only Kafka's KIP-939), when a reader can see part
   of the batch until the driver finishes.

For the one-request completion every task's transactional id must map to the same
`__transaction_state` partition: the tasks use `<sinkId>-<task partition>` or, when that
maps elsewhere, the same with the smallest `~<n>` suffix that maps to the sink id's
partition (`colocated_ids`, a pure function of the names and the partition count, which
the decision records).

Why a dead driver is safe: Spark replays only the last batch it did not log as committed.
If the decision is recorded (its batch id >= the replayed one), the replayed tasks do not
init (which would abort what was decided); each completes its own listed transaction and
writes nothing, and the driver completes every listed one again (`complete` of a finished
transaction is a no-op for an abort and StalePreparedTransaction for a commit, which here
means "done already"). If no decision is recorded, the replayed tasks' inits abort the
leftovers and write the batch again. Without a decision nothing was ever committed, with one
everything is: no batch is ever committed in part.

The default atomicity is asked of the broker: an InitProducerId v6 with enable2Pc for a
probe id `onceflow-sink-probe-<sinkId>`, refused (TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
the switch is off or the ACL missing) or not offered (UnsupportedVersion) means per-task.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from onceflow.client.errors import KafkaApiError, Unreachable, UnsupportedVersion
from onceflow.client.group_offsets import GroupOffsets
from onceflow.client.participant import (
    PreparedTransaction,
    StalePreparedTransaction,
    TwoPhaseProducer,
    complete,
)
from onceflow.client.participant_group import (
    colocated_ids,
    complete_together,
    supports_complete_together,
    transaction_log_partition_count,
)
from onceflow.client.participant_link import Link, init_producer_id
from onceflow.client.participant_state import ProducerSettings
from onceflow.errors import ErrorCode
from onceflow.security.client_config import ClientSecurity
from onceflow.spark.ledger import LEDGER_PARTITION, ensure_ledger_topic, ledger_group
from onceflow.spark.options import OptionError

__all__ = [
    "DECISIONS_PREFIX",
    "Atomicity",
    "Decision",
    "DecisionLog",
    "DecisionTooLarge",
    "broker_has_two_phase_commit",
    "choose_atomicity",
    "colocation",
    "complete_all",
    "complete_decided",
    "not_open",
    "participant_settings",
    "prepared_of",
    "read_decision",
    "task_transactional_id",
]

log = logging.getLogger(__name__)

Atomicity = Literal["batch", "task"]
DECISIONS_PREFIX = "decisions-"
T = TypeVar("T")
_DENIED = {
    ErrorCode.group_authorization_failed,
    ErrorCode.topic_authorization_failed,
    ErrorCode.cluster_authorization_failed,
}
# How long the probe at the start waits for the broker.
PROBE_TIMEOUT_MS = 15_000


# The sink's `kafka.*` producer settings the participant client takes too, by Kafka's or
# librdkafka's name: the participant's setting, and its type.
_PRODUCER_SETTINGS: dict[str, tuple[str, Callable[[str], object]]] = {
    "client.id": ("client.id", str),
    "transaction.timeout.ms": ("transaction.timeout.ms", int),
    "linger.ms": ("linger.ms", float),
    "queue.buffering.max.ms": ("linger.ms", float),
    "batch.size": ("batch.size", int),
    "compression.type": ("compression.type", str),
    "compression.codec": ("compression.type", str),
    "request.timeout.ms": ("request.timeout.ms", int),
    "delivery.timeout.ms": ("delivery.timeout.ms", int),
    "message.timeout.ms": ("delivery.timeout.ms", int),
    "retry.backoff.ms": ("retry.backoff.ms", int),
}


def participant_settings(client_config: Mapping[str, str]) -> tuple[str, dict[str, object]]:
    """Bootstrap servers and settings for the participant client: the sink's own security
    settings (`kafka.security.protocol`, `kafka.ssl.*`, `kafka.sasl.*`, by librdkafka's or
    Java's names) become its TLS and SASL, and the producer settings it shares with
    librdkafka (`_PRODUCER_SETTINGS`) are passed on."""
    try:
        security = ClientSecurity.from_properties(client_config)
    except ValueError as exc:
        raise OptionError(f"the sink's security settings: {exc}") from None
    settings: dict[str, object] = {"client.id": "onceflow-sink"}
    if security.uses_tls or security.uses_sasl:
        settings["security"] = security
    for name, (setting, kind) in _PRODUCER_SETTINGS.items():
        if name in client_config:
            try:
                settings[setting] = kind(client_config[name])
            except ValueError:
                raise OptionError(
                    f"option 'kafka.{name}': {client_config[name]!r} is not a valid value"
                ) from None
    return client_config["bootstrap.servers"], settings


def broker_has_two_phase_commit(client_config: Mapping[str, str], sink_id: str) -> bool:
    """True when an InitProducerId v6 with enable2Pc is accepted for a probe id."""
    bootstrap, settings = participant_settings(client_config)
    settings |= {"delivery.timeout.ms": PROBE_TIMEOUT_MS, "request.timeout.ms": PROBE_TIMEOUT_MS}
    probe = TwoPhaseProducer(bootstrap, _probe_id(sink_id), **settings)
    try:
        probe.init()
        return True
    except UnsupportedVersion:
        return False
    except KafkaApiError as exc:
        if exc.code in (
            ErrorCode.transactional_id_authorization_failed,
            ErrorCode.unsupported_version,
        ):
            return False
        raise
    finally:
        probe.close()


def choose_atomicity(
    asked: Atomicity | None, client_config: Mapping[str, str], sink_id: str
) -> Atomicity:
    """The atomicity to use: `asked`, checked, or the strongest the broker supports."""
    if asked == "task":
        chosen: Atomicity = "task"
    elif asked == "batch":
        if not broker_has_two_phase_commit(client_config, sink_id):
            raise OptionError(
                "atomicity 'batch' needs a broker with two-phase commit (KIP-939): "
                "InitProducerId v6 with enable2Pc and 'transaction.two.phase.commit.enable="
                "true', and TWO_PHASE_COMMIT on the sink's transactional ids; this broker "
                "refused it. Use atomicity 'task' (per-task transactions)"
            )
        chosen = "batch"
    else:
        try:
            supported = broker_has_two_phase_commit(client_config, sink_id)
        except OptionError:
            supported = False
        except Unreachable as exc:
            log.warning("onceflow sink '%s': cannot ask the broker (%s)", sink_id, exc)
            supported = False
        chosen = "batch" if supported else "task"
    log.info("onceflow sink '%s': atomicity per %s", sink_id, chosen)
    return chosen


def colocation(client_config: Mapping[str, str], sink_id: str) -> int | None:
    """The `__transaction_state` partition count to colocate the tasks' ids with, when the
    broker completes several transactions in one request; None when it does not, or the
    count cannot be read (it needs DESCRIBE on that topic)."""
    bootstrap, settings = participant_settings(client_config)
    try:
        if not supports_complete_together(bootstrap, _probe_id(sink_id), **settings):
            log.warning(
                "onceflow sink '%s': the broker completes prepared transactions one at a "
                "time (no CompleteTransactions): a reader may see part of a micro-batch "
                "while the driver completes it",
                sink_id,
            )
            return None
        return transaction_log_partition_count(bootstrap, **settings)
    except KafkaApiError as exc:
        log.warning(
            "onceflow sink '%s': cannot learn how many partitions __transaction_state has "
            "(%s; DESCRIBE on that topic lets it): the driver completes a micro-batch's "
            "transactions one by one, and a reader may see part of it meanwhile",
            sink_id,
            exc,
        )
        return None


def _probe_id(sink_id: str) -> str:
    return f"onceflow-sink-probe-{sink_id}"


def task_transactional_id(sink_id: str, partition: int, colocated: int | None) -> str:
    """A task's transactional id: `<sinkId>-<partition>`, moved onto the sink id's
    coordinator partition when colocated (see the module doc)."""
    name = f"{sink_id}-{partition}"
    return name if colocated is None else colocated_ids([name], colocated, anchor=sink_id)[0]


@dataclass(frozen=True)
class Decision:
    """A recorded commit decision: the batch, the query that made it, and every task's
    prepared transaction by task partition; `colocated`: the partition count the ids were
    colocated with (completed in one request), None: completed one by one. An `aborted`
    decision undoes one whose commit found a transaction gone (nothing was committed)."""

    batch_id: int
    owner: str
    prepared: Mapping[int, PreparedTransaction]
    colocated: int | None = None
    aborted: bool = False

    def encode(self, sink_id: str) -> str:
        tasks = {str(p): [t.producer_id, t.producer_epoch] for p, t in self.prepared.items()}
        value: dict[str, object] = {"o": self.owner, "t": tasks}
        if self.colocated is not None:
            value["c"] = self.colocated
        if self.aborted:
            value["a"] = 1
        return json.dumps(value, separators=(",", ":"))

    @classmethod
    def decode(cls, sink_id: str, next_batch: int, text: str) -> Decision:
        value = json.loads(text)
        colocated = value.get("c")
        prepared = {
            int(p): PreparedTransaction(
                task_transactional_id(sink_id, int(p), colocated), int(pid), int(epoch)
            )
            for p, (pid, epoch) in value["t"].items()
        }
        return cls(next_batch - 1, str(value["o"]), prepared, colocated, bool(value.get("a")))


class DecisionTooLarge(RuntimeError):
    """A decision longer than an offset's metadata may be: nothing was decided."""


class DecisionLog:
    """The last commit decision of a sink, kept as a committed offset on the ledger topic
    (see the module doc), read and written through Onceflow's client: a task reads it
    before it writes, and a librdkafka consumer's start-up was most of that read."""

    def __init__(
        self, client_config: Mapping[str, str], topic: str, sink_id: str, timeout_s: float
    ):
        self.sink_id = sink_id
        self.topic = topic
        self._client_config = client_config
        self._timeout_s = timeout_s
        bootstrap, settings = participant_settings(client_config)
        self._link = Link(bootstrap, ProducerSettings.of(settings))
        self.group = ledger_group(DECISIONS_PREFIX + sink_id)
        self._offsets = GroupOffsets(self._link, self.group, timeout_s)

    def last(self) -> Decision | None:
        entry = self._ask(lambda: self._offsets.committed(self.topic, LEDGER_PARTITION))
        if entry is None:
            return None
        return Decision.decode(self.sink_id, entry.offset, entry.metadata)

    def record(self, decision: Decision) -> None:
        """Record `decision`; it must fit in an offset's metadata, at most the broker's
        `offset.metadata.max.bytes` (4096 by default: about 250 tasks)."""
        ensure_ledger_topic(
            self._client_config, self.topic, DECISIONS_PREFIX + self.sink_id, self._timeout_s, log
        )
        text = decision.encode(self.sink_id)
        offset = decision.batch_id + 1
        try:
            self._ask(lambda: self._offsets.commit(self.topic, LEDGER_PARTITION, offset, text))
        except KafkaApiError as exc:
            if exc.code != ErrorCode.offset_metadata_too_large:
                raise
            raise DecisionTooLarge(
                f"sink '{self.sink_id}' batch {decision.batch_id}: the decision of "
                f"{len(decision.prepared)} tasks takes {len(text.encode())} bytes, more than "
                f"the broker's offset.metadata.max.bytes; raise it, write with fewer "
                f"partitions, or use atomicity 'task'"
            ) from None

    def _ask(self, call: Callable[[], T]) -> T:
        try:
            return call()
        except KafkaApiError as exc:
            if exc.code in _DENIED:
                raise KafkaApiError(
                    exc.code,
                    f"sink '{self.sink_id}': {exc}; its decision log needs READ on group "
                    f"'{self.group}' and on topic '{self.topic}' (docs/spark-security.md)",
                ) from None
            raise

    def close(self) -> None:
        self._link.close()


def not_open(
    client_config: Mapping[str, str], prepared: Iterable[PreparedTransaction]
) -> list[PreparedTransaction]:
    """The prepared transactions that are no longer open, asked before the decision: a
    speculative attempt's init aborts the transaction of the attempt Spark chose when it
    comes after that attempt's prepare. The question (InitProducerId with keepPreparedTxn)
    fences the tasks and keeps their transactions for `complete`."""
    bootstrap, settings = participant_settings(client_config)
    options = ProducerSettings.of(settings)
    link = Link(bootstrap, options)
    gone = []
    try:
        for txn in prepared:
            kept = init_producer_id(link, txn.transactional_id, options, keep=True)
            if (kept.ongoing_producer_id, kept.ongoing_epoch) != (
                txn.producer_id,
                txn.producer_epoch,
            ):
                gone.append(txn)
    finally:
        link.close()
    return gone


def complete_all(
    client_config: Mapping[str, str],
    prepared: Iterable[PreparedTransaction],
    commit: bool,
    after_each: Callable[[PreparedTransaction], None] | None = None,
) -> None:
    """Complete every transaction. A commit found done already (stale) is done: the
    decision was recorded before any completion, so nobody could have aborted it but an
    attempt of a later batch, which starts only after this batch's completions."""
    bootstrap, settings = participant_settings(client_config)
    for txn in prepared:
        try:
            complete(txn, commit, bootstrap, **settings)
        except StalePreparedTransaction:
            log.info("%s: completed already", txn.transactional_id)
        if after_each is not None:
            after_each(txn)


def complete_decided(
    client_config: Mapping[str, str],
    prepared: Iterable[PreparedTransaction],
    commit: bool,
    colocated: int | None,
    after_each: Callable[[PreparedTransaction], None] | None = None,
) -> None:
    """Complete a decision's transactions: in one request when colocated (a commit is all
    or nothing: StalePreparedTransaction when one is gone), else one by one."""
    if colocated is None:
        complete_all(client_config, prepared, commit, after_each)
        return
    bootstrap, settings = participant_settings(client_config)
    complete_together(list(prepared), commit, bootstrap, **settings)


def prepared_of(messages: Sequence[object]) -> dict[int, PreparedTransaction]:
    """The prepared transactions the tasks' commit messages carry, by task partition."""
    out: dict[int, PreparedTransaction] = {}
    for m in messages:
        text = getattr(m, "prepared", None)
        if text:
            out[int(getattr(m, "partition", -1))] = PreparedTransaction.from_json(text)
    return out


def read_decision(
    client_config: Mapping[str, str], topic: str, sink_id: str, timeout_s: float
) -> Decision | None:
    """The sink's last recorded commit decision, if any."""
    decisions = DecisionLog(client_config, topic, sink_id, timeout_s)
    try:
        return decisions.last()
    finally:
        decisions.close()
