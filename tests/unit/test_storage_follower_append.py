"""A follower's log: appending its leader's bytes as they are, truncating a divergent tail,
starting over past the leader's log start, and handing the high watermark to replication.

The leader here is a PartitionLog driven like a broker drives it (client batches,
transaction markers, leader epochs); the follower copies it the way a replica fetcher
does, and must end with the same files, the same producer state, the same last stable
offset and the same aborted transactions, so that it can take over as leader.
"""

from __future__ import annotations

import errno

import pytest

from onceflow.clock import ManualClock
from onceflow.errors import ErrorCode, KafkaError
from onceflow.records.batch import (
    CRC_OFFSET,
    MAGIC_OFFSET,
    scan_batches,
    validate_produced_batches,
)
from onceflow.records.builder import build_batch
from onceflow.records.control import ControlType, build_control_batch
from onceflow.storage.failures import LogOffline, OutOfSpace
from onceflow.storage.follower import InvalidReplicaData, UnexpectedAppendOffset
from onceflow.storage.fs import Fault, SimFileSystem, SimulatedCrash
from onceflow.storage.partition_log import AppendResult, LogConfig, PartitionLog
from onceflow.storage.recovery import open_partition

DIR = "/data/t-0"
IDEMPOTENT, COMMITTED, ABORTED, OPEN = 11, 22, 33, 44  # producer ids
SEGMENT_BYTES = 700


def open_log(fs: SimFileSystem, **overrides: int | bool) -> PartitionLog:
    settings: dict[str, int | bool] = {"index_interval_bytes": 150, "segment_bytes": SEGMENT_BYTES}
    settings.update(overrides)
    config = LogConfig(**settings)  # type: ignore[arg-type]
    plog, _ = open_partition(fs, DIR, "t", 0, config, ManualClock(1_000_000), 0, False)
    return plog


def batch(
    pid: int = -1, seq: int = -1, count: int = 1, txn: bool = False, value: bytes = b"x"
) -> bytes:
    return build_batch(
        [(b"k%d" % i, value * 30, ()) for i in range(count)],
        timestamp_ms=1_000_000,
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=seq,
        transactional=txn,
    )


def produce(plog: PartitionLog, data: bytes) -> AppendResult:
    return plog.append_batches(data, validate_produced_batches(data, 1 << 20))


def leader_history(plog: PartitionLog) -> None:
    """Plain and idempotent data, a committed, an aborted and an open transaction, and
    three leader epochs, over several segments."""
    produce(plog, batch(count=2))
    produce(plog, batch(IDEMPOTENT, 0, count=2))
    produce(plog, batch(IDEMPOTENT, 2))
    plog.leader_epoch = 2
    produce(plog, batch(COMMITTED, 0, txn=True))
    produce(plog, batch(ABORTED, 0, count=3, txn=True))
    produce(plog, batch(count=1, value=b"y"))
    produce(plog, batch(COMMITTED, 1, txn=True))
    plog.append_marker(COMMITTED, 0, coordinator_epoch=1, commit=True)
    plog.leader_epoch = 3
    produce(plog, batch(OPEN, 0, txn=True))  # still open when ABORTED's marker lands
    plog.append_marker(ABORTED, 0, coordinator_epoch=1, commit=False)
    produce(plog, batch(IDEMPOTENT, 3, count=2))
    produce(plog, batch(count=2, value=b"z"))


def make_leader(**overrides: int | bool) -> tuple[SimFileSystem, PartitionLog]:
    fs = SimFileSystem(seed=1)
    plog = open_log(fs, **overrides)
    leader_history(plog)
    plog.flush()
    return fs, plog


def stream(plog: PartitionLog) -> bytes:
    return b"".join(s.read_bytes(0, s.size) for s in plog.segments)


def fetch(leader: PartitionLog, follower: PartitionLog, max_bytes: int = 1 << 20) -> bytes:
    """What a fetch from the follower's log end returns (possibly ending in a partial
    batch), or b"" when it is caught up."""
    region = leader.read(follower.log_end_offset, max_bytes, leader.log_end_offset, True).region
    return b"" if region is None else region.read()


