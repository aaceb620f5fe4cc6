"""Followers fetch in incremental fetch sessions (KIP-227): after one full Fetch a request
names only the partitions whose fetch state changed, the answer only those with news.

What must hold: a fetch offset the leader keeps for a partition left out of a request is
one the follower reported, and the follower reports only what is on its disk, so the high
watermark (the lowest such offset over the ISR) never passes data not durable on every
in-sync replica; a session the leader lost or a wrong epoch starts over with a full fetch
at once, not after a backoff.

The leader here is a socket that runs each request through the broker's own FetchSessions
and answers records for one partition at a time; the follower is the real ReplicaFetcher,
whose fsyncs the test holds and releases.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import struct
import uuid
from typing import Any

import pytest
from kio.index import load_payload_module
from kio.static.constants import EntityType

from onceflow.broker.fetch_sessions import FetchSession, FetchSessions, session_for
from onceflow.broker.purgatory import EVERYTHING
from onceflow.clock import ManualClock
from onceflow.errors import ErrorCode, KafkaError
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import (
    build,
    decode_request,
    encode_response,
    nested,
    request_type,
    response_type,
)
from onceflow.records.builder import build_batch
from onceflow.replication.fetcher import FetcherSettings, ReplicaFetcher
from onceflow.replication.follower_session import FollowerSession
from onceflow.replication.partition import LeaderAndIsr, Partition
from onceflow.storage.fs import SimFileSystem
from onceflow.storage.partition_log import LogConfig, PartitionLog
from onceflow.storage.recovery import open_partition

LEADER, LOCAL = 1, 2
TOPIC_ID = uuid.UUID("5b0c8c5e-3f5e-4f7e-9d7a-2c1f7f0b6a01")
PARTITIONS = 4


def _batch(offset: int) -> bytes:
    return build_batch(
        [(None, b"v%d" % offset, ())],
        timestamp_ms=1_000,
        base_offset=offset,
        partition_leader_epoch=0,
    )


# ---- the leader's half -------------------------------------------------------------------


def _fetch(
    session_id: int, epoch: int, offsets: dict[int, int], forget: tuple[int, ...] = ()
) -> Any:
    parts = tuple(
        _req(
            "FetchPartition",
            partition=p,
            current_leader_epoch=0,
            fetch_offset=o,
            last_fetched_epoch=-1,
            log_start_offset=0,
            partition_max_bytes=1 << 20,
        )
        for p, o in offsets.items()
    )
    return build(
        _request_type(),
        replica_id=LOCAL,
        replica_state=_req("ReplicaState", replica_id=LOCAL),
        max_wait=datetime.timedelta(0),
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=session_id,
        session_epoch=epoch,
        topics=(_req("FetchTopic", topic_id=TOPIC_ID, partitions=parts),) if parts else (),
        forgotten_topics_data=(_req("ForgottenTopic", topic_id=TOPIC_ID, partitions=forget),)
        if forget
        else (),
        rack_id="",
    )


def _req(name: str, /, **fields: Any) -> Any:
    """A Fetch v17 request entity."""
    module = load_payload_module(ApiKey.FETCH, 17, EntityType.request)
    return build(getattr(module, name), **fields)


def _request_type() -> Any:
    return request_type(ApiKey.FETCH, 17)


def _cached(sessions: FetchSessions, session_id: int) -> dict[int, int]:
    session = sessions.resume(session_id, sessions._sessions[session_id].epoch, LOCAL, 17)
    return {key[1]: entry.fetch.fetch_offset for key, entry in session.partitions.items()}


def test_a_partition_left_out_keeps_the_offset_the_follower_last_reported() -> None:
    sessions = FetchSessions()
    full = _fetch(0, 0, {0: 5, 1: 7, 2: 9})
    session, is_full = session_for(sessions, LOCAL, 17, full)
    assert session is not None and is_full and session.epoch == 1
    session.update(["t"], full, full=True)
    # Only partition 1 moved on; 2 is no longer fetched.
    step = _fetch(session.id, 1, {1: 8}, forget=(2,))
    same, is_full = session_for(sessions, LOCAL, 17, step)
    assert same is session and not is_full
    session.update(["t"], step, full=False)
    assert session.epoch == 2
    assert _cached(sessions, session.id) == {0: 5, 1: 8}


def test_an_unknown_session_or_a_wrong_epoch_is_refused_with_kafkas_codes() -> None:
    sessions = FetchSessions()
    session, _ = session_for(sessions, LOCAL, 17, _fetch(0, 0, {0: 0}))
    assert session is not None
    with pytest.raises(KafkaError) as refused:
        session_for(sessions, LOCAL, 17, _fetch(session.id + 1, 1, {}))
    assert refused.value.code is ErrorCode.fetch_session_id_not_found
    with pytest.raises(KafkaError) as refused:
        session_for(sessions, LOCAL, 17, _fetch(session.id, 2, {}))
    assert refused.value.code is ErrorCode.invalid_fetch_session_epoch
    # Another replica cannot use it, and a consumer is never given one.
    with pytest.raises(KafkaError):
        session_for(sessions, LOCAL + 1, 17, _fetch(session.id, 1, {}))
    assert session_for(sessions, -1, 17, _fetch(0, 0, {0: 0})) == (None, True)
    with pytest.raises(KafkaError) as refused:
        session_for(sessions, -1, 17, _fetch(session.id, 1, {}))
    assert refused.value.code is ErrorCode.fetch_session_id_not_found
    # A follower's new session replaces its old one: at most one per follower.
    again, _ = session_for(sessions, LOCAL, 17, _fetch(0, 0, {0: 0}))
    assert again is not None and again.id != session.id and len(sessions) == 1


def test_an_answer_holds_only_what_the_follower_was_not_told() -> None:
    sessions = FetchSessions()
    session, _ = session_for(sessions, LOCAL, 17, full := _fetch(0, 0, {0: 0, 1: 0}))
    assert session is not None
    session.update(["t"], full, full=True)
    assert session.worth_answering(("t", 0), (3, 3, 0), news=False)  # never told
    assert not session.worth_answering(("t", 0), (3, 3, 0), news=False)
    assert session.worth_answering(("t", 0), (4, 4, 0), news=False)  # the HW moved
    assert session.worth_answering(("t", 0), (4, 4, 0), news=True)  # records


# ---- the follower's half ------------------------------------------------------------------


def test_what_the_follower_was_told_stays_when_it_names_a_partition_again() -> None:
    """A request naming a partition again (a new fetch offset) leaves what the follower
    was told as it was: only news is answered, and a log start it was not told is news
    (handlers/fetch.py answers a parked fetch with it at once)."""
    sessions = FetchSessions()
    session, _ = session_for(sessions, LOCAL, 17, full := _fetch(0, 0, {0: 0}))
    assert session is not None
    session.update(["t"], full, full=True)
    assert session.worth_answering(("t", 0), (3, 3, 0), news=False)
    session.update(["t"], _fetch(session.id, 1, {0: 3}), full=False)
    assert _cached(sessions, session.id) == {0: 3}
    assert session.partitions[("t", 0)].told == (3, 3, 0)
    assert not session.worth_answering(("t", 0), (3, 3, 0), news=False)


def test_a_pass_looks_at_what_changed_and_at_everything_within_the_interval() -> None:
    """The purgatories tell the sessions what changed (note_change); a request's first
    pass looks at that and at what the previous request's last pass read, and at every
    partition after a change of everything or once the full-pass interval is over; a
    later pass after a timeout looks at every partition too."""
    sessions = FetchSessions()
    session, _ = session_for(sessions, LOCAL, 17, full := _fetch(0, 0, {0: 0, 1: 0, 2: 0}))
    assert session is not None
    session.update(["t"], full, full=True)
    assert session.first_look(1_000, 250) is None  # never fully passed
    session.carry = {("t", 2)}
    sessions.note_change(("t", 0))
    assert session.first_look(1_100, 250) == {("t", 0), ("t", 2)}
    assert session.first_look(1_200, 250) == {("t", 2)}  # taken: each change once
    assert session.first_look(1_250, 250) is None  # the interval is over
    assert session.first_look(1_300, 250) == {("t", 2)}
    sessions.note_change(EVERYTHING)  # a new leadership, say
    assert session.first_look(1_310, 250) is None
    sessions.note_change(("t", 1))
    assert session.next_look({("t", 2)}, 1_320, timed_out=False) == {("t", 1), ("t", 2)}
    assert session.next_look({("t", 2)}, 1_330, timed_out=True) is None
    assert session.full_pass_ms == 1_330
    sessions.close(session.id)
    sessions.note_change(("t", 0))  # a closed session is told nothing more
    assert session.changed == set()


def test_the_follower_names_only_what_changed_and_forgets_what_it_stopped_fetching() -> None:
    session = FollowerSession()
    wanted = {("t", p): (TOPIC_ID, 0, 10 * p, 0) for p in range(3)}
    sent, forgotten = session.plan(17, wanted)
    assert sent == wanted and forgotten == [] and (session.id, session.epoch) == (0, 0)
    session.answered(17, 42, sent, forgotten)
    assert (session.id, session.epoch) == (42, 1)
    moved = dict(wanted)
    moved[("t", 1)] = (TOPIC_ID, 0, 11, 0)
    del moved[("t", 2)]
    sent, forgotten = session.plan(17, moved)
    assert sent == {("t", 1): (TOPIC_ID, 0, 11, 0)}
    assert forgotten == [(("t", 2), (TOPIC_ID, 0, 20, 0))]
    session.answered(17, 42, sent, forgotten)
    assert session.epoch == 2
    assert session.plan(17, moved) == ({}, [])
    # Fetching by name instead of by id starts over in full.
    sent, _ = session.plan(12, moved)
    assert sent == moved and session.id == 0


# ---- both, over a socket ------------------------------------------------------------------


class _HeldDisk:
    """The follower's fsyncs: each waits until the test lets the disk catch up."""

    def __init__(self) -> None:
        self.durable: dict[int, int] = {}  # partition -> offsets below it are on disk
        self.release = asyncio.Event()

    async def durable_wait(self, plog: PartitionLog, offset: int) -> None:
        await self.release.wait()
        self.durable[plog.partition] = max(self.durable.get(plog.partition, 0), offset + 1)


