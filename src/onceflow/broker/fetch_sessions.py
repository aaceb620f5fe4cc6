"""Incremental fetch sessions (KIP-227) for followers' fetches.

A follower asks for every partition it copies from this leader, about 35 on a 3-broker
cluster with the internal topics' 100 partitions: a full fetch decodes, reads and encodes
all of them on every round, and on two cores that Python work, not the disk, was most of a
replicated append's time (benchmarks/README.md, issue 26). In a session the leader keeps
each partition's last fetch state, so a follower's request names only the partitions whose
fetch offset (what it holds durably) or log start changed, and the answer only those with
records, an error, or a high watermark or log start the follower has not been told.

A partition left out of a request keeps the fetch offset the follower sent last, which it
held durably then and still does. The fetch handler reads it again only when it has news
(records past that offset, a high watermark, LSO or log start the follower was not told, an
error); a quiet one is just noted as caught up (Kafka's updateFollowerFetchState), so a
round costs what changed, not the session's size. Nor does a pass look at every partition
to find the news: the purgatories tell the sessions which partitions were appended to or
saw their high watermark move (`note_change`), and a pass looks at those, at what the
request names and at what the last pass read. A full pass, every partition, comes after a
timeout, a new leadership, or a short interval (`first_look`): what changes without an
append or a high watermark (an ISR, a leadership lost, a log start) is seen within it, and
the quiet partitions' caught-up notes stay fresh far inside replica.lag.time.max.ms.

Sessions are created for followers only (replica_id set); a consumer that asks for one gets
session id 0, which KIP-227 allows (the broker keeps no session, every fetch is full). A
follower has one session per leader: a new one replaces its previous.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from onceflow.broker.purgatory import EVERYTHING
from onceflow.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from onceflow.replication.partition import Partition

#: KIP-227's session epochs: 0 opens a session, -1 closes it (and asks for a full fetch).
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1

PartitionKey = tuple[str, int]
#: A topic of a fetch: its name (None: an unknown topic id), its id (v13+), its partitions.
Topic = tuple[str | None, Any, Sequence[Any]]


class PartitionRead(Protocol):
    """What the fetch handler read of a partition, as far as a session looks at it."""

    @property
    def error(self) -> ErrorCode: ...
    @property
    def high_watermark(self) -> int: ...
    @property
    def last_stable_offset(self) -> int: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def region(self) -> object | None: ...
    @property
    def diverging(self) -> object | None: ...
    @property
    def leader(self) -> object | None: ...


Read = TypeVar("Read", bound=PartitionRead)
#: What the follower was last told of a partition: high watermark, LSO, log start offset.
Told = tuple[int, int, int]


@dataclass(slots=True)
class SessionPartition:
    topic_id: uuid.UUID | None
    fetch: Any  # the request's FetchPartition entity last sent for it
    told: Told | None = None
    #: The local replica last read for it, kept while it leads (the fetch handler's).
    leader: Partition | None = None


@dataclass(slots=True)
class FetchSession:
    id: int
    replica: int
    version: int  # by topic id (v13+) or by name: a follower that switches starts anew
    epoch: int = 1  # the epoch the next incremental request must carry
    partitions: dict[PartitionKey, SessionPartition] = field(default_factory=dict)
    #: Partitions appended to, or whose high watermark or LSO moved, since this session's
    #: last pass (EVERYTHING: anything may have changed): FetchSessions.note_change.
    changed: set[PartitionKey] = field(default_factory=set)
    #: What the last pass of the previous request read, looked at again by the next.
    carry: set[PartitionKey] = field(default_factory=set)
    #: When a pass last looked at every partition (monotonic ms).
    full_pass_ms: int = 0

    def first_look(self, now_ms: int, interval_ms: int) -> set[PartitionKey] | None:
        """The partitions the first pass of a request looks at (besides those it names):
        what changed since the last pass and what that pass read; None, all of them, once
        `interval_ms` passed since the last full pass, so that what changes unnoticed (an
        ISR, a leadership lost, a log start) and the quiet ones' caught-up notes are seen
        to within that interval."""
        changed, self.changed = self.changed, set()
        if EVERYTHING in changed or now_ms - self.full_pass_ms >= interval_ms:
            self.full_pass_ms = now_ms
            return None
        return changed | self.carry

    def next_look(
        self, news: set[PartitionKey], now_ms: int, timed_out: bool
    ) -> set[PartitionKey] | None:
        """A later pass of a request, after its wait: what the last pass read and what
        changed meanwhile; None, all of them, after a timeout or a change of everything."""
        changed, self.changed = self.changed, set()
        if timed_out or EVERYTHING in changed:
            self.full_pass_ms = now_ms
            return None
        return news | changed

    def update(self, names: list[str | None], request: Any, *, full: bool) -> None:
        """A request in this session: its partitions are added or replace the cached
        ones (what the follower was told of one stays true), its forgotten partitions
        leave; after an incremental one the expected epoch moves on (the first, full
        request opened the session at epoch 1)."""
        for name, topic in zip(names, request.topics, strict=True):
            if name is None:
                continue  # an unknown topic id: answered as such, never cached
            topic_id = getattr(topic, "topic_id", None)
            for p in topic.partitions:
                key = (name, p.partition)
                known = self.partitions.get(key)
                if known is not None and known.topic_id == topic_id:
                    known.fetch = p
                else:
                    self.partitions[key] = SessionPartition(topic_id, p)
        for forgotten in request.forgotten_topics_data or ():
            name = _forgotten_name(self, forgotten)
            for index in forgotten.partitions:
                self.partitions.pop((name, index), None)
        if not full:
            self.epoch = 1 if self.epoch >= MAX_EPOCH else self.epoch + 1

    def answered(
        self, topics: list[Topic], reads: list[list[Read]], full: bool
    ) -> tuple[list[Topic], list[list[Read]]]:
        """What the answer holds: every partition after a full request, else those with
        records, an error, a diverging epoch or a moved leader, or a high watermark, LSO or
        log start the follower was not told yet; topics left empty are left out."""
        kept_topics: list[Topic] = []
        kept_reads: list[list[Read]] = []
        for (name, topic_id, parts), topic_reads in zip(topics, reads, strict=True):
            kept_parts, kept = [], []
            for p, read in zip(parts, topic_reads, strict=True):
                news = (
                    read.region is not None
                    or read.error is not ErrorCode.none
                    or read.diverging is not None
                    or read.leader is not None
                )
                told = (read.high_watermark, read.last_stable_offset, read.log_start_offset)
                answer = self.worth_answering((name or "", p.partition), told, news)
                if full or answer:
                    kept_parts.append(p)
                    kept.append(read)
            if kept:
                kept_topics.append((name, topic_id, kept_parts))
                kept_reads.append(kept)
        return kept_topics, kept_reads

    def untold_log_start(self, topics: list[Topic], reads: list[list[Read]]) -> bool:
        """Whether a partition read has a log start offset the follower was not told: the
        fetch handler answers it at once, records or not (a high watermark alone waits
        for the next records), as DeleteRecords waits for the follower to move too."""
        for (name, _, parts), topic_reads in zip(topics, reads, strict=True):
            for p, read in zip(parts, topic_reads, strict=True):
                entry = self.partitions.get((name or "", p.partition))
                told = entry.told if entry is not None else None
                if told is not None and told[2] != read.log_start_offset:
                    return True
        return False

    def worth_answering(self, key: PartitionKey, told: Told, news: bool) -> bool:
        """Whether a partition goes into the answer (records, an error, a diverging
        epoch or leader are `news`; else only a high watermark, LSO or log start the
        follower has not been told), noting what it is told."""
        entry = self.partitions.get(key)
        if entry is None:
            return True
        if news or entry.told != told:
            entry.told = told
            return True
        return False


def _forgotten_name(session: FetchSession, forgotten: Any) -> str:
    topic_id = getattr(forgotten, "topic_id", None)
    if topic_id is None:
        return str(forgotten.topic)
    for (name, _), entry in session.partitions.items():
        if entry.topic_id == topic_id:
            return name
    return ""


class FetchSessions:
    """This broker's followers' sessions, at most one per follower."""

    def __init__(self) -> None:
        self._sessions: dict[int, FetchSession] = {}
        self._of_replica: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def note_change(self, key: PartitionKey) -> None:
        """A partition's log, high watermark or LSO changed (EVERYTHING: any may have): the
        next pass of every session looks at it (the purgatories' on_notify)."""
        for session in self._sessions.values():
            session.changed.add(key)

    def open(self, replica: int, version: int) -> FetchSession:
        self.close(self._of_replica.get(replica, 0))
        session_id = 0
        while session_id == 0 or session_id in self._sessions:
            session_id = random.randint(1, MAX_EPOCH)
        session = FetchSession(session_id, replica, version)
        self._sessions[session_id] = session
        self._of_replica[replica] = session_id
        return session

    def close(self, session_id: int) -> None:
        session = self._sessions.pop(session_id, None)
        if session is not None and self._of_replica.get(session.replica) == session_id:
            del self._of_replica[session.replica]

    def resume(self, session_id: int, epoch: int, replica: int, version: int) -> FetchSession:
        """The session an incremental request continues, or Kafka's error for it."""
        session = self._sessions.get(session_id)
        if session is None or session.replica != replica or session.version != version:
            raise KafkaError(ErrorCode.fetch_session_id_not_found, f"no fetch session {session_id}")
        if epoch != session.epoch:
            raise KafkaError(
                ErrorCode.invalid_fetch_session_epoch,
                f"fetch session {session_id} expects epoch {session.epoch}, not {epoch}",
            )
        return session


def session_for(
    sessions: FetchSessions, replica: int, version: int, request: Any
) -> tuple[FetchSession | None, bool]:
    """The session a fetch runs in and whether it is a full fetch (every partition asked
    for is in the request). Raises KafkaError for an unknown session or a wrong epoch."""
    if version < 7:
        return None, True
    session_id, epoch = request.session_id, request.session_epoch
    if replica < 0:
        if session_id != 0 and epoch > 0:  # continuing a session it was never given
            raise KafkaError(ErrorCode.fetch_session_id_not_found, f"no fetch session {session_id}")
        return None, True  # consumers get no session (id 0): every fetch is full
    if epoch == FINAL_EPOCH:
        sessions.close(session_id)
        return None, True
    if epoch == INITIAL_EPOCH:
        sessions.close(session_id)
        return sessions.open(replica, version), True
    return sessions.resume(session_id, epoch, replica, version), False
