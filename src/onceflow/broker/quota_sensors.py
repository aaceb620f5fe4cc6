"""Rates over sample windows, and the throttle time of a rate above its quota: Kafka's
SampledStat/Rate and QuotaUtils, so a client is throttled exactly as much as on Kafka.

A rate keeps `samples` windows of `window_ms` each. A value is added to the current window;
a window older than all of them together is emptied before it is read. The rate is the sum
over the windows divided by the time they span, counting at least `samples - 1` whole
windows, so a burst right after a quiet spell is not divided by a few milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Rate:
    samples: int
    window_ms: int
    _starts: list[int] = field(default_factory=list)
    _values: list[float] = field(default_factory=list)
    _current: int = 0

    def record(self, value: float, now_ms: int) -> None:
        if not self._starts:
            self._starts.append(now_ms)
            self._values.append(0.0)
            self._current = 0
        elif now_ms - self._starts[self._current] >= self.window_ms:
            self._current = (self._current + 1) % self.samples
            if self._current >= len(self._starts):
                self._starts.append(now_ms)
                self._values.append(0.0)
            else:
                self._starts[self._current] = now_ms
                self._values[self._current] = 0.0
        self._values[self._current] += value

    def _purge(self, now_ms: int) -> None:
        expire = self.samples * self.window_ms
        for i, start in enumerate(self._starts):
            if now_ms - start >= expire:
                self._starts[i] = now_ms
                self._values[i] = 0.0

    def window_size_ms(self, now_ms: int) -> int:
        """The time the kept windows span, at least `samples - 1` whole windows."""
        self._purge(now_ms)
        oldest = min(self._starts, default=now_ms)
        elapsed = now_ms - oldest
        full = elapsed // self.window_ms
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1)

    def per_second(self, now_ms: int) -> float:
        return self.measure(now_ms)[0]

    def measure(self, now_ms: int) -> tuple[float, int]:
        """The rate per second and the window size it is measured over."""
        size = self.window_size_ms(now_ms)
        return sum(self._values) * 1000.0 / size, size


def throttle_ms(rate: float, limit: float, window_size_ms: int) -> int:
    """How long a client at `rate` must pause for its rate over the window to fall back to
    `limit` (Kafka's QuotaUtils.throttleTime); 0 when it is within."""
    if rate <= limit:
        return 0
    return round((rate - limit) / limit * window_size_ms)


@dataclass(slots=True)
class QuotaSensor:
    """One budget's rate (bytes or request-time percent per second) and what it cost the
    clients sharing it in throttling, for the metrics."""

    rate: Rate
    limit: float
    throttle_time_ms_total: int = 0
    throttled_responses: int = 0

    def record(self, value: float, now_ms: int, bound_ms: int | None = None) -> int:
        """Add `value` and return the throttle time it earns (at most `bound_ms`)."""
        self.rate.record(value, now_ms)
        rate, size = self.rate.measure(now_ms)
        delay = throttle_ms(rate, self.limit, size)
        if bound_ms is not None:
            delay = min(delay, bound_ms)
        return delay

    def delay_ms(self, now_ms: int) -> int:
        """The throttle time the rate earns as it stands."""
        rate, size = self.rate.measure(now_ms)
        return throttle_ms(rate, self.limit, size)

    def unrecord(self, value: float, now_ms: int) -> None:
        self.rate.record(-value, now_ms)

    def throttled(self, delay_ms: int) -> None:
        self.throttle_time_ms_total += delay_ms
        self.throttled_responses += 1


@dataclass(slots=True)
class TokenBucket:
    """Kafka's TokenBucket (KIP-599), for controller mutations: `burst` tokens at most,
    refilled at `rate` a second; a mutation takes as many as it creates or deletes
    partitions, and the bucket may go below zero. Below zero it is exhausted for as long
    as the refill takes to bring it back."""

    rate: float
    burst: float
    tokens: float
    last_ms: int

    def _refill(self, now_ms: int) -> None:
        elapsed_s = max(0, now_ms - self.last_ms) / 1000.0
        self.tokens = min(self.burst, self.tokens + self.rate * elapsed_s)
        self.last_ms = now_ms

    def take(self, value: float, now_ms: int) -> None:
        self._refill(now_ms)
        self.tokens -= value

    def delay_ms(self, now_ms: int) -> int:
        """0 while tokens are left, else how long until the bucket is back at zero."""
        self._refill(now_ms)
        return 0 if self.tokens >= 0 else round(-self.tokens / self.rate * 1000)
