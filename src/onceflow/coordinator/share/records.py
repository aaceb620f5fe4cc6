"""The `__share_group_state` record format: one share-partition's durable state.

The topic is compacted and keyed by (group, topic id, partition), so its last record is
the share-partition's whole state: a snapshot (Kafka's ShareSnapshot; Kafka also writes
ShareUpdate deltas between snapshots, which the bounded in-flight window makes needless
here). A null value (tombstone) deletes the state (DeleteShareGroupState, DeleteGroups).

    key   = version:int16 (0) | group:str16 | topic id:16 bytes | partition:int32
    value = version:int16 (0) | state epoch:int32 | start offset:int64 | batches:int32 |
            per batch: first:int64 last:int64 state:int8 delivery count:int16

A transactional acknowledgement (Onceflow's TxnShareAcknowledge) is key version 2 (the
share-partition's key) in a transactional batch of its producer, with the ranges and the
states they take: it applies when the producer's COMMIT marker follows, never otherwise.

    txn value = ranges:int32 | per range: first:int64 last:int64 state:int8

A group's configs (the GROUP config resource: share.auto.offset.reset, ...) are kept in the
same topic, in the group's partition, as key version 1 (the group id) and a JSON object.
"""

from __future__ import annotations

import json
import struct
import uuid
from typing import NamedTuple

from onceflow.coordinator.share.partition import StateBatch
from onceflow.coordinator.share.state import RecordState

KEY_VERSION = 0
GROUP_CONFIG_KEY_VERSION = 1
TXN_UPDATE_KEY_VERSION = 2
VALUE_VERSION = 0
_H = struct.Struct(">h")
_KEY_TAIL = struct.Struct(">16si")
_VALUE_HEAD = struct.Struct(">hiqi")
_BATCH = struct.Struct(">qqbh")


class ShareKey(NamedTuple):
    group_id: str
    topic_id: uuid.UUID
    partition: int

    def coordinator_key(self) -> str:
        """Kafka's share coordinator key: group:topicId:partition (FindCoordinator type 2)."""
        return f"{self.group_id}:{self.topic_id}:{self.partition}"


class ShareSnapshot(NamedTuple):
    state_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...]


class CorruptShareRecord(ValueError):
    pass


class GroupConfigKey(NamedTuple):
    group_id: str


def encode_group_config(
    group_id: str, configs: dict[str, str] | None
) -> tuple[bytes, bytes | None]:
    group = group_id.encode()
    key = _H.pack(GROUP_CONFIG_KEY_VERSION) + _H.pack(len(group)) + group
    value = None if configs is None else json.dumps(configs, sort_keys=True).encode()
    return key, value


def decode_group_config_value(data: bytes) -> dict[str, str]:
    try:
        value = json.loads(data)
    except ValueError as exc:
        raise CorruptShareRecord(f"bad group config value: {exc}") from exc
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise CorruptShareRecord("bad group config value")
    return value


class TxnUpdateKey(NamedTuple):
    key: ShareKey


_RANGE = struct.Struct(">qqb")
_COUNT = struct.Struct(">i")
Ranges = tuple[tuple[int, int, RecordState], ...]


def encode_txn_update(key: ShareKey, ranges: Ranges) -> tuple[bytes, bytes]:
    raw_key = _H.pack(TXN_UPDATE_KEY_VERSION) + encode_key(key)[2:]
    value = _COUNT.pack(len(ranges)) + b"".join(
        _RANGE.pack(first, last, int(state)) for first, last, state in ranges
    )
    return raw_key, value


def decode_txn_value(data: bytes) -> Ranges:
    try:
        (count,) = _COUNT.unpack_from(data, 0)
        if len(data) != _COUNT.size + count * _RANGE.size:
            raise CorruptShareRecord("bad transactional share update")
        return tuple(
            (first, last, RecordState(state))
            for first, last, state in _RANGE.iter_unpack(data[_COUNT.size :])
        )
    except (struct.error, ValueError) as exc:
        raise CorruptShareRecord(f"bad transactional share update: {exc}") from exc


def encode_key(key: ShareKey) -> bytes:
    group = key.group_id.encode()
    return (
        _H.pack(KEY_VERSION)
        + _H.pack(len(group))
        + group
        + _KEY_TAIL.pack(key.topic_id.bytes, key.partition)
    )


def decode_key(data: bytes) -> ShareKey | GroupConfigKey | TxnUpdateKey:
    try:
        (version,) = _H.unpack_from(data, 0)
        (length,) = _H.unpack_from(data, 2)
        group = data[4 : 4 + length].decode()
        if version == GROUP_CONFIG_KEY_VERSION and len(data) == 4 + length:
            return GroupConfigKey(group)
        topic, partition = _KEY_TAIL.unpack_from(data, 4 + length)
        if version == TXN_UPDATE_KEY_VERSION and len(data) == 4 + length + _KEY_TAIL.size:
            return TxnUpdateKey(ShareKey(group, uuid.UUID(bytes=topic), partition))
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptShareRecord(f"bad share state key: {exc}") from exc
    if version != KEY_VERSION or len(data) != 4 + length + _KEY_TAIL.size:
        raise CorruptShareRecord(f"bad share state key version {version}")
    return ShareKey(group, uuid.UUID(bytes=topic), partition)


def encode_value(snapshot: ShareSnapshot) -> bytes:
    parts = [
        _VALUE_HEAD.pack(
            VALUE_VERSION, snapshot.state_epoch, snapshot.start_offset, len(snapshot.batches)
        )
    ]
    parts.extend(
        _BATCH.pack(b.first, b.last, int(b.state), b.delivery_count) for b in snapshot.batches
    )
    return b"".join(parts)


def decode_value(data: bytes) -> ShareSnapshot:
    try:
        version, epoch, start, count = _VALUE_HEAD.unpack_from(data, 0)
        if version != VALUE_VERSION or len(data) != _VALUE_HEAD.size + count * _BATCH.size:
            raise CorruptShareRecord(f"bad share state value (version {version})")
        batches = tuple(
            StateBatch(first, last, RecordState(state), delivered)
            for first, last, state, delivered in _BATCH.iter_unpack(data[_VALUE_HEAD.size :])
        )
    except (struct.error, ValueError) as exc:
        raise CorruptShareRecord(f"bad share state value: {exc}") from exc
    return ShareSnapshot(epoch, start, batches)
