"""Adds of one producer that wait together are logged together (issue 26).

librdkafka sends AddOffsetsToTxn right behind AddPartitionsToTxn, without waiting for the
first answer, and the broker handles both at once (their answers still leave in order).
The first add of a transaction often waits for the previous transaction's markers; an add
of the same producer (id, epoch and transaction version) arriving meanwhile joins it, and
both are one `__transaction_state` record, one replication round instead of two in a row.

An add is registered the moment it is asked for, so the order of a producer's requests
holds: an add arriving once the last batch stopped gathering (its record is being written)
starts a batch that waits for the one before, and an EndTxn waits for every add registered
before it, as when a connection's requests were handled one by one.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from onceflow.coordinator.transaction.metadata import TopicPartition
from onceflow.errors import ErrorCode

Producer = tuple[int, int, int]  # producer id, epoch, client transaction version


@dataclass(slots=True)
class AddBatch:
    """Adds of one producer to be logged as one record."""

    producer: Producer
    partitions: set[TopicPartition]
    before: asyncio.Future[ErrorCode] | None  # the batch of the id registered before it
    answer: asyncio.Future[ErrorCode] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    gathering: bool = True  # until the previous batch and transaction have ended
    #: Its answer, or the future of it, once its record is appended (or it was refused).
    started: ErrorCode | asyncio.Future[ErrorCode] | None = None


class AddBatches:
    """The add batches of each transactional id not answered yet, oldest first."""

    def __init__(self) -> None:
        self._batches: dict[str, list[AddBatch]] = {}

    def join(
        self, transactional_id: str, producer: Producer, wanted: set[TopicPartition]
    ) -> AddBatch | None:
        """The newest batch of the id, now holding `wanted` too, if it is still gathering
        for the same producer; else None."""
        batches = self._batches.get(transactional_id)
        if not batches or not batches[-1].gathering or batches[-1].producer != producer:
            return None
        batches[-1].partitions |= wanted
        return batches[-1]

    def start(
        self, transactional_id: str, producer: Producer, wanted: set[TopicPartition]
    ) -> AddBatch:
        batches = self._batches.setdefault(transactional_id, [])
        before = batches[-1].answer if batches else None
        batch = AddBatch(producer, set(wanted), before)
        # Retrieved here, so an add that fails with nobody joined is not reported unread.
        batch.answer.add_done_callback(_retrieve)
        batches.append(batch)
        return batch

    def next_to_start(self, transactional_id: str) -> AddBatch | None:
        """The id's oldest batch if nothing is logged for it yet and no batch before it is
        unanswered: the one to log once the previous transaction has ended."""
        batches = self._batches.get(transactional_id)
        if not batches:
            return None
        first = batches[0]
        if first.started is not None or (first.before is not None and not first.before.done()):
            return None
        return first

    def end(
        self,
        transactional_id: str,
        batch: AddBatch,
        answer: ErrorCode | None,
        error: BaseException | None = None,
    ) -> None:
        """The batch is answered (or failed with `error`)."""
        batches = self._batches.get(transactional_id, [])
        if batch in batches:
            batches.remove(batch)
            if not batches:
                del self._batches[transactional_id]
        if batch.answer.done():
            return
        if answer is not None:
            batch.answer.set_result(answer)
        elif isinstance(error, asyncio.CancelledError):
            batch.answer.cancel()
        else:
            batch.answer.set_exception(error or RuntimeError("add batch ended unanswered"))

    async def quiet(self, transactional_id: str) -> None:
        """Until every add of the id registered so far is answered (an EndTxn comes after
        the adds that came before it)."""
        answers = [b.answer for b in self._batches.get(transactional_id, [])]
        if answers:
            await asyncio.wait(answers)


async def settled(answer: asyncio.Future[ErrorCode] | None) -> None:
    """Until `answer` is done, however it ends (its own caller handles the outcome); a
    waiter cancelled meanwhile leaves `answer` alone."""
    if answer is not None and not answer.done():
        await asyncio.wait({answer})


def _retrieve(answer: asyncio.Future[ErrorCode]) -> None:
    if not answer.cancelled():
        answer.exception()
