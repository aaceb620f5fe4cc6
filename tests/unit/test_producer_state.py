"""Producer state: the idempotence rules on append, expiry, and snapshots on disk.

Most tests go through `PartitionLog.append_batches`, the way Produce requests reach the
state, so a rejected batch is also checked to have appended nothing. Snapshot tests write
files into a SimFileSystem and damage them in every way a crash or a disk can.
"""

from __future__ import annotations

import copy
import struct
from dataclasses import astuple

import crc32c
import pytest

from onceflow.clock import ManualClock
from onceflow.errors import ErrorCode, KafkaError
from onceflow.records.batch import parse_header, validate_produced_batches
from onceflow.records.builder import build_batch
from onceflow.records.control import ControlType, build_control_batch
from onceflow.storage.fs import SimFileSystem
from onceflow.storage.partition_log import AppendResult, LogConfig, PartitionLog
from onceflow.storage.producer_state import (
    NO_MARKER,
    NO_TXN,
    SNAPSHOT_VERSION,
    BatchMetadata,
    ProducerEntry,
    ProducerStateManager,
    decode,
    encode,
)
from onceflow.storage.recovery import open_partition

DIR = "/data/t-0"
MAX_SEQ = (1 << 31) - 1
PID = 1000


def open_log(fs: SimFileSystem | None = None, *, clean: bool = False) -> PartitionLog:
    plog, _ = open_partition(
        fs or SimFileSystem(), DIR, "t", 0, LogConfig(), ManualClock(0), 0, clean
    )
    return plog


def batch(
    seq: int,
    count: int = 1,
    *,
    pid: int = PID,
    epoch: int = 0,
    ts: int = 1_000,
    txn: bool = False,
) -> bytes:
    return build_batch(
        [(None, b"v%d" % i, ()) for i in range(count)],
        timestamp_ms=ts,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=txn,
    )


def send(plog: PartitionLog, *batches: bytes) -> AppendResult:
    data = b"".join(batches)
    return plog.append_batches(data, validate_produced_batches(data, 1 << 20))


def rejected(plog: PartitionLog, *batches: bytes) -> ErrorCode:
    """The error a request gets; it must leave the log and the producer state untouched."""
    before = plog.log_end_offset
    state = {pid: entry.copy() for pid, entry in plog.producer_state.producers.items()}
    with pytest.raises(KafkaError) as info:
        send(plog, *batches)
    assert plog.log_end_offset == before, "a rejected request appended something"
    assert plog.producer_state.producers == state, "a rejected request changed the state"
    return info.value.code


def seqs(plog: PartitionLog, pid: int = PID) -> list[tuple[int, int]]:
    return [(b.first_seq, b.last_seq) for b in plog.producer_state.producers[pid].batches]


def full_replay(plog: PartitionLog) -> dict[int, ProducerEntry]:
    """Producer state rebuilt from the whole log: on a copy of the disk, every snapshot is
    deleted and the partition reopened."""
    assert isinstance(plog.fs, SimFileSystem)
    clone = copy.deepcopy(plog.fs)
    for name in clone.listdir(DIR):
        if name.endswith(".snapshot"):
            clone.remove(f"{DIR}/{name}")
    rebuilt, _ = open_partition(clone, DIR, "t", 0, LogConfig(), ManualClock(0), 0, False)
    assert rebuilt.log_end_offset == plog.log_end_offset
    return rebuilt.producer_state.producers


# ---- the rules on append -----------------------------------------------------------------


def test_new_producer_starts_at_sequence_zero() -> None:
    plog = open_log()
    result = send(plog, batch(0, 3, epoch=4))
    assert (result.first_offset, result.last_offset, result.duplicate) == (0, 2, False)
    entry = plog.producer_state.producers[PID]
    assert entry.epoch == 4
    assert list(entry.batches) == [BatchMetadata(0, 2, 2, 2, 1_000)]
    assert entry.last_timestamp == 1_000
    assert entry.txn_first_offset == NO_TXN


