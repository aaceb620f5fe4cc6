"""The share-partition state machine: acquisition, acknowledgement, locks, delivery counts,
gaps, aborted transactions, durable state and transactional acknowledgements."""

from __future__ import annotations

import pytest

from onceflow.coordinator.share.partition import (
    ACQUIRE_RECORD_LIMIT,
    AcquiredRange,
    FetchedBatch,
    ShareLimits,
    SharePartition,
    StateBatch,
)
from onceflow.coordinator.share.state import (
    VALID_PREVIOUS_STATES,
    AcknowledgeType,
    IllegalRecordTransition,
    RecordState,
    check,
)
from onceflow.errors import ErrorCode

ACCEPT, RELEASE, REJECT, GAP, RENEW = (
    AcknowledgeType.ACCEPT,
    AcknowledgeType.RELEASE,
    AcknowledgeType.REJECT,
    AcknowledgeType.GAP,
    AcknowledgeType.RENEW,
)
LIMITS = ShareLimits(lock_duration_ms=1000, delivery_count_limit=3, max_record_locks=100)


def batches(*spans: tuple[int, int]) -> list[FetchedBatch]:
    return [FetchedBatch(a, b, False) for a, b in spans]


def test_the_table_allows_exactly_its_transitions() -> None:
    for target, previous in VALID_PREVIOUS_STATES.items():
        for state in RecordState:
            if state in previous:
                check(state, target)
            else:
                with pytest.raises(IllegalRecordTransition, match=f"{state.name} -> {target.name}"):
                    check(state, target)


def test_a_fetch_acquires_whole_batches_and_stops_after_max_records() -> None:
    sp = SharePartition(0, LIMITS)
    got = sp.acquire("a", batches((0, 9), (10, 19), (20, 29)), max_records=15, now_ms=0)
    assert got == [AcquiredRange(0, 19, 1)]  # the batch that reached 15 is whole
    assert sp.end_offset == 20 and sp.acquired_count == 20
    # A second consumer gets what follows, never the same records.
    assert sp.acquire("b", batches((20, 29)), 100, 0) == [AcquiredRange(20, 29, 1)]
    assert sp.acquire("c", batches((0, 9), (10, 19), (20, 29)), 100, 0) == []


def test_record_limit_mode_splits_a_batch() -> None:
    sp = SharePartition(0, LIMITS)
    got = sp.acquire("a", batches((0, 9)), 4, 0, mode=ACQUIRE_RECORD_LIMIT)
    assert got == [AcquiredRange(0, 3, 1)] and sp.end_offset == 4
    assert sp.acquire("b", batches((0, 9)), 100, 0, mode=ACQUIRE_RECORD_LIMIT) == [
        AcquiredRange(4, 9, 1)
    ]


def test_accepting_moves_the_start_offset_past_terminal_records_only() -> None:
    sp = SharePartition(0, LIMITS)
    sp.acquire("a", batches((0, 9)), 100, 0)
    assert sp.acknowledge("a", 5, 9, [ACCEPT], 0) is ErrorCode.none
    assert sp.start_offset == 0  # 0..4 still acquired
    assert sp.acknowledge("a", 0, 4, [ACCEPT], 0) is ErrorCode.none
    assert sp.start_offset == 10 and sp.runs == [] and sp.acquired_count == 0


def test_per_offset_types_release_reject_and_accept() -> None:
    sp = SharePartition(0, LIMITS)
    sp.acquire("a", batches((0, 4)), 100, 0)
    types = [ACCEPT, RELEASE, RELEASE, REJECT, ACCEPT]
    assert sp.acknowledge("a", 0, 4, types, 0) is ErrorCode.none
    assert sp.start_offset == 1
    assert sp.next_fetch_offset() == 1
    got = sp.acquire("b", batches((0, 4)), 100, 10)
    assert got == [AcquiredRange(1, 2, 2)]  # the released ones, a second delivery
    assert sp.redelivered_total == 2