class _Host:
    def __init__(self, disk: _HeldDisk) -> None:
        self.disk = disk

    def appended(self, plog: PartitionLog) -> None:
        pass

    def durable(self, plog: PartitionLog, offset: int, follower: bool = False) -> Any:
        return self.disk.durable_wait(plog, offset)


def _following(partition: int) -> Partition:
    clock = ManualClock(1_000_000)
    config = LogConfig(durable=True)
    plog, _ = open_partition(
        SimFileSystem(), f"/data/t-{partition}", "t", partition, config, clock, 0, False
    )
    replica = Partition(plog, LOCAL, clock, TOPIC_ID)
    replica.make_follower(LeaderAndIsr(LEADER, 0, (LEADER, LOCAL), (LEADER, LOCAL), 0))
    return replica


def _answer(
    request: Any,
    session_id: int,
    records: dict[int, bytes | None],
    hw: int,
    error: ErrorCode = ErrorCode.none,
) -> Any:
    version = 17
    datas = tuple(
        build(
            nested(ApiKey.FETCH, version, "PartitionData"),
            partition_index=p,
            error_code=error,
            high_watermark=hw,
            last_stable_offset=hw,
            log_start_offset=0,
            aborted_transactions=None,
            records=data,
        )
        for p, data in records.items()
    )
    topics = (
        (
            build(
                nested(ApiKey.FETCH, version, "FetchableTopicResponse"),
                topic_id=TOPIC_ID,
                partitions=datas,
            ),
        )
        if datas
        else ()
    )
    return build(
        response_type(ApiKey.FETCH, version),
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        session_id=session_id,
        responses=topics,
    )