def follow(leader: PartitionLog, follower: PartitionLog, max_bytes: int = 1 << 20) -> int:
    rounds = 0
    while follower.log_end_offset < leader.log_end_offset:
        follower.append_as_follower(fetch(leader, follower, max_bytes))
        rounds += 1
        assert rounds < 1000
    return rounds


def assert_same_state(leader: PartitionLog, follower: PartitionLog) -> None:
    assert stream(follower) == stream(leader)
    assert follower.log_end_offset == leader.log_end_offset
    assert follower.producer_state.producers == leader.producer_state.producers
    assert follower.producer_state.ongoing == leader.producer_state.ongoing
    assert follower.epochs.entries == leader.epochs.entries
    end = leader.log_end_offset
    assert follower.aborted_between(0, end) == leader.aborted_between(0, end)
    follower.flush()
    leader.flush()
    assert follower.last_stable_offset == leader.last_stable_offset


# ---- copying a leader ------------------------------------------------------------------


def test_a_follower_fed_each_leader_segment_ends_with_identical_files() -> None:
    leader_fs, leader = make_leader()
    assert len(leader.segments) >= 3
    assert leader.epochs.entries == [(0, 0), (2, 5), (3, 12)]
    fs = SimFileSystem()
    follower = open_log(fs)
    for segment in leader.segments:
        result = follower.append_as_follower(segment.read_bytes(0, segment.size))
        assert (result.first_offset, result.last_offset) == (
            segment.base_offset,
            segment.next_offset - 1,
        )
    follower.flush()
    assert [s.base_offset for s in follower.segments] == [s.base_offset for s in leader.segments]
    names = leader_fs.listdir(DIR)
    assert fs.listdir(DIR) == names
    assert any(n.endswith(".txnindex") for n in names)
    assert any(n.endswith(".snapshot") for n in names)
    for name in names:
        path = f"{DIR}/{name}"
        assert fs.read_file(path) == leader_fs.read_file(path), f"{name} differs"
    assert_same_state(leader, follower)


@pytest.mark.parametrize("max_bytes", [1, 100, 333, 1 << 20])
def test_a_follower_fetching_in_any_sizes_ends_with_the_leaders_log(max_bytes: int) -> None:
    _, leader = make_leader()
    follower = open_log(SimFileSystem())
    rounds = follow(leader, follower, max_bytes)
    assert rounds > (1 if max_bytes < 1 << 20 else 0)
    assert_same_state(leader, follower)


def test_the_follower_keeps_the_leaders_bytes_and_epochs_as_they_are() -> None:
    _, leader = make_leader()
    follower = open_log(SimFileSystem())
    follower.leader_epoch = 99  # a follower's own epoch is never stamped on copied data
    follow(leader, follower)
    found, _ = scan_batches(stream(follower))
    assert {b.header.partition_leader_epoch for b in found} == {0, 2, 3}
    assert stream(follower) == stream(leader)


def test_a_follower_that_becomes_leader_deduplicates_a_retry_and_fences_gaps() -> None:
    _, leader = make_leader()
    follower = open_log(SimFileSystem())
    follow(leader, follower)
    follower.leader_epoch = 4
    follower.epochs.assign(4, follower.log_end_offset)
    # The producer's retry of its last batch, first sent to the old leader.
    retry = produce(follower, batch(IDEMPOTENT, 3, count=2))
    original = [
        b.header for b in scan_batches(stream(leader))[0] if b.header.producer_id == IDEMPOTENT
    ]
    assert retry.duplicate
    assert (retry.first_offset, retry.last_offset) == (
        original[-1].base_offset,
        original[-1].last_offset,
    )
    assert follower.log_end_offset == leader.log_end_offset, "nothing appended"
    with pytest.raises(KafkaError) as caught:
        produce(follower, batch(IDEMPOTENT, 7))
    assert caught.value.code is ErrorCode.out_of_order_sequence_number
    nxt = produce(follower, batch(IDEMPOTENT, 5))
    assert nxt.first_offset == leader.log_end_offset
    assert follower.epochs.entries[-1] == (4, leader.log_end_offset)