def test_in_order_batches_are_appended_and_only_the_last_five_remembered() -> None:
    plog = open_log()
    seq = 0
    for count in (1, 2, 3, 1, 2, 1, 4):
        first = plog.log_end_offset
        result = send(plog, batch(seq, count))
        assert (result.first_offset, result.last_offset) == (first, first + count - 1)
        seq += count
    assert plog.log_end_offset == seq
    assert seqs(plog) == [(3, 5), (6, 6), (7, 8), (9, 9), (10, 13)]


def test_other_producers_and_plain_batches_do_not_interfere() -> None:
    plog = open_log()
    send(plog, batch(0, pid=1))
    send(plog, build_batch([(None, b"plain", ())], timestamp_ms=5))
    send(plog, batch(0, 2, pid=2))
    send(plog, batch(1, pid=1))
    assert seqs(plog, 1) == [(0, 0), (1, 1)]
    assert seqs(plog, 2) == [(0, 1)]
    assert sorted(plog.producer_state.producers) == [1, 2]


def test_a_retry_of_each_of_the_last_five_batches_is_a_duplicate() -> None:
    plog = open_log()
    sent: list[tuple[bytes, AppendResult]] = []
    seq = 0
    for count in (2, 1, 3, 1, 2, 2, 1):
        data = batch(seq, count, ts=2_000 + seq)
        sent.append((data, send(plog, data)))
        seq += count
    end = plog.log_end_offset
    state = {pid: entry.copy() for pid, entry in plog.producer_state.producers.items()}
    for data, original in sent[-5:]:
        retry = send(plog, data)
        assert retry.duplicate
        assert (retry.first_offset, retry.last_offset) == (
            original.first_offset,
            original.last_offset,
        )
        assert plog.log_end_offset == end, "a duplicate appended something"
        assert plog.producer_state.producers == state, "a duplicate changed the state"
    # The producer carries on after its retries.
    assert not send(plog, batch(seq)).duplicate


def test_a_retry_of_the_sixth_newest_batch_is_out_of_order() -> None:
    plog = open_log()
    sent = [batch(seq) for seq in range(6)]
    for data in sent:
        send(plog, data)
    assert rejected(plog, sent[0]) == ErrorCode.out_of_order_sequence_number
    assert send(plog, sent[1]).duplicate


def test_a_batch_of_an_ended_transaction_is_never_a_duplicate() -> None:
    """The copier chaos test lost a committed transaction this way: librdkafka purged
    records at an abort whose lost responses hid that they were written, and gave their
    sequences to the next transaction at the same epoch. Matched as a retry, that
    transaction's batch was acknowledged without being written and its commit lost it."""
    for commit in (False, True):
        plog = open_log()
        send(plog, batch(0, 2, txn=True))
        retry_within = batch(2, 3, txn=True)
        first = send(plog, retry_within)
        assert send(plog, retry_within).duplicate  # a retry in its own transaction
        plog.append_marker(PID, 0, coordinator_epoch=0, commit=commit)
        end = plog.log_end_offset
        # The same sequences in the next transaction: new records, not that batch again.
        assert rejected(plog, batch(2, 3, txn=True)) == ErrorCode.out_of_order_sequence_number
        assert plog.log_end_offset == end
        # Sequences go on across the marker (transaction version 1 keeps the epoch).
        carry_on = send(plog, batch(5, 2, txn=True))
        assert not carry_on.duplicate and carry_on.first_offset == end
        assert send(plog, batch(5, 2, txn=True)).duplicate
        assert first.first_offset == 2
        # Recovery from the log alone rebuilds the same rule.
        assert full_replay(plog) == plog.producer_state.producers
        rebuilt = full_replay(plog)[PID]
        assert rebuilt.last_marker_offset == end - 1
        assert rebuilt.find_duplicate(parse_header(batch(2, 3, txn=True))) is None


