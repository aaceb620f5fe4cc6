"""The in-flight record states of a share-partition (KIP-932) and the one table of legal
transitions.

A record fetched by a share consumer is Acquired by it for a lock duration. It ends
Acknowledged (accepted) or Archived (rejected, a gap, an aborted transaction's record, or
past the delivery-count limit), or goes back to Available (released, or the lock ran out) to
be acquired again. Kafka's RecordState has the same four states and codes.
"""

from __future__ import annotations

from enum import IntEnum


class RecordState(IntEnum):
    """Values are Kafka's (RecordState.id), as written in `__share_group_state`."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4

    @property
    def terminal(self) -> bool:
        return self in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


class AcknowledgeType(IntEnum):
    """ShareFetch/ShareAcknowledge acknowledge types (KIP-932, KIP-1222's RENEW)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


# target state -> the states a record may be in just before it.
VALID_PREVIOUS_STATES: dict[RecordState, frozenset[RecordState]] = {
    # Fetched for the first time or again.
    RecordState.ACQUIRED: frozenset({RecordState.AVAILABLE}),
    # Released by its consumer, or its acquisition lock ran out.
    RecordState.AVAILABLE: frozenset({RecordState.ACQUIRED}),
    # Accepted by the consumer that holds it.
    RecordState.ACKNOWLEDGED: frozenset({RecordState.ACQUIRED}),
    # Rejected, a gap, past the delivery limit, an aborted transaction's or a control
    # record; or below a start offset moved by an operator (AlterShareGroupOffsets).
    RecordState.ARCHIVED: frozenset({RecordState.ACQUIRED, RecordState.AVAILABLE}),
}


class IllegalRecordTransition(Exception):
    """A bug: a transition the table forbids."""


def check(current: RecordState, target: RecordState) -> None:
    if current not in VALID_PREVIOUS_STATES[target]:
        raise IllegalRecordTransition(f"record state {current.name} -> {target.name}")