def test_only_the_holder_may_acknowledge_and_a_bad_batch_changes_nothing() -> None:
    sp = SharePartition(0, LIMITS)
    sp.acquire("a", batches((0, 9)), 100, 0)
    assert sp.acknowledge("b", 0, 9, [ACCEPT], 0) is ErrorCode.invalid_record_state
    assert sp.acknowledge("a", 5, 12, [ACCEPT], 0) is ErrorCode.invalid_record_state
    assert sp.acknowledge("a", 0, 9, [ACCEPT, ACCEPT], 0) is ErrorCode.invalid_request
    assert sp.acknowledge("a", 0, 9, [7], 0) is ErrorCode.invalid_request
    assert sp.acquired_count == 10
    assert sp.acknowledge("a", 0, 9, [ACCEPT], 0) is ErrorCode.none
    assert sp.acknowledge("a", 0, 9, [ACCEPT], 0) is ErrorCode.invalid_record_state


def test_an_expired_lock_makes_records_available_again() -> None:
    sp = SharePartition(0, LIMITS)
    sp.acquire("a", batches((0, 9)), 100, now_ms=0)
    assert sp.next_deadline() == 1000
    assert sp.expire_locks(999) == 0
    assert sp.expire_locks(1000) == 10
    assert sp.acknowledge("a", 0, 9, [ACCEPT], 1000) is ErrorCode.invalid_record_state
    assert sp.acquire("b", batches((0, 9)), 100, 1000) == [AcquiredRange(0, 9, 2)]


def test_renew_extends_the_lock() -> None:
    sp = SharePartition(0, LIMITS)
    sp.acquire("a", batches((0, 9)), 100, now_ms=0)
    assert sp.acknowledge("a", 0, 9, [RENEW], 900) is ErrorCode.none
    assert sp.expire_locks(1500) == 0
    assert sp.expire_locks(1900) == 10


def test_the_delivery_count_limit_archives_a_poison_record() -> None:
    sp = SharePartition(0, LIMITS)
    now = 0
    for delivery in range(1, 4):
        assert sp.acquire("a", batches((0, 0)), 100, now) == [AcquiredRange(0, 0, delivery)]
        now += 1000
        sp.expire_locks(now)
    assert sp.start_offset == 1 and sp.runs == []  # archived after the third
    assert sp.acquire("a", batches((0, 0)), 100, now) == []


def test_a_member_leaving_releases_what_it_holds() -> None:
    sp = SharePartition(0, LIMITS)
    sp.acquire("a", batches((0, 4)), 100, 0)
    sp.acquire("b", batches((5, 9)), 100, 0)
    assert sp.release_member("a") == 5
    assert sp.acquire("b", batches((0, 9)), 100, 0) == [AcquiredRange(0, 4, 2)]


def test_gaps_and_skipped_batches_are_archived_never_delivered() -> None:
    sp = SharePartition(0, LIMITS)
    fetched = [
        FetchedBatch(0, 2, False),
        FetchedBatch(5, 7, True),  # an aborted transaction's records
        FetchedBatch(8, 8, True),  # its abort marker
        FetchedBatch(9, 9, False),
    ]
    got = sp.acquire("a", fetched, 100, 0)
    assert got == [AcquiredRange(0, 2, 1), AcquiredRange(9, 9, 1)]
    assert [(r.first, r.last, r.state) for r in sp.runs][1:4] == [
        (3, 4, RecordState.ARCHIVED),
        (5, 7, RecordState.ARCHIVED),
        (8, 8, RecordState.ARCHIVED),
    ]
    # A gap inside an acquired batch (compaction) is acknowledged as GAP by the client.
    assert sp.acknowledge("a", 0, 2, [ACCEPT, GAP, ACCEPT], 0) is ErrorCode.none
    assert sp.acknowledge("a", 9, 9, [ACCEPT], 0) is ErrorCode.none
    assert sp.start_offset == 10 and sp.runs == []