def test_a_gap_is_out_of_order() -> None:
    plog = open_log()
    send(plog, batch(0, 2))
    assert rejected(plog, batch(3)) == ErrorCode.out_of_order_sequence_number
    assert rejected(plog, batch(1)) == ErrorCode.out_of_order_sequence_number  # overlaps
    assert send(plog, batch(2)).first_offset == 2


def test_a_stale_epoch_is_fenced() -> None:
    plog = open_log()
    old = batch(0, epoch=2)
    send(plog, old)
    send(plog, batch(0, epoch=3))
    assert rejected(plog, batch(1, epoch=2)) == ErrorCode.invalid_producer_epoch
    # A retry of a batch from the older epoch is fenced too, not answered as a duplicate.
    assert rejected(plog, old) == ErrorCode.invalid_producer_epoch


def test_a_new_epoch_must_start_at_sequence_zero() -> None:
    plog = open_log()
    send(plog, batch(0, 3, epoch=0))
    send(plog, batch(3, epoch=0))
    assert rejected(plog, batch(4, epoch=1)) == ErrorCode.out_of_order_sequence_number
    assert rejected(plog, batch(1, epoch=1)) == ErrorCode.out_of_order_sequence_number
    send(plog, batch(0, 2, epoch=1))
    entry = plog.producer_state.producers[PID]
    assert entry.epoch == 1
    assert seqs(plog) == [(0, 1)], "the old epoch's batches are forgotten"
    # The old epoch's batch 3 is no duplicate now, and sequence 2 follows on.
    assert send(plog, batch(2, epoch=1)).first_offset == plog.log_end_offset - 1


def test_an_unknown_producer_with_a_sequence_above_zero_is_unknown_producer_id() -> None:
    plog = open_log()
    assert rejected(plog, batch(7)) == ErrorCode.unknown_producer_id
    assert PID not in plog.producer_state.producers


def seed(plog: PartitionLog, first_seq: int, last_seq: int, pid: int = PID) -> None:
    """Pretend a producer has been sending for a long time: its last batch is this one."""
    entry = ProducerEntry(pid, 0, last_timestamp=1_000)
    entry.batches.append(BatchMetadata(first_seq, last_seq, 0, 0, 1_000))
    plog.producer_state.producers[pid] = entry


def test_sequences_wrap_at_the_int32_maximum() -> None:
    plog = open_log()
    seed(plog, MAX_SEQ - 5, MAX_SEQ - 2)
    wrapping = batch(MAX_SEQ - 1, 4)  # sequences MAX-1, MAX, 0, 1
    result = send(plog, wrapping)
    assert seqs(plog)[-1] == (MAX_SEQ - 1, 1)
    assert rejected(plog, batch(MAX_SEQ)) == ErrorCode.out_of_order_sequence_number
    retry = send(plog, wrapping)
    assert retry.duplicate
    assert (retry.first_offset, retry.last_offset) == (result.first_offset, result.last_offset)
    assert not send(plog, batch(2)).duplicate
    # Last sequence exactly at the maximum: the next batch starts at 0, never at 2^31.
    seed(plog, MAX_SEQ - 9, MAX_SEQ - 1, pid=2)
    send(plog, batch(MAX_SEQ, pid=2))
    assert rejected(plog, batch(1, pid=2)) == ErrorCode.out_of_order_sequence_number
    send(plog, batch(0, pid=2))
    assert seqs(plog, 2)[-2:] == [(MAX_SEQ, MAX_SEQ), (0, 0)]


def test_batches_of_one_request_are_checked_in_order_and_all_or_nothing() -> None:
    plog = open_log()
    send(plog, batch(0))
    # Both in order: both appended.
    result = send(plog, batch(1, 2), batch(3))
    assert (result.first_offset, result.last_offset) == (1, 3)
    assert seqs(plog) == [(0, 0), (1, 2), (3, 3)]
    # The second follows the first, not the stored state: a gap after the first fails all.
    assert rejected(plog, batch(4), batch(6)) == ErrorCode.out_of_order_sequence_number
    assert rejected(plog, batch(4), batch(0, epoch=1), batch(2, epoch=1)) == (
        ErrorCode.out_of_order_sequence_number
    )
    # A new producer and a bump inside one request: checked against the first batch.
    result = send(plog, batch(0, pid=7), batch(1, pid=7), batch(0, epoch=1), batch(1, epoch=1))
    assert seqs(plog, 7) == [(0, 0), (1, 1)]
    assert seqs(plog) == [(0, 0), (1, 1)]
    assert plog.producer_state.producers[PID].epoch == 1


