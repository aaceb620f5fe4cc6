"""A transaction's markers as the coordinator asks for them to be written."""

from __future__ import annotations

from dataclasses import dataclass

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """The COMMIT or ABORT marker of one producer's transaction, for each of its partitions,
    carrying the producer epoch the transaction ends at."""

    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: frozenset[TopicPartition]