def test_max_record_locks_bounds_what_is_acquired() -> None:
    sp = SharePartition(0, ShareLimits(1000, 3, max_record_locks=10))
    assert sp.acquire("a", batches((0, 9), (10, 19)), 100, 0) == [AcquiredRange(0, 9, 1)]
    assert sp.acquire("b", batches((10, 19)), 100, 0) == []
    sp.acknowledge("a", 0, 9, [ACCEPT], 0)
    assert sp.acquire("b", batches((10, 19)), 100, 0) == [AcquiredRange(10, 19, 1)]


def test_a_fetch_from_below_the_start_offset_is_clamped() -> None:
    sp = SharePartition(5, LIMITS)
    assert sp.acquire("a", batches((0, 9)), 100, 0) == [AcquiredRange(5, 9, 1)]


def test_the_durable_state_redelivers_acquired_records_and_keeps_the_rest() -> None:
    sp = SharePartition(0, LIMITS)
    sp.acquire("a", batches((0, 9)), 100, 0)
    sp.acknowledge("a", 3, 5, [ACCEPT], 0)
    saved = sp.state_batches()
    assert saved == [
        StateBatch(0, 2, RecordState.AVAILABLE, 1),
        StateBatch(3, 5, RecordState.ACKNOWLEDGED, 1),
        StateBatch(6, 9, RecordState.AVAILABLE, 1),
    ]
    again = SharePartition(0, LIMITS)
    again.restore(sp.start_offset, saved)
    assert again.end_offset == 10
    got = again.acquire("b", batches((0, 9)), 100, 0)
    assert got == [AcquiredRange(0, 2, 2), AcquiredRange(6, 9, 2)]  # never 3..5


def test_reset_start_forgets_what_is_below_it() -> None:
    sp = SharePartition(0, LIMITS)
    sp.acquire("a", batches((0, 9)), 100, 0)
    sp.reset_start(4)
    assert sp.start_offset == 4 and sp.runs[0].first == 4 and sp.acquired_count == 6
    sp.reset_start(20)
    assert sp.start_offset == sp.end_offset == 20 and sp.acquired_count == 0


def test_a_transactional_acknowledgement_takes_effect_on_commit() -> None:
    sp = SharePartition(0, LIMITS)
    sp.acquire("a", batches((0, 9)), 100, 0)
    assert sp.acknowledge_pending("a", [(0, 9, ACCEPT)], producer_id=7) is ErrorCode.none
    assert sp.expire_locks(10_000) == 0  # the transaction decides, not the lock
    assert sp.acknowledge("a", 0, 0, [ACCEPT], 0) is ErrorCode.invalid_record_state
    assert sp.pending_producers() == {7}
    assert sp.complete_pending(7, commit=True) == 10
    assert sp.start_offset == 10 and sp.runs == []


def test_a_transactional_acknowledgement_is_undone_on_abort() -> None:
    sp = SharePartition(0, LIMITS)
    sp.acquire("a", batches((0, 9)), 100, 0)
    assert sp.acknowledge_pending("a", [(2, 4, ACCEPT)], producer_id=7) is ErrorCode.none
    assert sp.acknowledge_pending("b", [(5, 6, ACCEPT)], producer_id=7) is (
        ErrorCode.invalid_record_state
    )
    assert sp.complete_pending(7, commit=False) == 3
    assert sp.acknowledge("a", 0, 1, [ACCEPT], 0) is ErrorCode.none
    assert sp.acknowledge("a", 5, 9, [ACCEPT], 0) is ErrorCode.none
    assert sp.start_offset == 2
    assert sp.acquire("b", batches((0, 9)), 100, 0) == [AcquiredRange(2, 4, 2)]


def test_a_committed_transactional_acknowledgement_replays_onto_a_snapshot() -> None:
    sp = SharePartition(0, LIMITS)
    sp.restore(0, [StateBatch(0, 9, RecordState.AVAILABLE, 1)])
    sp.force_states([(0, 4, RecordState.ACKNOWLEDGED), (5, 5, RecordState.ARCHIVED)])
    assert sp.start_offset == 6
    assert sp.acquire("a", batches((0, 9)), 100, 0) == [AcquiredRange(6, 9, 2)]


