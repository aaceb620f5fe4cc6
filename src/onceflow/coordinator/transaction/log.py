"""The transaction log's record format, in the compacted topic `__transaction_state`.

Key (big-endian): version int16 = 0, transactional id (int16 length + UTF-8).
Value, version 1 (a null value is a tombstone: the id expired):
    version int16 = 1
    producer id int64, last producer id int64
    producer epoch int16, last producer epoch int16
    transaction timeout ms int32
    state int8 (TxnState: 0 Empty, 1 Ongoing, 2 PrepareCommit, 3 PrepareAbort,
                4 CompleteCommit, 5 CompleteAbort, 6 Dead, 7 PrepareEpochFence)
    partitions: int32 topic count, then per topic: name (int16 length + UTF-8),
                int32 partition count, int32 partitions
    last update timestamp ms int64, transaction start timestamp ms int64
Value, version 2: version 1's fields, then
    next producer id int64 (-1: none; set while an exhausted epoch rolls to a new id)
    client transaction version int8 (0, or 2: KIP-890 part 2, an epoch bump at every end)
Value, version 3: version 2's fields, then
    flags int8 (bit 0: two-phase commit, KIP-939: no timeout aborts the transactions)
    kept epoch int16 (-1: none; the epoch an open transaction's records carry once an
                      InitProducerId with keepPreparedTxn moved the client past it)
Each version is written only when a field it adds is set, so a record of a transaction
version 0 client without two-phase commit stays readable by an Onceflow that knows only
version 1, and one of a transaction version 2 client by one that knows version 2.

A transactional id maps to partition abs(Java String.hashCode(id)) % partition count, as in
Kafka; `onceflow.coordinator.group.offsets` has the same hash for groups.
"""

from __future__ import annotations

import struct
from collections import defaultdict

from onceflow.coordinator.transaction.metadata import TxnTransit
from onceflow.coordinator.transaction.state import TxnState

KEY_VERSION = 0
VALUE_VERSION = 1
VALUE_VERSION_TV2 = 2
VALUE_VERSION_2PC = 3
_TWO_PHASE = 0x01

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">hqqhhib")
_TAIL = struct.Struct(">qq")
_TV2_TAIL = struct.Struct(">qb")
_2PC_TAIL = struct.Struct(">bh")


class CorruptTxnRecord(ValueError):
    """A transaction-log record that does not parse."""


def _string(text: str) -> bytes:
    data = text.encode()
    return _I16.pack(len(data)) + data


def _read_string(buf: bytes, pos: int) -> tuple[str, int]:
    (size,) = _I16.unpack_from(buf, pos)
    pos += 2
    if size < 0 or pos + size > len(buf):
        raise CorruptTxnRecord("bad string length")
    return buf[pos : pos + size].decode(), pos + size


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + _string(transactional_id)


def decode_key(key: bytes) -> str:
    try:
        (version,) = _I16.unpack_from(key, 0)
        if version != KEY_VERSION:
            raise CorruptTxnRecord(f"unknown key version {version}")
        txn_id, end = _read_string(key, 2)
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptTxnRecord(str(exc)) from exc
    if end != len(key):
        raise CorruptTxnRecord("trailing bytes in key")
    return txn_id


def encode_value(t: TxnTransit) -> bytes:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, partition in sorted(t.partitions):
        by_topic[topic].append(partition)
    two_pc = t.two_phase or t.kept_epoch != -1
    tv2 = two_pc or t.client_version != 0 or t.next_producer_id != -1
    version = VALUE_VERSION_2PC if two_pc else VALUE_VERSION_TV2 if tv2 else VALUE_VERSION
    parts = [
        _HEAD.pack(
            version,
            t.producer_id,
            t.last_producer_id,
            t.producer_epoch,
            t.last_producer_epoch,
            t.timeout_ms,
            int(t.state),
        ),
        _I32.pack(len(by_topic)),
    ]
    for topic, partitions in by_topic.items():
        parts.append(_string(topic))
        parts.append(_I32.pack(len(partitions)))
        parts.extend(_I32.pack(p) for p in partitions)
    parts.append(_TAIL.pack(t.update_ms, t.start_ms))
    if tv2:
        parts.append(_TV2_TAIL.pack(t.next_producer_id, t.client_version))
    if two_pc:
        parts.append(_2PC_TAIL.pack(_TWO_PHASE if t.two_phase else 0, t.kept_epoch))
    return b"".join(parts)


_NEVER_LOGGED = frozenset({TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE})


def decode_value(transactional_id: str, value: bytes) -> TxnTransit:
    try:
        version, pid, last_pid, epoch, last_epoch, timeout, state = _HEAD.unpack_from(value, 0)
        if version not in (VALUE_VERSION, VALUE_VERSION_TV2, VALUE_VERSION_2PC):
            raise CorruptTxnRecord(f"unknown value version {version}")
        pos = _HEAD.size
        (topics,) = _I32.unpack_from(value, pos)
        pos += 4
        partitions: set[tuple[str, int]] = set()
        for _ in range(topics):
            topic, pos = _read_string(value, pos)
            (count,) = _I32.unpack_from(value, pos)
            pos += 4
            for _ in range(count):
                (p,) = _I32.unpack_from(value, pos)
                pos += 4
                partitions.add((topic, p))
        update_ms, start_ms = _TAIL.unpack_from(value, pos)
        pos += _TAIL.size
        next_pid, client_version = -1, 0
        if version >= VALUE_VERSION_TV2:
            next_pid, client_version = _TV2_TAIL.unpack_from(value, pos)
            pos += _TV2_TAIL.size
        flags, kept_epoch = 0, -1
        if version >= VALUE_VERSION_2PC:
            flags, kept_epoch = _2PC_TAIL.unpack_from(value, pos)
            pos += _2PC_TAIL.size
        txn_state = TxnState(state)
    except (struct.error, ValueError, UnicodeDecodeError) as exc:
        raise CorruptTxnRecord(str(exc)) from exc
    if pos != len(value):
        raise CorruptTxnRecord("trailing bytes in value")
    if txn_state in _NEVER_LOGGED:
        # Kafka keeps Dead (an expired id, logged as a tombstone) and PrepareEpochFence
        # in memory only: no transition leads out of them, so a loaded one would be stuck.
        raise CorruptTxnRecord(f"state {txn_state.display} is never written to the log")
    return TxnTransit(
        transactional_id,
        pid,
        last_pid,
        epoch,
        last_epoch,
        timeout,
        txn_state,
        frozenset(partitions),
        start_ms,
        update_ms,
        client_version,
        next_pid,
        bool(flags & _TWO_PHASE),
        kept_epoch,
    )