def test_a_follower_that_becomes_leader_finishes_the_open_transaction() -> None:
    _, leader = make_leader()
    follower = open_log(SimFileSystem())
    follow(leader, follower)
    follower.flush()
    open_at = follower.producer_state.ongoing[OPEN]
    assert follower.last_stable_offset == open_at < follower.high_watermark
    follower.leader_epoch = 4
    marker = follower.append_marker(OPEN, 0, coordinator_epoch=1, commit=False)
    follower.flush()
    assert follower.last_stable_offset == follower.log_end_offset
    assert (OPEN, open_at) in follower.aborted_between(0, follower.log_end_offset)
    assert follower.aborted_between(marker.first_offset, follower.log_end_offset) == [
        (OPEN, open_at)
    ]


def test_the_follower_writes_an_aborts_txnindex_entry_like_the_leader() -> None:
    _, leader = make_leader()
    follower = open_log(SimFileSystem())
    follow(leader, follower, max_bytes=1 << 20)  # the whole log in one append
    entries = [e for s in follower.segments for e in s.txn_index.entries]
    assert entries == [e for s in leader.segments for e in s.txn_index.entries]
    assert [(e.producer_id, e.first_offset, e.last_offset) for e in entries] == [(ABORTED, 6, 13)]
    # The stable offset recorded: where the LSO stood once the transaction ended, at the
    # start of the one still open (OPEN, at 12), as the leader recorded it.
    assert entries[0].last_stable_offset == 12


def test_a_marker_the_leader_wrote_is_taken_even_if_this_replica_would_refuse_it() -> None:
    """Kafka's REPLICATION origin: an older coordinator epoch in the leader's log is logged,
    not refused, or the follower could never copy past it."""

    def marker(kind: ControlType, coordinator_epoch: int, offset: int) -> bytes:
        return build_control_batch(
            kind,
            producer_id=OPEN,
            producer_epoch=0,
            coordinator_epoch=coordinator_epoch,
            timestamp_ms=5,
            base_offset=offset,
            partition_leader_epoch=1,
        )

    def txn_data(seq: int, offset: int) -> bytes:
        return build_batch(
            [(b"k", b"v", ())],
            timestamp_ms=5,
            base_offset=offset,
            partition_leader_epoch=1,
            producer_id=OPEN,
            producer_epoch=0,
            base_sequence=seq,
            transactional=True,
        )

    follower = open_log(SimFileSystem())
    follower.append_as_follower(txn_data(0, 0) + marker(ControlType.COMMIT, 5, 1))
    follower.append_as_follower(txn_data(1, 2) + marker(ControlType.ABORT, 3, 3))
    assert follower.producer_state.ongoing == {}
    assert follower.aborted_between(0, 4) == [(OPEN, 2)]
    follower.leader_epoch = 2
    with pytest.raises(KafkaError) as caught:  # as leader it refuses such a marker itself
        follower.append_marker(OPEN, 0, coordinator_epoch=1, commit=True)
    assert caught.value.code is ErrorCode.transaction_coordinator_fenced


# ---- checks on what is fetched ---------------------------------------------------------


def test_data_below_the_log_end_is_refused_with_its_offsets() -> None:
    _, leader = make_leader()
    follower = open_log(SimFileSystem())
    follow(leader, follower)
    before = stream(follower)
    with pytest.raises(UnexpectedAppendOffset) as caught:
        follower.append_as_follower(leader.segments[0].read_bytes(0, leader.segments[0].size))
    assert caught.value.code is ErrorCode.offset_out_of_range
    assert caught.value.first_offset == 0
    assert caught.value.last_offset == leader.segments[0].next_offset - 1
    assert stream(follower) == before


def test_a_leader_log_start_inside_the_first_batch_starts_the_follower_there() -> None:
    """Kafka's one legitimate UnexpectedAppendOffset: an empty follower log whose start
    (the leader's log start) falls inside the first batch the leader sends."""
    _, leader = make_leader()
    follower = open_log(SimFileSystem())
    follower.truncate_fully_and_start_at(1)  # the leader said its log starts at 1
    data = fetch(leader, follower)  # the batch holding offset 1 starts at 0
    with pytest.raises(UnexpectedAppendOffset) as caught:
        follower.append_as_follower(data)
    follower.truncate_fully_and_start_at(caught.value.first_offset)
    assert follower.append_as_follower(data).first_offset == 0
    follow(leader, follower)
    assert_same_state(leader, follower)


