"""Replication throttles (KIP-73), as Kafka's ReplicationQuotaManager enforces them: one
byte rate per broker for its leaders' sends and one for its followers' copying, each
applied only to the replicas a topic lists (`leader.replication.throttled.replicas`,
`follower.replication.throttled.replicas`: partition:broker pairs, or *) and only while the
follower is outside the ISR, so a reassignment's new replicas catch up at the rate and
in-sync replication never waits.

The rate is measured over `window_num` samples of `window_s` seconds (Kafka's Rate: an
elapsed time under window_num - 1 whole samples counts as that many). When it is over the
limit, a throttled partition is left out of a follower's fetch, or gets no records in the
leader's answer, until it falls back under: per batch of fetched bytes, never per record.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

UNLIMITED = 2**63 - 1  # Kafka's Long.MAX_VALUE: no throttle


def lists_replica(replicas: tuple[str, ...], partition: int, broker: int) -> bool:
    """Whether a throttled replica list names this replica (or is *)."""
    return replicas == ("*",) or f"{partition}:{broker}" in replicas


class ReplicationQuota:
    def __init__(
        self,
        rate: int = UNLIMITED,
        window_num: int = 11,
        window_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate = rate
        self.window_num = window_num
        self.window_s = window_s
        self._clock = clock
        self._samples: deque[list[float]] = deque()  # [start, bytes]
        self.throttled_bytes = 0  # every byte recorded (the metrics)

    def _prune(self, now: float) -> None:
        horizon = now - self.window_num * self.window_s
        while self._samples and self._samples[0][0] + self.window_s <= horizon:
            self._samples.popleft()

    def record(self, size: int) -> None:
        now = self._clock()
        self._prune(now)
        if not self._samples or now >= self._samples[-1][0] + self.window_s:
            self._samples.append([now, 0.0])
        self._samples[-1][1] += size
        self.throttled_bytes += size

    def measured(self) -> float:
        """Bytes per second over the samples kept."""
        now = self._clock()
        self._prune(now)
        if not self._samples:
            return 0.0
        elapsed = now - self._samples[0][0]
        elapsed = max(elapsed, (self.window_num - 1) * self.window_s, self.window_s)
        return sum(s[1] for s in self._samples) / elapsed

    def exceeded(self) -> bool:
        return self.rate < UNLIMITED and self.measured() > self.rate
