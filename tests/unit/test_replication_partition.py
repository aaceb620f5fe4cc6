"""The leader's side of replication, without a network: the high watermark over the ISR's
durable offsets, ISR shrink and expand proposals, acks=all waiters, and role changes."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable

import pytest

from onceflow.clock import ManualClock
from onceflow.errors import ErrorCode, KafkaError
from onceflow.records.batch import validate_produced_batches
from onceflow.records.builder import build_batch
from onceflow.replication.partition import LeaderAndIsr, Partition, Role
from onceflow.storage.fs import SimFileSystem
from onceflow.storage.partition_log import LogConfig, PartitionLog
from onceflow.storage.recovery import open_partition

LAG_MS = 10_000


def make(durable: bool = True) -> tuple[Partition, ManualClock]:
    clock = ManualClock(1_000_000)
    plog, _ = open_partition(
        SimFileSystem(seed=3), "/d/t-0", "t", 0, LogConfig(durable=durable), clock, 0, False
    )
    return Partition(plog, local_id=1, clock=clock), clock


def append(plog: PartitionLog, n: int = 1) -> int:
    data = build_batch([(None, b"v", ()) for _ in range(n)], timestamp_ms=1_000_000)
    return plog.append_batches(data, validate_produced_batches(data, 1 << 20)).last_offset


def lead(partition: Partition, isr: tuple[int, ...] = (1, 2, 3), epoch: int = 0) -> None:
    partition.make_leader(LeaderAndIsr(1, epoch, isr, (1, 2, 3), 0))


def lost_exceptions(scenario: Callable[[], Awaitable[None]]) -> list[dict[str, object]]:
    """What asyncio reports as lost while `scenario` runs and its callbacks settle."""

    async def run() -> list[dict[str, object]]:
        reported: list[dict[str, object]] = []
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: reported.append(ctx))
        await scenario()
        for _ in range(3):
            await asyncio.sleep(0)
        gc.collect()
        return reported

    return asyncio.run(run())


def test_high_watermark_is_the_lowest_durable_offset_of_the_isr() -> None:
    partition, _ = make()
    lead(partition)
    plog = partition.log
    append(plog, 5)
    assert plog.high_watermark == 0
    plog.flush()
    partition.maybe_advance_high_watermark()
    assert plog.high_watermark == 0, "the followers have nothing yet"
    assert not partition.follower_fetched(2, 5)
    assert partition.follower_fetched(3, 3)
    assert plog.high_watermark == 3
    partition.follower_fetched(3, 5)
    assert plog.high_watermark == 5
    append(plog, 2)
    partition.follower_fetched(2, 7)
    partition.follower_fetched(3, 7)
    assert plog.high_watermark == 5, "not past the leader's own flushed offset"
    plog.flush()
    partition.maybe_advance_high_watermark()
    assert plog.high_watermark == 7


def test_a_replica_outside_the_isr_does_not_hold_the_high_watermark() -> None:
    partition, _ = make()
    lead(partition, isr=(1, 2))
    append(partition.log, 4)
    partition.log.flush()
    partition.follower_fetched(2, 4)
    assert partition.log.high_watermark == 4
    partition.follower_fetched(99, 0)  # not a replica: ignored


def test_isr_proposals_shrink_a_lagging_follower_and_expand_a_caught_up_one() -> None:
    partition, clock = make()
    lead(partition)
    plog = partition.log
    append(plog, 3)
    plog.flush()
    partition.follower_fetched(2, 3)
    partition.follower_fetched(3, 3)
    assert partition.isr_proposal(LAG_MS) is None
    append(plog, 1)
    clock.advance(LAG_MS + 1)
    partition.follower_fetched(2, 4)  # caught up again; 3 stays behind
    assert partition.isr_proposal(LAG_MS) == (1, 2)
    partition.make_leader(LeaderAndIsr(1, 0, (1, 2), (1, 2, 3), 1))
    plog.flush()
    partition.maybe_advance_high_watermark()
    assert partition.isr_proposal(LAG_MS) is None
    partition.follower_fetched(3, 4)  # reaches the high watermark: rejoins
    assert partition.isr_proposal(LAG_MS) == (1, 2, 3)
    partition.isr_proposed((1, 2, 3))
    assert partition.isr_proposal(LAG_MS) is None, "one change in flight at a time"


def test_a_follower_proposed_back_into_the_isr_holds_the_high_watermark_at_once() -> None:
    """Kafka's maximal ISR: once the return of follower 2 is sent to the controller's
    store, the controller may elect it (a controlled shutdown of this leader, say) before
    this leader sees the new ISR. Acknowledging what 2 lacks meanwhile lost acknowledged
    records when 2 became leader (found by the cluster benchmark's failovers); so while
    the change is pending the high watermark waits for 2 as well, and only a newer state
    or a failed write ends that."""
    partition, _ = make()
    lead(partition, isr=(1, 3))
    plog = partition.log
    append(plog, 5)
    plog.flush()
    partition.follower_fetched(3, 5)
    partition.follower_fetched(2, 5)  # at the high watermark: may rejoin
    assert plog.high_watermark == 5
    proposal = partition.isr_proposal(LAG_MS)
    assert proposal == (1, 2, 3)
    partition.isr_proposed(proposal)
    append(plog, 5)
    plog.flush()
    partition.follower_fetched(3, 10)
    assert plog.high_watermark == 5, "follower 2 may be elected: it must hold it first"
    partition.make_leader(LeaderAndIsr(1, 0, (1, 3), (1, 2, 3), 0))  # the same state again
    partition.follower_fetched(3, 10)
    assert plog.high_watermark == 5, "a state as old as the proposal does not end it"
    partition.follower_fetched(2, 8)
    assert plog.high_watermark == 8
    partition.isr_proposed(None)  # the write failed: the ISR is what this leader says
    assert plog.high_watermark == 10
    partition.isr_proposed((1, 2, 3))
    append(plog, 2)
    plog.flush()
    partition.follower_fetched(3, 12)
    assert plog.high_watermark == 10
    partition.make_leader(LeaderAndIsr(1, 0, (1, 2, 3), (1, 2, 3), 1))  # applied
    assert not partition.isr_change_pending
    partition.follower_fetched(2, 12)
    assert plog.high_watermark == 12


def test_a_follower_in_controlled_shutdown_does_not_rejoin_the_isr() -> None:
    # KIP-841: the controller takes a shutting-down replica out of the ISR; the leader
    # adding it back at its next fetch would bump the epoch again and again.
    partition, _ = make()
    lead(partition, isr=(1, 2))
    append(partition.log, 2)
    partition.log.flush()
    partition.follower_fetched(2, 2)
    partition.follower_fetched(3, 2)  # caught up
    assert partition.isr_proposal(LAG_MS, ineligible={3}) is None
    assert partition.isr_proposal(LAG_MS) == (1, 2, 3)


def test_a_follower_idle_but_caught_up_stays_in_the_isr() -> None:
    partition, clock = make()
    lead(partition)
    partition.follower_fetched(2, 0)
    partition.follower_fetched(3, 0)
    clock.advance(10 * LAG_MS)
    assert partition.isr_proposal(LAG_MS) is None


def test_a_quiet_fetch_keeps_a_caught_up_follower_in_the_isr_and_nothing_else() -> None:
    """A session fetch that skips a quiet partition notes its follower caught up, as a
    read would: after a long quiet spell, an append the follower has not fetched yet
    must not make it look lagging for the whole spell (and a follower the skip did not
    note, 3 here, does). A follower behind or outside the ISR is never skipped."""
    partition, clock = make()
    lead(partition)
    plog = partition.log
    append(plog, 2)
    plog.flush()
    partition.follower_fetched(2, 2)
    partition.follower_fetched(3, 2)
    for _ in range(4):
        clock.advance(LAG_MS // 2)
        assert partition.still_caught_up(2, clock.now_ms())
    append(plog, 1)  # neither has fetched it yet
    assert partition.isr_proposal(LAG_MS) == (1, 2)
    assert not partition.still_caught_up(2, clock.now_ms()), "behind the log end: read it"
    partition.make_leader(LeaderAndIsr(1, 0, (1, 2), (1, 2, 3), 1))
    partition.follower_fetched(3, 3)
    outside = partition.still_caught_up(3, clock.now_ms())
    assert not outside, "outside the ISR: a read proposes its return"


def test_acks_all_waiters_complete_with_the_high_watermark_or_fail_on_demotion() -> None:
    async def scenario() -> None:
        partition, _ = make()
        lead(partition, isr=(1, 2))
        last = append(partition.log, 3)
        waiter = partition.wait_replicated(last)
        partition.log.flush()
        partition.maybe_advance_high_watermark()
        await asyncio.sleep(0)
        assert not waiter.done()
        partition.follower_fetched(2, last + 1)
        assert waiter.done() and waiter.exception() is None
        orphan = partition.wait_replicated(append(partition.log))
        partition.make_follower(LeaderAndIsr(2, 1, (1, 2), (1, 2, 3), 2))
        with pytest.raises(KafkaError) as caught:
            await orphan
        assert caught.value.code is ErrorCode.not_leader_or_follower

    asyncio.run(scenario())


def test_a_waiter_whose_request_is_gone_fails_without_a_lost_exception_log() -> None:
    # The produce request timed out and dropped its waiter; a demotion then fails it.
    # Nobody awaits it, and asyncio must not log "Future exception was never retrieved".
    async def scenario() -> None:
        partition, _ = make()
        lead(partition, isr=(1, 2))
        partition.wait_replicated(append(partition.log))  # dropped at once
        partition.make_follower(LeaderAndIsr(2, 1, (1, 2), (1, 2, 3), 2))

    assert lost_exceptions(scenario) == []


def test_a_waiter_failed_after_the_loop_stopped_is_not_a_lost_exception() -> None:
    # A broker's shutdown closes its partitions once the loop has stopped: the done
    # callbacks never run, and the failed waiter must still not be logged as lost.
    loop = asyncio.new_event_loop()
    reported: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, ctx: reported.append(ctx))
    partition, _ = make()

    async def lead_and_wait() -> asyncio.Future[None]:
        lead(partition, isr=(1, 2))
        return partition.wait_replicated(append(partition.log))

    waiter = loop.run_until_complete(lead_and_wait())
    partition.close()
    assert waiter.done()
    del waiter
    loop.close()
    gc.collect()
    assert reported == []


def test_an_acks_all_answer_whose_request_is_gone_is_not_a_lost_exception() -> None:
    from onceflow.broker.topology.zookeeper import replication_answer

    # The producer's connection closed (or the broker is shutting down): nobody awaits the
    # answer when a demotion fails it, and asyncio must not log its error as lost.
    async def scenario() -> None:
        partition, _ = make()
        lead(partition, isr=(1, 2))
        replication_answer(partition, append(partition.log), timeout_ms=0)
        partition.close()

    assert lost_exceptions(scenario) == []


def test_min_insync_replicas_is_checked_against_the_isr() -> None:
    partition, _ = make()
    lead(partition, isr=(1,))
    with pytest.raises(KafkaError) as caught:
        partition.check_enough_replicas(2)
    assert caught.value.code is ErrorCode.not_enough_replicas
    partition.check_enough_replicas(1)


def test_a_new_leadership_starts_its_epoch_at_the_log_end() -> None:
    partition, _ = make()
    lead(partition, epoch=0)
    append(partition.log, 2)
    assert partition.make_leader(LeaderAndIsr(1, 4, (1, 2, 3), (1, 2, 3), 3))
    assert partition.log.epochs.latest_epoch == 4
    assert partition.log.epochs.end_offset_for(0, partition.log.log_end_offset) == (0, 2)
    assert not partition.make_leader(LeaderAndIsr(1, 4, (1, 2), (1, 2, 3), 4)), "same term"
    assert partition.role is Role.LEADER and partition.isr == (1, 2)


def test_a_restarted_replica_shows_nothing_until_the_isr_confirms_it() -> None:
    clock = ManualClock(1_000_000)
    fs = SimFileSystem(seed=4)
    plog, _ = open_partition(fs, "/d/t-0", "t", 0, LogConfig(), clock, 0, False)
    append(plog, 5)
    plog.flush()
    assert plog.high_watermark == 5  # alone, the flushed offset
    plog.close()
    reopened, _ = open_partition(fs, "/d/t-0", "t", 0, LogConfig(), clock, 5, True)
    partition = Partition(reopened, 1, clock)
    assert reopened.high_watermark == 0
    partition.make_follower(LeaderAndIsr(2, 1, (1, 2), (1, 2), 0))
    assert reopened.high_watermark == 0, "a follower learns it from its leader"


def test_acks_all_answers_not_enough_replicas_after_append_or_timed_out() -> None:
    from onceflow.broker.topology.zookeeper import replication_answer

    async def scenario() -> None:
        partition, _ = make()
        partition.min_insync_replicas = 2
        lead(partition, isr=(1, 2))
        last = append(partition.log, 2)
        answer = replication_answer(partition, last, timeout_ms=0)
        # The follower drops out before it copied the records; the leader alone is the ISR.
        partition.make_leader(LeaderAndIsr(1, 0, (1,), (1, 2, 3), 1))
        partition.log.flush()
        partition.maybe_advance_high_watermark()
        with pytest.raises(KafkaError) as caught:
            await answer
        assert caught.value.code is ErrorCode.not_enough_replicas_after_append

        lead(partition, isr=(1, 2))
        slow = replication_answer(partition, append(partition.log), timeout_ms=20)
        with pytest.raises(KafkaError) as timed_out:
            await slow
        assert timed_out.value.code is ErrorCode.request_timed_out
        partition.make_follower(LeaderAndIsr(2, 1, (1, 2), (1, 2, 3), 2))  # no stray errors

    asyncio.run(scenario())
