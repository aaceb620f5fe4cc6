"""Client quota metrics, read at scrape time from the quota sensors (Kafka's per-entity
`Produce`/`Fetch`/`Request` sensors: byte rate or request time, throttle time).

Labelled as Kafka tags them: `user` and `client_id` of the budget, empty where the quota
that binds it does not separate (a quota for a user alone is shared by its clients).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from onceflow.broker.quotas import ClientQuotas, QuotaType

_LABELS = ["quota_type", "user", "client_id"]


class QuotaCollector(Collector):
    def __init__(self, quotas: ClientQuotas) -> None:
        self._quotas = quotas

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        now_ms = self._quotas.clock.monotonic_ms()
        byte_rate = GaugeMetricFamily(
            "onceflow_client_quota_byte_rate",
            "Bytes per second a quota budget used over the quota windows (Produce: produce "
            "requests, Fetch: consumer fetch responses)",
            labels=_LABELS,
        )
        request_time = GaugeMetricFamily(
            "onceflow_client_quota_request_time_percent",
            "Request handler time a quota budget used over the quota windows, in percent "
            "of one thread",
            labels=_LABELS,
        )
        limit = GaugeMetricFamily(
            "onceflow_client_quota_limit",
            "The quota of a budget: bytes per second, or percent of one thread for Request",
            labels=_LABELS,
        )
        throttle = CounterMetricFamily(
            "onceflow_client_quota_throttle_time_ms",
            "Milliseconds clients of a quota budget were throttled for (throttle_time_ms "
            "answered, their connections muted)",
            labels=_LABELS,
        )
        throttled = CounterMetricFamily(
            "onceflow_client_quota_throttled_responses",
            "Responses of a quota budget that carried a throttle time",
            labels=_LABELS,
        )
        for (quota_type, (user, client_id)), sensor in sorted(
            self._quotas.sensors.items(), key=lambda item: (item[0][0].value, item[0][1])
        ):
            labels = [quota_type.value, user, client_id]
            rate = sensor.rate.per_second(now_ms)
            (request_time if quota_type is QuotaType.REQUEST else byte_rate).add_metric(
                labels, rate
            )
            limit.add_metric(labels, sensor.limit)
            throttle.add_metric(labels, sensor.throttle_time_ms_total)
            throttled.add_metric(labels, sensor.throttled_responses)
        yield from (byte_rate, request_time, limit, throttle, throttled)
