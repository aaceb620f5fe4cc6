"""Share-group metrics, read at scrape time from the share coordinator's plain counters and
its share-partitions (nothing is counted on the fetch path but integers)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from onceflow.coordinator.share.coordinator import ShareCoordinator


class ShareStateCollector(Collector):
    def __init__(self, coordinator: ShareCoordinator) -> None:
        self._coordinator = coordinator

    def collect(self) -> Iterator[Metric]:
        c = self._coordinator
        counters = c.counters
        yield CounterMetricFamily(
            "onceflow_share_records_acquired",
            "Records acquired by share consumers (each delivery counts).",
            value=counters.acquired,
        )
        yield CounterMetricFamily(
            "onceflow_share_records_redelivered",
            "Acquisitions of records delivered before (released, or their lock ran out).",
            value=counters.redelivered,
        )
        acked = CounterMetricFamily(
            "onceflow_share_records_acknowledged",
            "Records acknowledged by share consumers, by acknowledgement type.",
            labels=["type"],
        )
        for kind, count in sorted(counters.acknowledged.items()):
            acked.add_metric([kind], count)
        yield acked
        yield CounterMetricFamily(
            "onceflow_share_records_lock_expired",
            "Acquired records whose acquisition lock ran out before an acknowledgement.",
            value=counters.lock_expired,
        )
        members = GaugeMetricFamily(
            "onceflow_share_group_members", "Members of each share group.", labels=["group"]
        )
        for group_id, group in sorted(c.groups.items()):
            members.add_metric([group_id], len(group.members))
        yield members
        in_flight = GaugeMetricFamily(
            "onceflow_share_partition_acquired_records",
            "Records acquired right now in each share-partition this broker leads.",
            labels=["group", "topic", "partition"],
        )
        start = GaugeMetricFamily(
            "onceflow_share_partition_start_offset",
            "The share-partition start offset.",
            labels=["group", "topic", "partition"],
        )
        for key, held in sorted(c.held.items(), key=lambda kv: kv[0].coordinator_key()):
            labels = [key.group_id, held.topic, str(key.partition)]
            in_flight.add_metric(labels, held.partition.acquired_count)
            start.add_metric(labels, held.partition.start_offset)
        yield in_flight
        yield start
