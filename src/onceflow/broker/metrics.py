"""Prometheus metrics of one broker (`onceflow.metrics.listener`), with prometheus_client.

Two kinds, kept apart for the hot paths' sake:

- Events (requests, bytes, group-commit rounds) are counted as they happen, on the event
  loop, in plain integers and bucket lists: a request costs a dict lookup, a few additions
  and a bisect, with no lock (everything that counts and the scrape that reads the counts
  run on the loop). With metrics off, `Broker.metrics` is None and the server skips it all.
- Everything that is state (offsets, LSO lag, open transactions, producers, sizes, groups,
  replicas) is read at scrape time by `metrics_state.BrokerStateCollector`; produce and
  fetch never touch it.

Each broker has its own CollectorRegistry (not the global one), so several brokers in one
process (tests) never clash. The endpoint is `metrics_http`.
"""

from __future__ import annotations

import dataclasses
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from onceflow.broker.metrics_state import BrokerStateCollector
from onceflow.broker.responses import RawBody
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey

if TYPE_CHECKING:
    from onceflow.broker.metrics_state import BrokerState

# Seconds: a produce waits for its fsync (about a millisecond), a fetch long-polls up to
# its max wait (500 ms by default in librdkafka).
REQUEST_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0, 30.0,
)  # fmt: skip
FSYNC_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
)  # fmt: skip
GROUP_COMMIT_BUCKETS = (1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6)

_le = cast(Callable[[float], str], floatToGoString)  # a bound as Prometheus writes it


def api_name(api_key: int) -> str:
    """Kafka's name of an API, as its request metrics label it (ApiVersions, Produce)."""
    try:
        name = ApiKey(api_key).name
    except ValueError:
        return str(api_key)
    return "".join(part.capitalize() for part in name.split("_"))


def error_name(code: ErrorCode) -> str:
    """Kafka's name of an error code (NOT_LEADER_OR_FOLLOWER)."""
    return code.name.upper()


class Buckets:
    """A histogram's counts: observe() adds to one bucket, the cumulative sums are made
    at scrape time."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: above every bound (+Inf)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # le: a bound counts as below
        self.total += value

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            out.append((_le(bound), running))
        return out


class _ApiStats:
    __slots__ = ("errors", "latency", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.latency = Buckets(REQUEST_BUCKETS)
        self.errors: dict[ErrorCode, int] = {}


class BrokerMetrics(Collector):
    def __init__(self, broker: BrokerState) -> None:
        self.registry = CollectorRegistry()
        self.bytes_in = 0
        self.bytes_out = 0
        self.fsync_seconds = Buckets(FSYNC_BUCKETS)
        self.group_commit_records = Buckets(GROUP_COMMIT_BUCKETS)
        self._apis: dict[int, _ApiStats] = {}
        self.registry.register(self)
        self.registry.register(BrokerStateCollector(broker))
        ProcessCollector(registry=self.registry)  # process_*: CPU, memory, open files

    # ---- counting (on the event loop) ------------------------------------------------

    def request_done(self, api_key: int, started: float, response: Any, sent: int) -> None:
        """One request answered (or, with acks=0, handled): its API's count and latency,
        the errors its response carries and the bytes sent."""
        stats = self._apis.get(api_key)
        if stats is None:
            stats = self._apis[api_key] = _ApiStats(api_name(api_key))
        stats.latency.observe(time.perf_counter() - started)
        self.bytes_out += sent
        if response is None:
            return
        found: Sequence[ErrorCode]
        if isinstance(response, RawBody):
            found = response.errors
        else:
            walked: list[ErrorCode] = []
            response_errors(response, walked)
            found = walked
        for code in found:
            stats.errors[code] = stats.errors.get(code, 0) + 1

    def received(self, nbytes: int) -> None:
        self.bytes_in += nbytes

    def flush_round(self, seconds: float, records: int) -> None:
        """The group-commit flusher's hook, after each round."""
        self.fsync_seconds.observe(seconds)
        self.group_commit_records.observe(records)

    # ---- exposition (at scrape time, on the event loop) ------------------------------

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        apis = sorted(self._apis.values(), key=lambda s: s.name)
        requests = CounterMetricFamily(
            "onceflow_requests", "Requests answered, by API.", labels=["api"]
        )
        errors = CounterMetricFamily(
            "onceflow_request_errors",
            "Error codes in responses (one per partition or entity that failed), by API and "
            "Kafka error name.",
            labels=["api", "error"],
        )
        latency = HistogramMetricFamily(
            "onceflow_request_seconds",
            "Time from the start of handling a request to its response written to the socket "
            "(a produce includes its fsync or replication wait, a fetch its long poll), by API.",
            labels=["api"],
        )
        for stats in apis:
            count = sum(stats.latency.counts)
            requests.add_metric([stats.name], count)
            latency.add_metric([stats.name], stats.latency.cumulative(), stats.latency.total)
            for code, times in sorted(stats.errors.items()):
                errors.add_metric([stats.name, error_name(code)], times)
        yield from (requests, errors, latency)
        yield CounterMetricFamily(
            "onceflow_bytes_in", "Request bytes received, size prefixes included.", self.bytes_in
        )
        yield CounterMetricFamily(
            "onceflow_bytes_out",
            "Response bytes sent, size prefixes and sendfile regions included.",
            self.bytes_out,
        )
        for name, doc, buckets in (
            (
                "onceflow_fsync_seconds",
                "Duration of one group-commit round: the fdatasync of every log with appends "
                "waiting.",
                self.fsync_seconds,
            ),
            (
                "onceflow_group_commit_records",
                "Records made durable by one group-commit round (one fsync each log).",
                self.group_commit_records,
            ),
        ):
            family = HistogramMetricFamily(name, doc)
            family.add_metric([], buckets.cumulative(), buckets.total)
            yield family


# Per kio entity class: its error-code fields and its nested-entity fields (kio marks every
# primitive field with its kafka_type; the fields without one hold entities).
_PLANS: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {}


def _plan(cls: type) -> tuple[tuple[str, ...], tuple[str, ...]]:
    plan = _PLANS.get(cls)
    if plan is None:
        errors: list[str] = []
        nested: list[str] = []
        for f in dataclasses.fields(cls):
            kind = f.metadata.get("kafka_type")
            if kind == "error_code":
                errors.append(f.name)
            elif kind is None:
                nested.append(f.name)
        plan = _PLANS[cls] = (tuple(errors), tuple(nested))
    return plan


def response_errors(entity: Any, out: list[ErrorCode]) -> None:
    """Append every error code other than NONE found in a kio response entity, at any depth
    (a produce response has one per partition)."""
    errors, nested = _plan(type(entity))
    for name in errors:
        code = getattr(entity, name)
        if code != ErrorCode.none:
            out.append(ErrorCode(code))
    for name in nested:
        value = getattr(entity, name)
        if isinstance(value, tuple):
            for item in value:
                response_errors(item, out)
        elif value is not None:
            response_errors(value, out)