def test_a_gap_left_by_the_leaders_compaction_is_accepted() -> None:
    follower = open_log(SimFileSystem())
    follower.append_as_follower(build_batch([(b"a", b"1", ())], timestamp_ms=5, base_offset=0))
    result = follower.append_as_follower(
        build_batch([(b"b", b"2", ())], timestamp_ms=5, base_offset=10)
    )
    assert (result.first_offset, result.last_offset) == (10, 10)
    assert follower.log_end_offset == 11
    follower.flush()
    region = follower.read(5, 1 << 20, follower.high_watermark, True).region
    assert region is not None
    assert scan_batches(region.read())[0][0].header.base_offset == 10


def two_batches(first_base: int, second_base: int) -> bytes:
    a = build_batch([(b"a", b"1", ()), (b"a", b"2", ())], timestamp_ms=5, base_offset=first_base)
    b = build_batch([(b"b", b"3", ())], timestamp_ms=5, base_offset=second_base)
    return a + b


@pytest.mark.parametrize("second_base", [0, 1])
def test_offsets_that_do_not_rise_are_refused(second_base: int) -> None:
    follower = open_log(SimFileSystem())
    with pytest.raises(InvalidReplicaData):
        follower.append_as_follower(two_batches(0, second_base))
    assert follower.log_end_offset == 0 and stream(follower) == b""


def test_a_corrupt_batch_is_refused_whole() -> None:
    data = bytearray(two_batches(0, 2))
    data[-1] ^= 0xFF  # the second batch's last byte: its CRC no longer matches
    follower = open_log(SimFileSystem())
    with pytest.raises(InvalidReplicaData) as caught:
        follower.append_as_follower(data)
    assert caught.value.code is ErrorCode.corrupt_message
    assert follower.log_end_offset == 0, "not even the valid first batch"


def test_another_magic_is_refused() -> None:
    data = bytearray(two_batches(0, 2))
    second = len(data) - len(build_batch([(b"b", b"3", ())], timestamp_ms=5))
    data[second + MAGIC_OFFSET] = 1
    with pytest.raises(InvalidReplicaData):
        open_log(SimFileSystem()).append_as_follower(data)


def test_a_batch_cut_short_at_the_end_is_left_for_the_next_fetch() -> None:
    data = two_batches(0, 2)
    first_size = len(data) - len(build_batch([(b"b", b"3", ())], timestamp_ms=5))
    follower = open_log(SimFileSystem())
    result = follower.append_as_follower(data[:-5])
    assert (result.first_offset, result.last_offset) == (0, 1)
    for cut in (5, 20, 61):  # a fragment of the second batch's header, or the header alone
        nothing = follower.append_as_follower(data[first_size : first_size + cut])
        assert nothing.last_offset < nothing.first_offset == 2
    follower.append_as_follower(data[first_size:])
    assert stream(follower) == data


def test_the_crc_is_left_untouched() -> None:
    data = two_batches(3, 5)
    follower = open_log(SimFileSystem())
    follower.truncate_fully_and_start_at(3)
    follower.append_as_follower(data)
    assert stream(follower)[CRC_OFFSET : CRC_OFFSET + 4] == data[CRC_OFFSET : CRC_OFFSET + 4]
    assert stream(follower) == data


# ---- truncating a divergent tail -------------------------------------------------------