def test_the_same_batch_twice_in_one_request_is_out_of_order_not_a_duplicate() -> None:
    # Kafka looks for duplicates in the stored state only. A copy of a batch that is in the
    # same request has no offsets yet: answering "duplicate" would acknowledge offsets that
    # were never written.
    plog = open_log()
    send(plog, batch(0))
    twice = batch(1)
    assert rejected(plog, twice, twice) == ErrorCode.out_of_order_sequence_number
    assert rejected(plog, batch(0, pid=9), batch(0, pid=9)) == (
        ErrorCode.out_of_order_sequence_number
    )


def test_replay_gives_the_state_the_appends_built() -> None:
    plog = open_log()
    send(plog, batch(0, 2, pid=1))
    send(plog, batch(0, pid=2, txn=True))
    send(plog, batch(2, pid=1, ts=9))
    send(plog, batch(0, pid=1, epoch=1, ts=11))
    send(plog, batch(1, pid=2, txn=True))
    assert full_replay(plog) == plog.producer_state.producers
    assert plog.producer_state.producers[2].txn_first_offset == 2


# ---- expiry ------------------------------------------------------------------------------


def test_expiry_removes_idle_producers_but_never_an_open_transaction() -> None:
    plog = open_log()
    send(plog, batch(0, pid=1, ts=1_000))
    send(plog, batch(0, pid=2, ts=1_000, txn=True))
    send(plog, batch(0, pid=3, ts=5_000))
    send(plog, batch(1, pid=1, ts=2_000))
    state = plog.producer_state
    assert state.producers[2].txn_first_offset == 1
    assert state.remove_expired(now_ms=5_999, expiration_ms=4_000) == 0
    assert state.remove_expired(now_ms=6_000, expiration_ms=4_000) == 1  # idle for 4 s
    assert sorted(state.producers) == [2, 3]
    assert state.remove_expired(now_ms=1_000_000, expiration_ms=4_000) == 1
    assert sorted(state.producers) == [2], "a producer with an open transaction stays"
    # An expired producer is unknown: its next sequence gets UNKNOWN_PRODUCER_ID.
    assert rejected(plog, batch(2, pid=1)) == ErrorCode.unknown_producer_id
    assert send(plog, batch(0, pid=1, epoch=1)).first_offset == plog.log_end_offset - 1


# ---- snapshots ---------------------------------------------------------------------------


def sample_state() -> dict[int, ProducerEntry]:
    idle = ProducerEntry(5, 0, coordinator_epoch=3, last_timestamp=77)
    busy = ProducerEntry(1 << 40, 32_767, last_timestamp=-1, txn_first_offset=123)
    for i in range(7):
        busy.batches.append(
            BatchMetadata((MAX_SEQ - 3 + i) % (1 << 31), i, 1_000 + i, i % 3, -5 + i)
        )
    one = ProducerEntry(0, 1, last_timestamp=1 << 60, last_marker_offset=(1 << 62) + 3)
    one.batches.append(BatchMetadata(0, 0, 0, 0, 1 << 60))
    return {e.producer_id: e for e in (idle, busy, one)}


def test_snapshot_encoding_round_trips() -> None:
    state = sample_state()
    assert decode(encode(state)) == state
    assert decode(encode({})) == {}
    restored = decode(encode(state))[1 << 40]
    assert restored.batches.maxlen == 5


