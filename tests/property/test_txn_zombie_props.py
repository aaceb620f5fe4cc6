"""A fenced instance never changes its successor's transactions, whatever it sends and when.

Instance A of a transactional id is fenced by a new instance B (B's InitProducerId aborts
A's open transaction). Then A and B take turns in any order: A adds partitions, commits,
aborts, ends at transaction version 2, verifies writes and asks for a KIP-360 epoch bump,
all at its old epoch, the way a zombie's late requests arrive; B runs its transactions.
Whatever the order, every request of A is refused, and the markers of each of B's
transactions carry the result B asked for.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tests.unit.test_txn_coordinator import make, settle

from onceflow.coordinator.transaction.coordinator import TransactionCoordinator
from onceflow.coordinator.transaction.metadata import MAX_EPOCH
from onceflow.errors import ErrorCode, KafkaError

TXN = "zombie-interleaving"
ZOMBIE_OPS = ("add", "commit", "abort", "end_v2_commit", "end_v2_abort", "bump", "verify")
FRESH_OPS = ("add", "commit", "abort", "settle")


async def _zombie(c: TransactionCoordinator, op: str, pid: int, epoch: int) -> ErrorCode:
    """A's request at its old epoch: the coordinator's answer."""
    if op == "add":
        return await c.add_partitions(TXN, pid, epoch, [("z", 0)])
    if op in ("commit", "abort"):
        return await c.end_txn(TXN, pid, epoch, op == "commit")
    if op.startswith("end_v2"):
        return (await c.end_txn_bumping(TXN, pid, epoch, op.endswith("commit"))).error
    if op == "bump":
        return (await c.init_producer_id(TXN, 10_000, pid, epoch)).error
    try:
        c.verify(TXN, pid, epoch, ("a", 0))
    except KafkaError as exc:
        return exc.code
    return ErrorCode.none


@pytest.mark.parametrize(
    ("tv2", "near_max"),
    [(False, False), (True, False), (True, True)],
    ids=["tv0", "tv2", "tv2-rolling-over"],
)
@settings(max_examples=max(settings().max_examples, 300), deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("A"), st.sampled_from(ZOMBIE_OPS)),
            st.tuples(st.just("B"), st.sampled_from(FRESH_OPS)),
        ),
        max_size=25,
    )
)
@example(  # three ends (the third rolls the id near the last epoch), then the zombie
    steps=[("B", "add"), ("B", "commit")] * 3
    + [("A", "bump"), ("A", "add"), ("A", "end_v2_abort"), ("B", "add"), ("B", "abort")]
)
def test_a_fenced_instance_never_changes_its_successors_transactions(
    tv2: bool, near_max: bool, steps: list[tuple[str, str]]
) -> None:
    """B runs its transactions at transaction version 0 or 2 (each end bumps its epoch),
    and at version 2 also from 3 below the last epoch, so its ends roll the producer id."""

    async def go() -> None:
        coord, _, markers, _ = make()
        old = await coord.init_producer_id(TXN, 10_000)
        pid, zombie_epoch = old.producer_id, old.producer_epoch
        assert await coord.add_partitions(TXN, pid, zombie_epoch, [("a", 0)]) is ErrorCode.none
        assert (await coord.init_producer_id(TXN, 10_000)).error is (
            ErrorCode.concurrent_transactions
        )
        await settle()
        new = await coord.init_producer_id(TXN, 10_000)
        assert new.error is ErrorCode.none
        fresh_pid, fresh_epoch = pid, new.producer_epoch
        if near_max:  # as if 32764 transactions had ended
            fresh_epoch = coord.txns[TXN].producer_epoch = MAX_EPOCH - 3
        fenced_markers = len(markers.written)  # the abort of A's transaction
        wanted: list[tuple[int, int, bool]] = []  # B's ends: (marker's id, epoch, commit)
        open_txn = False
        for who, op in steps:
            if who == "A":
                answer = await _zombie(coord, op, pid, zombie_epoch)
                assert answer is not ErrorCode.none, f"the zombie's {op} was accepted"
                continue
            if op == "settle":
                await settle()
            elif op == "add":
                await settle()  # B's previous end completes first, as a client waits
                code = await coord.add_partitions(
                    TXN,
                    fresh_pid,
                    fresh_epoch,
                    [("a", 0), ("b", 1)],
                    client_version=2 if tv2 else 0,
                )
                assert code is ErrorCode.none, f"B's add: {code}"
                open_txn = True
            elif open_txn and tv2:
                ended = await coord.end_txn_bumping(TXN, fresh_pid, fresh_epoch, op == "commit")
                assert ended.error is ErrorCode.none, f"B's {op}: {ended.error}"
                # The markers carry the bumped epoch (of the old id, when the end rolls).
                wanted.append((fresh_pid, fresh_epoch + 1, op == "commit"))
                fresh_pid, fresh_epoch = ended.producer_id, ended.producer_epoch
                open_txn = False
            elif open_txn:
                code = await coord.end_txn(TXN, pid, fresh_epoch, op == "commit")
                assert code is ErrorCode.none, f"B's {op}: {code}"
                wanted.append((pid, fresh_epoch, op == "commit"))
                open_txn = False
        await settle()
        if near_max and len(wanted) >= 3:
            assert fresh_pid != pid, "the third end from 32764 rolls the producer id"
        ours = markers.written[fenced_markers:]
        assert [(p, e, commit) for p, e, commit, _ in ours] == wanted
        await coord.close()

    asyncio.run(go())