def test_a_divergent_tail_is_truncated_and_the_leaders_data_copied_over_it() -> None:
    """The follower led epoch 3 for a while (its own batches, an aborted transaction, a
    roll), the old leader went on in epoch 4 with other data. KIP-279: the follower asks
    where its latest epoch ends on the leader, truncates there, and copies from there."""
    leader = open_log(SimFileSystem())
    follower_fs = SimFileSystem()
    follower = open_log(follower_fs)
    produce(leader, batch(IDEMPOTENT, 0, count=2))
    leader.leader_epoch = 2
    produce(leader, batch(COMMITTED, 0, txn=True))
    produce(leader, batch(IDEMPOTENT, 2))
    follow(leader, follower)
    split = follower.log_end_offset
    # The follower leads epoch 3 (never replicated).
    follower.leader_epoch = 3
    follower.epochs.assign(3, split)
    produce(follower, batch(ABORTED, 0, count=2, txn=True))
    produce(follower, batch(IDEMPOTENT, 3, count=4, value=b"w"))
    follower.append_marker(ABORTED, 0, coordinator_epoch=1, commit=False)
    follower.append_marker(COMMITTED, 0, coordinator_epoch=1, commit=True)
    follower.roll()
    produce(follower, batch(count=3, value=b"v"))
    assert follower.aborted_between(0, follower.log_end_offset) == [(ABORTED, split)]
    # Meanwhile the leader went on in epoch 4.
    leader.leader_epoch = 4
    produce(leader, batch(COMMITTED, 1, txn=True))
    produce(leader, batch(IDEMPOTENT, 3))
    leader.append_marker(COMMITTED, 0, coordinator_epoch=2, commit=True)
    produce(leader, batch(OPEN, 0, count=2, txn=True))
    # OffsetsForLeaderEpoch: where does the follower's latest epoch end on the leader?
    asked = follower.epochs.latest_epoch
    assert asked == 3
    epoch, end = leader.epochs.end_offset_for(asked, leader.log_end_offset)
    assert (epoch, end) == (2, split)
    _, ours = follower.epochs.end_offset_for(epoch, follower.log_end_offset)
    assert follower.truncate_to(min(end, ours)) is True
    assert follower.log_end_offset == split
    assert follower.epochs.entries == [(0, 0), (2, 2)]
    assert follower.aborted_between(0, 1 << 40) == []
    assert ABORTED not in follower.producer_state.producers
    assert follower.producer_state.ongoing == {COMMITTED: 2}
    follow(leader, follower, max_bytes=200)
    assert_same_state(leader, follower)
    # A restart finds the same state in the files.
    follower.flush()
    reopened = open_log(follower_fs)
    assert_same_state(leader, reopened)


def test_truncating_below_the_log_start_empties_the_log_there() -> None:
    follower = open_log(SimFileSystem())
    follower.truncate_fully_and_start_at(5)
    assert follower.truncate_to(3) is True
    assert (follower.log_start_offset, follower.log_end_offset) == (3, 3)


def test_a_flush_planned_before_a_truncation_claims_nothing_after_it() -> None:
    _, leader = make_leader()
    follower = open_log(SimFileSystem())
    follow(leader, follower)
    follower.flush()
    end = follower.log_end_offset
    follower.append_as_follower(build_batch([(b"a", b"1", ())], timestamp_ms=5, base_offset=end))
    plan = follower.prepare_flush()
    assert plan is not None and plan.end_offset == end + 1
    plan.execute()
    follower.truncate_to(end)
    follower.append_as_follower(build_batch([(b"b", b"22", ())], timestamp_ms=5, base_offset=end))
    follower.complete_flush(plan)  # the round ran before the cut: it synced other bytes
    assert follower.flushed_offset == end
    assert follower.has_unflushed
    follower.flush()
    assert follower.flushed_offset == end + 1


# ---- starting over past the leader's log start ------------------------------------------


def test_truncate_fully_and_start_at_leaves_an_empty_log_there() -> None:
    fs = SimFileSystem()
    _, leader = make_leader()
    follower = open_log(fs)
    follow(leader, follower)
    follower.flush()
    assert follower.producer_state.snapshot_offsets()
    follower.truncate_fully_and_start_at(1000)
    assert (follower.log_start_offset, follower.log_end_offset) == (1000, 1000)
    assert follower.high_watermark == follower.flushed_offset == 1000
    assert follower.producer_state.producers == {} and follower.producer_state.ongoing == {}
    assert follower.epochs.entries == []
    assert fs.listdir(DIR) == [f"{1000:020d}.log"], "no snapshot, no epoch checkpoint left"
    follower.append_as_follower(
        build_batch([(b"a", b"1", ())], timestamp_ms=5, base_offset=1000, partition_leader_epoch=6)
    )
    assert follower.epochs.entries == [(6, 1000)]
    follower.flush()
    fs.crash()
    reopened = open_log(fs)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (1000, 1001)
    assert reopened.epochs.entries == [(6, 1000)]