def test_a_recovered_open_transaction_holds_its_records_until_it_ends() -> None:
    sp = SharePartition(0, LIMITS)
    sp.restore(0, [StateBatch(0, 9, RecordState.AVAILABLE, 1)])
    sp.mark_pending(0, 4, 7, RecordState.ACKNOWLEDGED, member="recovered")
    assert sp.expire_locks(10**9) == 0
    assert sp.acquire("a", batches((0, 9)), 100, 0) == [AcquiredRange(5, 9, 2)]
    sp.complete_pending(7, commit=False)
    assert sp.acquire("b", batches((0, 9)), 100, 0) == [AcquiredRange(0, 4, 2)]


def test_a_recovered_transaction_past_the_written_end_still_holds_its_records() -> None:
    # The acquisition of 10..19 was never written; the transactional record names them.
    sp = SharePartition(0, LIMITS)
    sp.restore(10, [])
    sp.mark_pending(10, 19, 7, RecordState.ACKNOWLEDGED, member="recovered")
    assert sp.end_offset == 20 and sp.acquired_count == 10
    assert sp.acquire("a", batches((10, 24)), 100, 0) == [AcquiredRange(20, 24, 1)]
    sp.complete_pending(7, commit=False)
    assert sp.acquire("a", batches((10, 24)), 100, 0) == [AcquiredRange(10, 19, 2)]


def test_pending_runs_settle_from_their_share_coordinator_s_view() -> None:
    # The leader holds 0..14 for transactions it learns the end of from another broker.
    sp = SharePartition(0, LIMITS)
    sp.acquire("a", batches((0, 14)), 100, 0)
    assert sp.acknowledge_pending("a", [(0, 4, ACCEPT), (5, 9, REJECT)], 7) is ErrorCode.none
    assert sp.acknowledge_pending("a", [(10, 14, ACCEPT)], 8) is ErrorCode.none
    acquired, available = RecordState.ACQUIRED, RecordState.AVAILABLE
    # Still open there: nothing moves.
    assert sp.resolve_pending(0, [StateBatch(0, 14, acquired, 1)]) == 0
    # 7 committed (0..4 acknowledged, 5..9 archived), 8 aborted (shown Available).
    decided = [
        StateBatch(5, 9, RecordState.ARCHIVED, 1),
        StateBatch(10, 12, available, 1),
        StateBatch(13, 14, available, 1),
    ]
    # 0..4 not in the view (never written there, an abort): released as well.
    assert sp.resolve_pending(0, decided) == 15
    assert sp.pending_producers() == set()
    assert sp.acquire("b", batches((0, 14)), 100, 0) == [
        AcquiredRange(0, 4, 2),
        AcquiredRange(10, 14, 2),
    ]


def test_a_pending_run_settles_by_piece_when_the_view_splits_it() -> None:
    sp = SharePartition(0, LIMITS)
    sp.acquire("a", batches((0, 9)), 100, 0)
    assert sp.acknowledge_pending("a", [(0, 9, ACCEPT)], 7) is ErrorCode.none
    decided = [
        StateBatch(2, 3, RecordState.ARCHIVED, 1),
        StateBatch(4, 9, RecordState.ACQUIRED, 1),
    ]
    # 0..1 are below the coordinator's start offset: done there, as the target says.
    assert sp.resolve_pending(2, decided) == 4
    assert sp.start_offset == 4 and sp.pending_producers() == {7}
    assert sp.state_batches()[0] == StateBatch(4, 9, RecordState.AVAILABLE, 1)


def test_a_committed_acknowledgement_past_the_written_end_replays() -> None:
    # 10..19 were acquired for the first time (never written), then committed.
    sp = SharePartition(0, LIMITS)
    sp.restore(10, [])
    sp.force_states([(12, 19, RecordState.ACKNOWLEDGED)])
    assert sp.end_offset == 20
    assert sp.acquire("a", batches((10, 24)), 100, 0) == [
        AcquiredRange(10, 11, 1),
        AcquiredRange(20, 24, 1),
    ]
