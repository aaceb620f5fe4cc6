"""A partition refuses a fenced producer's writes and stale markers, in any order.

The zombie (epoch 0) opened a transaction here; its coordinator fenced it with an ABORT at
epoch 1, and the new instance writes at epoch 2. Then the zombie's late batches (any
sequence, retries of what it wrote included), markers of a zombie coordinator (an older
coordinator epoch) or at an old producer epoch, and the new instance's writes and ends
arrive in any order. Nothing of the zombie is appended, and the new instance's
transactions end only by its own markers.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.test_producer_state import PID, batch, open_log, rejected, send

from onceflow.errors import KafkaError

COORDINATOR_EPOCH = 5
FRESH_EPOCH = 2

ZOMBIE = st.one_of(
    st.tuples(st.just("write"), st.integers(0, 4)),  # a transactional batch at its sequence
    st.tuples(st.just("marker"), st.integers(0, FRESH_EPOCH - 1)),  # an ABORT at that epoch
    st.tuples(st.just("coordinator"), st.just(FRESH_EPOCH)),  # a zombie coordinator's COMMIT
)
FRESH = st.sampled_from(["write", "commit", "abort"])


@settings(max_examples=max(settings().max_examples, 300), deadline=None)
@given(st.lists(st.one_of(st.tuples(st.just("Z"), ZOMBIE), st.tuples(st.just("F"), FRESH))))
def test_nothing_of_the_zombie_lands_and_only_the_new_instance_ends_its_transactions(
    steps: list[tuple[str, object]],
) -> None:
    plog = open_log()
    send(plog, batch(0, txn=True), batch(1, txn=True))
    plog.append_marker(PID, 1, COORDINATOR_EPOCH, commit=False)  # the fence
    next_seq, open_txn = 0, False
    for who, step in steps:
        before = plog.log_end_offset
        entry = plog.producer_state.producers[PID].copy()
        if who == "F":
            if step == "write":
                send(plog, batch(next_seq, epoch=FRESH_EPOCH, txn=True))
                next_seq, open_txn = next_seq + 1, True
            elif open_txn:
                plog.append_marker(PID, FRESH_EPOCH, COORDINATOR_EPOCH, commit=step == "commit")
                open_txn = False
            continue
        kind, value = step  # type: ignore[misc]
        if kind == "write":
            rejected(plog, batch(value, txn=True))
            continue
        # The fence's own epoch is still current until the new instance writes: the
        # coordinator may write that marker again (it retries markers); it ends nothing.
        stale = kind == "coordinator" or value < entry.epoch
        try:
            plog.append_marker(
                PID,
                value,
                COORDINATOR_EPOCH - 1 if kind == "coordinator" else COORDINATOR_EPOCH,
                commit=kind == "coordinator",
            )
        except KafkaError:
            assert plog.log_end_offset == before, f"refused {step} was appended"
            assert plog.producer_state.producers[PID] == entry, f"{step} changed the state"
        else:
            assert not stale, f"{step} was appended"
            assert not open_txn, f"{step} ended the new instance's transaction"