def test_a_crash_at_any_step_of_truncate_fully_leaves_no_mixed_log() -> None:
    """Whatever survives is the old log, a suffix of it, or the new empty one, with a
    producer state that describes exactly what is there."""
    _, leader = make_leader()
    reference = open_log(SimFileSystem())
    follow(leader, reference)
    old = stream(reference)
    step = 1
    outcomes = set()
    while True:
        fs = SimFileSystem(seed=step)
        follower = open_log(fs)
        follow(leader, follower)
        follower.flush()
        follower.roll()
        fs.crash_at_step = fs.steps + step
        try:
            follower.truncate_fully_and_start_at(1000)
            finished = True
        except SimulatedCrash:
            finished = False
        fs.crash()
        reopened = open_log(fs)
        data = stream(reopened)
        if reopened.log_end_offset == 1000:
            assert data == b"" and reopened.producer_state.producers == {}
            outcomes.add("new")
        else:
            assert old.endswith(data), "a suffix of the old log"
            if data:
                outcomes.add("old" if data == old else "suffix")
            else:
                outcomes.add("empty")
            fresh = open_log(SimFileSystem())
            if data:
                fresh.truncate_fully_and_start_at(reopened.log_start_offset)
                fresh.append_as_follower(data)
            assert reopened.producer_state.producers == fresh.producer_state.producers
        if finished:
            break
        step += 1
    assert "new" in outcomes and "old" in outcomes


# ---- storage failures ------------------------------------------------------------------


def split_before_abort(leader: PartitionLog) -> tuple[bytes, bytes]:
    """The leader's bytes up to the batch before its ABORT marker, and from there on."""
    data = stream(leader)
    found, _ = scan_batches(data)
    index = next(
        i for i, b in enumerate(found) if b.header.is_control and b.header.producer_id == ABORTED
    )
    cut = found[index - 1].position
    return data[:cut], data[cut:]


def follower_before_abort(leader: PartitionLog, fs: SimFileSystem) -> tuple[PartitionLog, bytes]:
    head, tail = split_before_abort(leader)
    follower = open_log(fs, segment_bytes=1 << 20)
    follower.append_as_follower(head)
    follower.flush()
    return follower, tail


@pytest.mark.parametrize("path", [".log", ".txnindex"])
def test_out_of_space_during_a_follower_append_leaves_the_log_unchanged(path: str) -> None:
    _, leader = make_leader()
    fs = SimFileSystem()
    follower, chunk = follower_before_abort(leader, fs)
    files = {n: fs.read_file(f"{DIR}/{n}") for n in fs.listdir(DIR)}
    state = (
        follower.log_end_offset,
        dict(follower.producer_state.producers),
        dict(follower.producer_state.ongoing),
        follower.epochs.entries,
        follower.last_stable_offset,
    )
    assert follower.epochs.latest_epoch == 2, "the chunk brings epoch 3"
    fs.inject(Fault("write", path=path, error=errno.ENOSPC))
    with pytest.raises(OutOfSpace):
        follower.append_as_follower(chunk)
    assert follower.offline is None
    assert (
        follower.log_end_offset,
        dict(follower.producer_state.producers),
        dict(follower.producer_state.ongoing),
        follower.epochs.entries,
        follower.last_stable_offset,
    ) == state
    assert [e for s in follower.segments for e in s.txn_index.entries] == []
    assert {n: fs.read_file(f"{DIR}/{n}") for n in fs.listdir(DIR) if n in files} == files
    follower.append_as_follower(chunk)  # the fetcher's retry
    assert stream(follower) == stream(leader)
    assert follower.aborted_between(0, 1 << 40) == leader.aborted_between(0, 1 << 40)
    assert follower.epochs.entries == leader.epochs.entries


def test_an_io_error_during_a_follower_append_takes_the_log_offline() -> None:
    _, leader = make_leader()
    fs = SimFileSystem()
    follower, chunk = follower_before_abort(leader, fs)
    fs.inject(Fault("write", path=".log", error=errno.EIO))
    with pytest.raises(LogOffline):
        follower.append_as_follower(chunk)
    with pytest.raises(LogOffline):
        follower.append_as_follower(chunk)
    fs.faults.clear()
    fs.crash()
    recovered = open_log(fs, segment_bytes=1 << 20)
    follow(leader, recovered)
    assert_same_state(leader, recovered)


# ---- crashes -----------------------------------------------------------------------------