def test_a_version_1_snapshot_is_read_without_markers() -> None:
    """Written before markers were remembered: the same producers, none with a marker."""
    state = sample_state()
    body = [struct.pack(">i", len(state))]
    for entry in sorted(state.values(), key=lambda e: e.producer_id):
        body.append(
            struct.pack(
                ">qhiqqb",
                entry.producer_id,
                entry.epoch,
                entry.coordinator_epoch,
                entry.last_timestamp,
                entry.txn_first_offset,
                len(entry.batches),
            )
        )
        body.extend(struct.pack(">iiqiq", *astuple(b)) for b in entry.batches)
    raw = b"".join(body)
    loaded = decode(struct.pack(">hI", 1, crc32c.crc32c(raw)) + raw)
    for entry in state.values():
        entry.last_marker_offset = NO_MARKER
    assert loaded == state


def test_take_and_load_snapshot() -> None:
    fs = SimFileSystem()
    fs.makedirs(DIR)
    manager = ProducerStateManager(fs, DIR)
    manager.producers = sample_state()
    manager.advance(42)
    manager.take_snapshot()
    assert fs.listdir(DIR) == [f"{42:020d}.snapshot"]
    loaded = ProducerStateManager(fs, DIR)
    assert loaded.load_snapshot(100) == 42
    assert loaded.map_end_offset == 42
    assert loaded.producers == sample_state()
    # Nothing usable: empty state from offset 0.
    assert ProducerStateManager(fs, "/elsewhere").load_snapshot(100) == 0


def _flip(data: bytes, bit: int) -> bytes:
    out = bytearray(data)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


def _wrong_version(data: bytes) -> bytes:
    # A well-formed file of a format this code does not know: the CRC is right.
    return (SNAPSHOT_VERSION + 1).to_bytes(2, "big") + data[2:]


def test_every_single_bit_flip_is_detected() -> None:
    data = encode(sample_state())
    for bit in range(len(data) * 8):
        with pytest.raises(ValueError):
            decode(_flip(data, bit))


def test_every_truncation_is_detected() -> None:
    data = encode(sample_state())
    for size in range(len(data)):
        with pytest.raises(ValueError):
            decode(data[:size])
    with pytest.raises(ValueError):
        decode(data + b"\x00")


DAMAGE = {
    "bit flip in the body": lambda d: _flip(d, 8 * 20 + 3),
    "bit flip in the crc": lambda d: _flip(d, 8 * 3),
    "bit flip in the version": lambda d: _flip(d, 1),
    "truncated": lambda d: d[: len(d) - 7],
    "header only": lambda d: d[:6],
    "wrong version": _wrong_version,
    "empty": lambda d: b"",
}


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
def test_a_bad_snapshot_is_skipped_deleted_and_the_older_one_used(damage: object) -> None:
    assert callable(damage)
    fs = SimFileSystem()
    plog = open_log(fs)
    send(plog, batch(0, 2, pid=1))
    plog.roll()  # snapshot at 2
    send(plog, batch(2, pid=1), batch(0, pid=2))
    plog.roll()  # snapshot at 4
    send(plog, batch(3, pid=1))
    plog.flush()
    expected = {pid: e.copy() for pid, e in plog.producer_state.producers.items()}
    state = plog.producer_state
    assert state.snapshot_offsets() == [2, 4]
    newest = state.snapshot_path(4)
    good_older = fs.read_file(state.snapshot_path(2))
    fs.write_file_atomic(newest, damage(fs.read_file(newest)))

    replayed = plog.rebuild_producer_state()
    assert state.snapshot_offsets() == [2], "the bad snapshot is deleted"
    assert fs.read_file(state.snapshot_path(2)) == good_older
    assert replayed == 3, "the log after the older snapshot is replayed"
    assert state.producers == expected
    assert state.map_end_offset == plog.log_end_offset


def test_with_every_snapshot_bad_the_whole_log_is_replayed() -> None:
    fs = SimFileSystem()
    plog = open_log(fs)
    for seq in range(3):
        send(plog, batch(seq))
        plog.roll()
    expected = full_replay(plog)
    for offset in plog.producer_state.snapshot_offsets():
        path = plog.producer_state.snapshot_path(offset)
        fs.write_file_atomic(path, fs.read_file(path)[:-1])
    assert plog.rebuild_producer_state() == 3
    assert plog.producer_state.snapshot_offsets() == []
    assert plog.producer_state.producers == expected


