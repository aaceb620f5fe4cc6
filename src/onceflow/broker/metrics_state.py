"""The metrics read from the broker's state at scrape time: partitions, transactions,
groups, replicas and the broker itself.

Nothing here runs on produce or fetch: each scrape walks the logs, the coordinators and the
replica manager once. `collect()` runs on the event loop (`metrics_http` serves scrapes
there), so it reads the same objects the handlers change without locks and always sees a
consistent state between two requests.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import TYPE_CHECKING, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from onceflow.coordinator.transaction.state import COMPLETED_STATES, TxnState
from onceflow.storage.partition_log import PartitionLog

if TYPE_CHECKING:
    from onceflow.broker.topology.base import Topology
    from onceflow.clock import Clock
    from onceflow.coordinator.group.coordinator import GroupCoordinator
    from onceflow.coordinator.transaction.coordinator import TransactionCoordinator
    from onceflow.storage.log_manager import LogManager


class BrokerState(Protocol):
    """What a scrape reads of the broker (read-only)."""

    @property
    def clock(self) -> Clock: ...
    @property
    def topology(self) -> Topology: ...
    @property
    def logs(self) -> LogManager: ...
    @property
    def txn_coordinator(self) -> TransactionCoordinator: ...
    @property
    def group_coordinator(self) -> GroupCoordinator: ...
    @property
    def connections(self) -> Sized: ...


_PARTITION = ["topic", "partition"]
_GROUP_PARTITION = ["group", "topic", "partition"]
_NOT_OPEN = COMPLETED_STATES | {TxnState.DEAD}


def _gauge(name: str, doc: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


def first_batch_timestamp(plog: PartitionLog, producer_id: int, first_offset: int) -> int:
    """The timestamp of the batch that opened a producer's transaction on this partition:
    from the producer state's last five batches, else read from the log (a transaction
    with more batches here), else the oldest batch the state remembers; -1 if none."""
    entry = plog.producer_state.producers.get(producer_id)
    batches = list(entry.batches) if entry is not None else []
    for batch in batches:
        if batch.first_offset == first_offset:
            return batch.timestamp
    if plog.offline is None:
        try:
            location = plog.segments[plog.segment_for(first_offset)].find_batch(first_offset)
        except (OSError, ValueError, IndexError):
            location = None
        if location is not None and location.header.base_offset == first_offset:
            return location.header.max_timestamp
    return min((b.timestamp for b in batches), default=-1)


def lso_lag_seconds(plog: PartitionLog, now_ms: int) -> float:
    """How long the oldest open transaction on the partition has held its LSO back: the
    age of its first batch's timestamp (the producer's clock for CreateTime); 0 if none."""
    ongoing = plog.producer_state.ongoing
    if not ongoing:
        return 0.0
    producer_id, first = min(ongoing.items(), key=lambda item: item[1])
    timestamp = first_batch_timestamp(plog, producer_id, first)
    return max(0, now_ms - timestamp) / 1000 if timestamp >= 0 else 0.0


class BrokerStateCollector(Collector):
    def __init__(self, broker: BrokerState) -> None:
        self._broker = broker

    def describe(self) -> list[Metric]:
        return []  # names are not checked for clashes: the registry is this broker's own

    def collect(self) -> Iterator[Metric]:
        now_ms = self._broker.clock.now_ms()
        yield from self._partitions(now_ms)
        yield from self._replication()
        yield from self._transactions(now_ms)
        yield from self._groups()

    def _partitions(self, now_ms: int) -> Iterator[Metric]:
        broker = self._broker
        hw = _gauge("onceflow_partition_high_watermark", "High watermark.", _PARTITION)
        leo = _gauge("onceflow_partition_log_end_offset", "Log end offset.", _PARTITION)
        lso = _gauge(
            "onceflow_partition_last_stable_offset",
            "Last stable offset: where read_committed consumers stop.",
            _PARTITION,
        )
        lag = _gauge(
            "onceflow_partition_lso_lag_records",
            "High watermark minus last stable offset: records open transactions hide from "
            "read_committed consumers.",
            _PARTITION,
        )
        lag_s = _gauge(
            "onceflow_partition_lso_lag_seconds",
            "Age of the first batch of the oldest open transaction on the partition; 0 if none.",
            _PARTITION,
        )
        open_txns = _gauge(
            "onceflow_partition_open_transactions",
            "Transactions open on the partition.",
            _PARTITION,
        )
        producers = _gauge(
            "onceflow_partition_active_producer_ids",
            "Producer ids whose state the partition keeps (idempotent and transactional).",
            _PARTITION,
        )
        size = _gauge("onceflow_partition_size_bytes", "Bytes of the log's segments.", _PARTITION)
        leader = _gauge(
            "onceflow_partition_is_leader",
            "1 if this broker leads the partition (always, on a single broker), 0 for a follower.",
            _PARTITION,
        )
        topology = broker.topology
        for plog in broker.logs:
            if plog.deleted:
                continue
            labels = [plog.topic, str(plog.partition)]
            high, stable = plog.high_watermark, plog.last_stable_offset
            hw.add_metric(labels, high)
            leo.add_metric(labels, plog.log_end_offset)
            lso.add_metric(labels, stable)
            lag.add_metric(labels, max(0, high - stable))
            lag_s.add_metric(labels, lso_lag_seconds(plog, now_ms))
            open_txns.add_metric(labels, len(plog.producer_state.ongoing))
            producers.add_metric(labels, len(plog.producer_state.producers))
            size.add_metric(labels, plog.size_bytes)
            leader.add_metric(labels, 1 if topology.leads(plog) else 0)
        yield from (hw, leo, lso, lag, lag_s, open_txns, producers, size, leader)

    def _replication(self) -> Iterator[Metric]:
        broker = self._broker
        summary = broker.topology.replication_summary()
        under, offline = summary.under_replicated, len(summary.offline)
        shrinks, expands = summary.isr_shrinks, summary.isr_expands
        controller = 1 if summary.active_controller else 0
        yield GaugeMetricFamily(
            "onceflow_connections", "Open client and broker connections.", len(broker.connections)
        )
        yield GaugeMetricFamily(
            "onceflow_under_replicated_partitions",
            "Partitions led here whose ISR is smaller than their replica set.",
            under,
        )
        yield GaugeMetricFamily(
            "onceflow_offline_partitions",
            "Partitions with no live leader as this broker's metadata shows them, or whose "
            "log here is offline.",
            offline,
        )
        yield CounterMetricFamily(
            "onceflow_isr_shrinks", "ISR shrinks written by this broker as leader.", shrinks
        )
        yield CounterMetricFamily(
            "onceflow_isr_expands", "ISR expansions written by this broker as leader.", expands
        )
        yield GaugeMetricFamily(
            "onceflow_controller_active",
            "1 if this broker is the controller (always, on a single broker).",
            controller,
        )
        yield GaugeMetricFamily(
            "onceflow_reassigning_partitions",
            "Partitions led here that are being reassigned.",
            summary.reassigning,
        )
        throttled = CounterMetricFamily(
            "onceflow_replication_throttled_bytes",
            "Bytes this broker sent as leader (throttle=leader) or copied as follower "
            "(throttle=follower) for replicas under a replication throttle.",
            labels=["throttle"],
        )
        throttled.add_metric(["leader"], summary.throttled_leader_bytes)
        throttled.add_metric(["follower"], summary.throttled_follower_bytes)
        yield throttled

    def _transactions(self, now_ms: int) -> Iterator[Metric]:
        coordinator = self._broker.txn_coordinator
        counts = {state.display: 0 for state in TxnState}
        oldest_ms = 0
        two_phase_open = 0
        oldest_two_phase_ms = 0
        for meta in coordinator.txns.values():
            counts[meta.state.display] += 1
            if meta.state not in _NOT_OPEN and meta.start_ms >= 0:
                age_ms = now_ms - meta.start_ms
                oldest_ms = max(oldest_ms, age_ms)
                if meta.two_phase:
                    two_phase_open += 1
                    oldest_two_phase_ms = max(oldest_two_phase_ms, age_ms)
        states = _gauge(
            "onceflow_transactions",
            "Transactional ids this coordinator serves, by state (Kafka's names).",
            ["state"],
        )
        for state, count in counts.items():
            states.add_metric([state], count)
        yield states
        yield GaugeMetricFamily(
            "onceflow_transaction_oldest_open_seconds",
            "Age of the oldest transaction open at this coordinator (Ongoing or Prepare*); 0 "
            "if none.",
            oldest_ms / 1000,
        )
        # Two-phase commit (KIP-939): no timeout ends these; a forgotten one holds the LSO
        # of its partitions until an operator completes it.
        yield GaugeMetricFamily(
            "onceflow_transactions_two_phase_open",
            "Two-phase commit (KIP-939) transactions open at this coordinator: no timeout "
            "aborts them, their external coordinator (or an operator) must complete them.",
            two_phase_open,
        )
        yield GaugeMetricFamily(
            "onceflow_transaction_two_phase_oldest_open_seconds",
            "Age of the oldest two-phase commit transaction open at this coordinator; 0 if none.",
            oldest_two_phase_ms / 1000,
        )
        yield CounterMetricFamily(
            "onceflow_transaction_commits",
            "Transactions this coordinator decided to commit.",
            coordinator.commits,
        )
        aborts = CounterMetricFamily(
            "onceflow_transaction_aborts",
            "Transactions this coordinator decided to abort, by reason: client (EndTxn), "
            "timeout (transaction.timeout.ms), fencing (a new producer instance).",
            labels=["reason"],
        )
        for reason, count in coordinator.aborts.items():
            aborts.add_metric([reason], count)
        yield aborts
        markers = CounterMetricFamily(
            "onceflow_transaction_markers_written",
            "COMMIT and ABORT markers this coordinator had written (one per partition).",
            labels=["type"],
        )
        for kind, count in coordinator.markers_written.items():
            markers.add_metric([kind], count)
        yield markers

    def _groups(self) -> Iterator[Metric]:
        broker = self._broker
        coordinator = broker.group_coordinator
        members = _gauge("onceflow_group_members", "Members of the group.", ["group"])
        committed = _gauge(
            "onceflow_group_committed_offset", "Offset the group committed.", _GROUP_PARTITION
        )
        lag = _gauge(
            "onceflow_group_lag",
            "High watermark minus the committed offset (at least 0), for partitions with a "
            "replica on this broker.",
            _GROUP_PARTITION,
        )
        _, overviews = coordinator.list_groups()
        for overview in overviews:
            group = coordinator.group(overview.group_id)
            if group is None:
                continue
            count = len(group.members if group.consumer is None else group.consumer.members)
            members.add_metric([group.group_id], count)
            for tp, value in group.offsets.all().items():
                labels = [group.group_id, tp.topic, str(tp.partition)]
                committed.add_metric(labels, value.offset)
                plog = broker.logs.get(tp.topic, tp.partition)
                if plog is not None:
                    lag.add_metric(labels, max(0, plog.high_watermark - value.offset))
        yield from (members, committed, lag)