def test_a_follower_recovers_from_a_crash_and_catches_up() -> None:
    _, leader = make_leader()
    fs = SimFileSystem(seed=7)
    follower = open_log(fs)
    follow(leader, follower, max_bytes=300)
    assert follower.log_end_offset == leader.log_end_offset
    follower.truncate_to(9)
    follower.flush()
    follow(leader, follower, max_bytes=150)  # not flushed: a crash may tear it anywhere
    fs.crash()
    recovered = open_log(fs)
    assert 9 <= recovered.log_end_offset <= leader.log_end_offset
    assert stream(leader).startswith(stream(recovered))
    expected = [e for e in leader.epochs.entries if e.start_offset < recovered.log_end_offset]
    assert recovered.epochs.entries == expected
    follow(leader, recovered)
    assert_same_state(leader, recovered)


def test_a_crash_at_every_step_of_follower_appends_recovers_a_prefix() -> None:
    _, leader = make_leader()
    chunks: list[bytes] = []
    probe = open_log(SimFileSystem())
    while probe.log_end_offset < leader.log_end_offset:
        chunks.append(fetch(leader, probe, 400))
        probe.append_as_follower(chunks[-1])
    step = 1
    while True:
        fs = SimFileSystem(seed=step)
        follower = open_log(fs)
        fs.crash_at_step = fs.steps + step
        try:
            for chunk in chunks:
                follower.append_as_follower(chunk)
                if step % 2:
                    follower.flush()
            finished = True
        except SimulatedCrash:
            finished = False
        fs.crash()
        recovered = open_log(fs)
        assert stream(leader).startswith(stream(recovered)), f"step {step}"
        fresh = open_log(SimFileSystem())
        fresh.append_as_follower(stream(recovered))
        assert recovered.producer_state.producers == fresh.producer_state.producers
        assert recovered.producer_state.ongoing == fresh.producer_state.ongoing
        assert recovered.epochs.entries == fresh.epochs.entries
        end = recovered.log_end_offset
        assert recovered.aborted_between(0, end) == fresh.aborted_between(0, end)
        follow(leader, recovered)
        assert_same_state(leader, recovered)
        if finished:
            break
        step += 1
    assert step > 20


# ---- the high watermark under replication's control -----------------------------------


@pytest.mark.parametrize("durable", [True, False])
def test_with_replication_in_charge_appends_and_flushes_leave_the_hw_alone(
    durable: bool,
) -> None:
    plog = open_log(SimFileSystem(), durable=durable)
    plog.hw_follows_local = False
    for _ in range(3):
        produce(plog, batch(count=2))
    plog.flush()
    assert plog.flushed_offset == 6 and plog.high_watermark == 0
    assert plog.read(0, 1 << 20, plog.high_watermark, True).region is None
    assert plog.update_high_watermark(4) is True
    assert plog.update_high_watermark(3) is False, "never back"
    assert plog.high_watermark == 4
    region = plog.read(0, 1 << 20, plog.high_watermark, True).region
    assert region is not None
    assert [b.header.next_offset for b in scan_batches(region.read())[0]] == [2, 4]
    assert plog.update_high_watermark(100) is True
    assert plog.high_watermark == 6, "capped at the log end"


def test_set_high_watermark_may_go_back_within_the_log() -> None:
    plog = open_log(SimFileSystem(), segment_bytes=200)
    plog.hw_follows_local = False
    for _ in range(6):
        produce(plog, batch(count=1))
    assert len(plog.segments) > 2
    plog.update_high_watermark(6)
    assert plog.set_high_watermark(3) == 3
    region = plog.read(0, 1 << 20, plog.high_watermark, True).region
    assert region is not None
    assert scan_batches(region.read())[0][-1].header.next_offset <= 3
    for offset in range(0, 3):
        got = plog.read(offset, 1 << 20, plog.high_watermark, True).region
        assert got is not None
        assert all(b.header.next_offset <= 3 for b in scan_batches(got.read())[0])
    assert plog.set_high_watermark(-5) == 0
    assert plog.set_high_watermark(99) == 6


def test_the_local_hw_still_follows_flushes_by_default() -> None:
    plog = open_log(SimFileSystem())
    produce(plog, batch(count=2))
    assert plog.high_watermark == 0
    plog.flush()
    assert plog.high_watermark == 2
