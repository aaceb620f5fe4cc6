"""Share sessions (KIP-932): a member's incremental ShareFetch context on one broker.

Epoch 0 opens (or reopens) a session naming its partitions; each later request carries the
next epoch and adds or forgets partitions; epoch -1 closes it after its acknowledgements.
A wrong epoch is INVALID_SHARE_SESSION_EPOCH and an unknown session SHARE_SESSION_NOT_FOUND,
as in Kafka's ShareSessionCache.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from onceflow.errors import ErrorCode

OPEN_EPOCH = 0
FINAL_EPOCH = -1
_MAX_EPOCH = 2**31 - 1

SessionPartition = tuple[uuid.UUID, int]


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    epoch: int = 1  # the epoch the next request must carry
    partitions: dict[SessionPartition, None] = field(default_factory=dict)


class ShareSessions:
    def __init__(self, max_sessions: int = 10_000) -> None:
        self._sessions: dict[tuple[str, str], ShareSession] = {}
        self._max = max_sessions

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def advance(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        added: Iterable[SessionPartition] = (),
        forgotten: Iterable[SessionPartition] = (),
    ) -> tuple[ErrorCode, ShareSession | None]:
        """Check a request's session epoch and apply its partitions; the session (its
        `epoch` already moved on), or the error and None."""
        key = (group_id, member_id)
        if epoch == OPEN_EPOCH:
            if key not in self._sessions and len(self._sessions) >= self._max:
                return ErrorCode.share_session_limit_reached, None
            session = self._sessions[key] = ShareSession(group_id, member_id)
        else:
            found = self._sessions.get(key)
            if found is None:
                return ErrorCode.share_session_not_found, None
            if epoch != FINAL_EPOCH and epoch != found.epoch:
                return ErrorCode.invalid_share_session_epoch, None
            session = found
            if epoch != FINAL_EPOCH:
                session.epoch = 1 if epoch == _MAX_EPOCH else epoch + 1
        for tp in forgotten:
            session.partitions.pop(tp, None)
        for tp in added:
            session.partitions[tp] = None
        return ErrorCode.none, session

    def close(self, group_id: str, member_id: str) -> None:
        self._sessions.pop((group_id, member_id), None)

    def close_member(self, group_id: str, member_id: str) -> None:
        self.close(group_id, member_id)

    def of_group(self, group_id: str) -> list[ShareSession]:
        return [s for (g, _), s in self._sessions.items() if g == group_id]