async def _next_request(reader: asyncio.StreamReader) -> tuple[Any, Any]:
    """The leader's side: one framed request, decoded (header, body)."""
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return decode_request(await reader.readexactly(size))


async def _in_session(
    reader: asyncio.StreamReader, sessions: FetchSessions, requests: list[Any]
) -> tuple[Any, Any, FetchSession, bool]:
    """The next request (kept in `requests`) and the follower's session it opens or uses."""
    header, request = await _next_request(reader)
    requests.append(request)
    session, full = session_for(sessions, LOCAL, header.api_version, request)
    assert session is not None
    return header, request, session, full


async def _send(writer: asyncio.StreamWriter, header: Any, answer: Any) -> None:
    body = encode_response(header, answer)
    writer.write(struct.pack(">i", len(body)) + body)
    await writer.drain()


def test_the_leader_never_holds_an_offset_the_follower_has_not_made_durable() -> None:
    """Records go to one partition per answer; at every request, every fetch offset the
    leader's session holds (named in it or kept from before) is on the follower's disk."""

    async def main() -> None:
        disk = _HeldDisk()
        replicas = [_following(p) for p in range(PARTITIONS)]
        sessions = FetchSessions()
        requests: list[Any] = []
        beyond_disk: list[tuple[int, int]] = []
        done = asyncio.Event()
        leader_end = dict.fromkeys(range(PARTITIONS), 0)
        rounds = 3 * PARTITIONS

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while True:
                header, request, session, full = await _in_session(reader, sessions, requests)
                session.update(["t"] * len(request.topics), request, full=full)
                for (_, p), entry in session.partitions.items():
                    # What the high watermark would be computed from: all on disk.
                    if entry.fetch.fetch_offset > disk.durable.get(p, 0):
                        beyond_disk.append((p, entry.fetch.fetch_offset))
                if len(requests) > rounds:
                    done.set()
                    records: dict[int, bytes] = {}
                else:
                    target = len(requests) % PARTITIONS
                    offset = session.partitions[("t", target)].fetch.fetch_offset
                    if offset == leader_end[target]:
                        leader_end[target] += 1
                    records = {target: _batch(offset)}
                    disk.release.clear()
                    asyncio.get_running_loop().call_later(0.005, disk.release.set)
                await _send(writer, header, _answer(request, session.id, records, 0))

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        settings = FetcherSettings(backoff_ms=10, max_wait_ms=10)
        fetcher = ReplicaFetcher(LOCAL, LEADER, ("127.0.0.1", port), settings, _Host(disk))
        try:
            for replica in replicas:
                fetcher.follow(replica)
            await asyncio.wait_for(done.wait(), 30)
        finally:
            await fetcher.stop()
            server.close()
        assert beyond_disk == []
        # The first fetch named every partition; later ones only the one that moved.
        named = [sum(len(t.partitions) for t in r.topics) for r in requests]
        assert named[0] == PARTITIONS
        assert max(named[PARTITIONS:]) <= 1
        assert all(r.session_id != 0 for r in requests[PARTITIONS:])
        assert [r.log.log_end_offset for r in replicas] == [3] * PARTITIONS

    asyncio.run(main())