def test_only_the_newest_two_snapshots_are_kept() -> None:
    plog = open_log()
    for seq in range(5):
        send(plog, batch(seq))
        plog.roll()
        assert plog.producer_state.snapshot_offsets() == list(range(max(1, seq), seq + 2))
    plog.close()
    assert plog.producer_state.snapshot_offsets() == [4, 5]


def test_a_roll_snapshots_the_state_before_the_append_that_rolled() -> None:
    fs = SimFileSystem()
    plog, _ = open_partition(
        fs, DIR, "t", 0, LogConfig(segment_bytes=100), ManualClock(0), 0, False
    )
    send(plog, batch(0, 2))
    send(plog, batch(2))  # rolls first: the snapshot at 2 holds only the first batch
    assert [s.base_offset for s in plog.segments] == [0, 2]
    offsets = plog.producer_state.snapshot_offsets()
    assert offsets == [2]
    snap = decode(fs.read_file(plog.producer_state.snapshot_path(2)))
    assert [(b.first_seq, b.last_seq) for b in snap[PID].batches] == [(0, 1)]


def test_snapshots_above_the_log_end_are_removed() -> None:
    fs = SimFileSystem()
    plog = open_log(fs)
    send(plog, batch(0))
    plog.roll()  # 1
    send(plog, batch(1))
    send(plog, batch(2))
    plog.roll()  # 3
    send(plog, batch(3))
    plog.truncate_to(2)
    state = plog.producer_state
    assert state.snapshot_offsets() == [1]
    assert seqs(plog) == [(0, 0), (1, 1)]
    assert state.producers == full_replay(plog)
    assert send(plog, batch(2)).first_offset == 2, "the producer carries on at 2"
    # Directly: a snapshot above the offset asked for goes, the one below is loaded.
    manager = ProducerStateManager(fs, DIR)
    manager.advance(10)
    manager.take_snapshot()
    assert manager.load_snapshot(5) == 1
    assert manager.snapshot_offsets() == [1]


def test_clean_restart_loads_the_shutdown_snapshot_and_replays_nothing() -> None:
    fs = SimFileSystem()
    plog = open_log(fs)
    send(plog, batch(0, 2, pid=1))
    plog.roll()
    send(plog, batch(0, pid=2, txn=True), batch(2, pid=1))
    plog.flush()
    expected = {pid: e.copy() for pid, e in plog.producer_state.producers.items()}
    plog.close()
    plog, stats = open_partition(fs, DIR, "t", 0, LogConfig(), ManualClock(0), 4, True)
    assert stats.batches_replayed == 0
    assert plog.producer_state.producers == expected
    assert plog.producer_state.snapshot_offsets() == [2, 4]


def test_replay_adds_data_batches_and_markers_and_skips_plain_batches() -> None:
    manager = ProducerStateManager(SimFileSystem(), DIR)
    marker = build_control_batch(
        ControlType.COMMIT,
        producer_id=PID,
        producer_epoch=0,
        coordinator_epoch=4,
        timestamp_ms=1_500,
        base_offset=12,
    )
    data = batch(0, txn=True) + build_batch([(None, b"x", ())], timestamp_ms=1)
    headers = validate_produced_batches(data, 1 << 20)
    manager.replay(
        [
            (headers[0]._replace(base_offset=10), None),
            (headers[1]._replace(base_offset=11), None),
            (parse_header(marker), (False, 4)),
        ]
    )
    assert manager.map_end_offset == 13
    assert list(manager.producers) == [PID]
    entry = manager.producers[PID]
    assert list(entry.batches) == [BatchMetadata(0, 0, 10, 0, 1_000)]
    assert (entry.txn_first_offset, entry.coordinator_epoch) == (NO_TXN, 4)
