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
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.test_txn_coordinator import make, settle

from onceflow.coordinator.transaction.coordinator import TransactionCoordinator
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


@pytest.mark.parametrize("tv2", [False, True], ids=["tv0", "tv2"])
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
def test_a_fenced_instance_never_changes_its_successors_transactions(
    tv2: bool, steps: list[tuple[str, str]]
) -> None:
    """B runs its transactions at transaction version 0 or 2 (each end bumps its epoch)."""

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
        fresh_epoch = new.producer_epoch
        fenced_markers = len(markers.written)  # the abort of A's transaction
        wanted: list[tuple[int, bool]] = []  # each of B's ends: (marker epoch, commit)
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
                    TXN, pid, fresh_epoch, [("a", 0), ("b", 1)], client_version=2 if tv2 else 0
                )
                assert code is ErrorCode.none, f"B's add: {code}"
                open_txn = True
            elif open_txn and tv2:
                ended = await coord.end_txn_bumping(TXN, pid, fresh_epoch, op == "commit")
                assert ended.error is ErrorCode.none, f"B's {op}: {ended.error}"
                fresh_epoch = ended.producer_epoch  # the markers carry the bumped epoch
                wanted.append((fresh_epoch, op == "commit"))
                open_txn = False
            elif open_txn:
                code = await coord.end_txn(TXN, pid, fresh_epoch, op == "commit")
                assert code is ErrorCode.none, f"B's {op}: {code}"
                wanted.append((fresh_epoch, op == "commit"))
                open_txn = False
        await settle()
        ours = markers.written[fenced_markers:]
        assert [(p, e, commit) for p, e, commit, _ in ours] == [
            (pid, epoch, commit) for epoch, commit in wanted
        ]
        await coord.close()

    asyncio.run(go())