def test_a_session_the_leader_lost_starts_over_in_full_at_once() -> None:
    """The leader restarted (FETCH_SESSION_ID_NOT_FOUND): the next fetch is full and
    comes at once, not after replica.fetch.backoff.ms."""

    async def main() -> list[Any]:
        requests: list[Any] = []
        done = asyncio.Event()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while len(requests) < 3:
                header, request = await _next_request(reader)
                requests.append(request)
                answer = _answer(request, 7, {}, 0)
                if len(requests) == 2:
                    answer = dataclasses.replace(
                        answer, error_code=ErrorCode.fetch_session_id_not_found, session_id=0
                    )
                await _send(writer, header, answer)
            done.set()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        settings = FetcherSettings(backoff_ms=60_000, max_wait_ms=10)
        fetcher = ReplicaFetcher(LOCAL, LEADER, ("127.0.0.1", port), settings, _Host(_HeldDisk()))
        try:
            fetcher.follow(_following(0))
            await asyncio.wait_for(done.wait(), 10)
        finally:
            await fetcher.stop()
            server.close()
        return requests

    first, second, third = asyncio.run(main())
    assert (first.session_id, first.session_epoch) == (0, 0)
    assert (second.session_id, second.session_epoch) == (7, 1)
    assert not second.topics  # nothing changed: the session holds the partition
    assert (third.session_id, third.session_epoch) == (0, 0)
    assert [p.partition for t in third.topics for p in t.partitions] == [0]


def test_a_partition_the_leader_could_not_resolve_is_named_again() -> None:
    """The follower's first fetch of a new topic reached the leader before the leader knew
    the topic's id: UNKNOWN_TOPIC_ID, and the leader's session keeps nothing of it. The
    follower must name the partition again once its backoff is over; holding it as sent,
    it sent empty incremental fetches for ever and dropped out of the ISR (seen on a
    3-broker cluster: the ISR shrank to the leader alone 44 s after the topic was made)."""

    async def main() -> tuple[list[Any], int]:
        replica = _following(0)
        sessions = FetchSessions()
        requests: list[Any] = []
        done = asyncio.Event()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while True:
                header, request, session, full = await _in_session(reader, sessions, requests)
                known = len(requests) > 1  # the topic's id reaches the leader after one fetch
                names: list[str | None] = ["t" if known else None] * len(request.topics)
                session.update(names, request, full=full)
                held = session.partitions.get(("t", 0))
                if not known:
                    answer = _answer(request, session.id, {0: None}, 0, ErrorCode.unknown_topic_id)
                elif held is not None and held.fetch.fetch_offset == 0:
                    answer = _answer(request, session.id, {0: _batch(0)}, 0)
                else:
                    if held is not None or len(requests) > 50:
                        done.set()
                    answer = _answer(request, session.id, {}, 0)
                await _send(writer, header, answer)

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        settings = FetcherSettings(backoff_ms=10, max_wait_ms=10)
        disk = _HeldDisk()
        disk.release.set()
        fetcher = ReplicaFetcher(LOCAL, LEADER, ("127.0.0.1", port), settings, _Host(disk))
        try:
            fetcher.follow(replica)
            await asyncio.wait_for(done.wait(), 10)
        finally:
            await fetcher.stop()
            server.close()
        return requests, replica.log.log_end_offset

    requests, log_end = asyncio.run(main())
    named = [[p.partition for t in r.topics for p in t.partitions] for r in requests]
    assert named[0] == [0]
    assert named[1] == [0], f"the refused partition was not named again: {named[:5]}"
    assert log_end == 1
