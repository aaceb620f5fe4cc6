"""The replication throttle's rate meter (Kafka's Rate over sampled windows) and its
replica lists, with a manual clock."""

from __future__ import annotations

from onceflow.replication.throttle import UNLIMITED, ReplicationQuota, lists_replica


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_unlimited_is_never_exceeded() -> None:
    quota = ReplicationQuota(UNLIMITED, clock=Clock())
    quota.record(10**12)
    assert not quota.exceeded()


def test_the_rate_counts_at_least_the_windows_kafka_pads_to() -> None:
    clock = Clock()
    quota = ReplicationQuota(1000, window_num=11, window_s=1.0, clock=clock)
    quota.record(9_000)  # over 10 padded seconds: 900 B/s
    assert quota.measured() == 900 and not quota.exceeded()
    quota.record(2_000)
    assert quota.exceeded()
    clock.now += 12.0  # every sample has aged out
    assert quota.measured() == 0 and not quota.exceeded()


def test_a_steady_sender_is_held_to_the_rate() -> None:
    clock = Clock()
    quota = ReplicationQuota(10_000, window_num=2, window_s=1.0, clock=clock)
    sent = 0
    for _ in range(2000):  # 20 s in steps of 10 ms, 1 kB per allowed step
        if not quota.exceeded():
            quota.record(1000)
            sent += 1000
        clock.now += 0.01
    assert 10_000 * 20 * 0.8 < sent < 10_000 * 20 * 1.3


def test_replica_lists() -> None:
    assert lists_replica(("*",), 3, 7)
    assert lists_replica(("0:1", "3:7"), 3, 7)
    assert not lists_replica(("0:1", "3:8"), 3, 7)
    assert not lists_replica((), 0, 1)
