"""A follower's half of an incremental fetch session (KIP-227, Kafka's FetchSessionHandler).

The first Fetch to a leader is full (session id 0, epoch 0) and asks for a session; the
leader answers its id. From then on a request names only the partitions whose fetch state
changed since the leader last heard of them (fetch offset, log start, leader epoch, topic
id), and forgets those no longer fetched; the leader keeps the rest as they were, and a
fetch offset left out is the one sent last, which this replica held durably then (it
fetches only after its fsync) and still does. Any doubt (an error answer, a request that
failed or timed out, a switch between fetching by topic id and by name) starts over with a
full fetch; a partition answered with an error is named again in the next request that
wants it.
"""

from __future__ import annotations

import uuid

Key = tuple[str, int]
#: What the leader holds of a partition: topic id, leader epoch, fetch offset, log start.
FetchState = tuple[uuid.UUID | None, int, int, int]

INITIAL_EPOCH = 0
MAX_EPOCH = 2**31 - 1


class FollowerSession:
    def __init__(self) -> None:
        self.id = 0  # none yet: the next fetch is full and asks for one
        self.epoch = INITIAL_EPOCH
        self._version = -1
        self._held: dict[Key, FetchState] = {}

    def plan(
        self, version: int, wanted: dict[Key, FetchState]
    ) -> tuple[dict[Key, FetchState], list[tuple[Key, FetchState]]]:
        """The partitions the next request names and those it forgets (with what the
        leader holds of them, for their topic's id or name)."""
        if self.id == 0 or version != self._version:
            self.reset()
            return dict(wanted), []
        send = {key: state for key, state in wanted.items() if self._held.get(key) != state}
        forget = [(key, state) for key, state in self._held.items() if key not in wanted]
        return send, forget

    @property
    def full(self) -> bool:
        return self.id == 0

    def answered(
        self,
        version: int,
        session_id: int,
        sent: dict[Key, FetchState],
        forgotten: list[tuple[Key, FetchState]],
    ) -> None:
        """The leader answered the request planned: the session goes on from it."""
        if self.full:
            self._held = dict(sent)
            self._version = version
            self.id = session_id  # 0: the leader keeps no session, every fetch stays full
            self.epoch = 1 if session_id else INITIAL_EPOCH
            return
        self._held.update(sent)
        for key, _ in forgotten:
            self._held.pop(key, None)
        self.epoch = 1 if self.epoch >= MAX_EPOCH else self.epoch + 1

    def refused(self, key: Key) -> None:
        """The leader answered this partition with an error: the next request that wants
        it names it again. A leader that could not resolve its topic id keeps nothing of
        it, and a partition delayed after the error may never be forgotten in between
        (no request goes out while it is the only one), so held, it would be named by
        neither side again."""
        self._held.pop(key, None)

    def reset(self) -> None:
        """Start over: the next request is full."""
        self.id = 0
        self.epoch = INITIAL_EPOCH
        self._held = {}
