"""Share-group membership kept in `__consumer_offsets` (membership_records.py), as Kafka
4.2 keeps it: every change of a group's epoch or of a member (joined, left, expired, a new
epoch, subscription or assignment) is appended to the group's partition before the
heartbeat is answered, and a broker that becomes the partition's leader (a coordinator
move, a restart) replays it. Members come back with their epoch and keep it; a member that
does not return within its session expires, as it would have; one with an older epoch is
fenced (FENCED_MEMBER_EPOCH), one the group never had is UNKNOWN_MEMBER_ID.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from onceflow.coordinator.group.log import LogEntry
from onceflow.coordinator.share import membership_records as records
from onceflow.coordinator.share.group import ShareGroup
from onceflow.records.builder import build_batch

#: What a member's record holds, to tell whether a heartbeat changed it.
MemberView = tuple[Any, ...]


class MembershipLog(Protocol):
    """`__consumer_offsets` as the share coordinator sees it."""

    def append(self, partition: int, batch: bytes) -> Awaitable[int]: ...

    def read(self, partition: int) -> Iterable[LogEntry]: ...


def view(group: ShareGroup | None) -> tuple[int, dict[str, MemberView]]:
    if group is None:
        return -1, {}
    return group.epoch, {
        m.member_id: (
            m.epoch,
            m.subscribed,
            m.rack_id,
            m.assignment,
            m.client_id,
            m.client_host,
        )
        for m in group.members.values()
    }


class DurableMembership:
    def __init__(self, log_: MembershipLog, partition_for: Callable[[str], int]) -> None:
        self._log = log_
        self.partition_for = partition_for

    def changes(
        self,
        group_id: str,
        before: tuple[int, dict[str, MemberView]],
        group: ShareGroup | None,
        now_ms: int,
    ) -> asyncio.Future[int] | None:
        """Append what changed since `before` (a `view`); None when nothing did."""
        epoch, members = before
        after_epoch, after = view(group)
        out: list[records.Record] = []
        if group is None:
            if epoch >= 0:
                out.append(records.group_tombstone(group_id))
        elif after_epoch != epoch:
            out.append(records.group_record(group))
        for member_id in members.keys() - after.keys():
            out.append(records.member_tombstone(group_id, member_id))
        if group is not None:
            for member_id, seen in after.items():
                if members.get(member_id) != seen:
                    out.append(records.member_record(group_id, group.members[member_id]))
        if not out:
            return None
        batch = build_batch([(k, v, ()) for k, v in out], timestamp_ms=now_ms)
        # Started now: a group's changes land in the order they were made.
        return asyncio.ensure_future(self._log.append(self.partition_for(group_id), batch))

    def load(self, partition: int, deadline_ms: int) -> dict[str, ShareGroup]:
        """The share groups of a `__consumer_offsets` partition, replayed from its log."""
        entries = ((e.key, e.value) for e in self._log.read(partition) if e.control is None)
        return records.replay(entries, deadline_ms)
