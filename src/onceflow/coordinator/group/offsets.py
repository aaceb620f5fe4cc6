"""The records of `__consumer_offsets`: keys, values and the partition of a group.

The layout matches Kafka's, so the log cleaner can compact the topic (it keeps the newest
record per key, and a null value deletes the key) and Kafka's own tools can read it:

    offset commit key   int16 version=1, string group, string topic, int32 partition
    group metadata key  int16 version=2, string group

    offset value v3     int64 offset, int32 leader_epoch, string metadata, int64 commit_ts
    offset value v1     int64 offset, string metadata, int64 commit_ts, int64 expire_ts
    group value v3      string protocol_type, int32 generation, nullable string protocol,
                        nullable string leader, int64 current_state_ts, array of members:
                        string member_id, nullable string instance_id, string client_id,
                        string client_host, int32 rebalance_timeout, int32 session_timeout,
                        bytes subscription, bytes assignment

Strings carry an int16 length (-1 for null), bytes and arrays an int32 length, all big
endian. We write offset value v3, or v1 when a commit asked for an explicit retention (only
v1 can hold an expire timestamp), and group value v3; the readers accept versions 0-3.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

from onceflow.errors import ErrorCode, KafkaError
from onceflow.protocol.coordinator_key import coordinator_partition

OFFSETS_TOPIC = "__consumer_offsets"
OFFSET_KEY_VERSION = 1  # key version 0 has the same layout; Kafka reads both
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
OFFSET_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_VALUE_VERSION = 3
NO_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class TopicPartition(NamedTuple):
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """One committed offset, as stored in an offset commit value."""

    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""
    commit_timestamp_ms: int = NO_TIMESTAMP
    # Only commits that asked for their own retention (OffsetCommit v2-v4) have one.
    expire_timestamp_ms: int | None = None


@dataclass(frozen=True, slots=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes  # the member's metadata for the group's chosen protocol
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """A group's durable state: written when it stabilises or empties."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int
    members: tuple[MemberRecord, ...]


class OffsetKey(NamedTuple):
    group: str
    topic: str
    partition: int


class GroupKey(NamedTuple):
    group: str


# ---------------------------------------------------------------- partitioning


def partition_for(group_id: str, num_partitions: int) -> int:
    """The `__consumer_offsets` partition that owns a group, exactly as Kafka picks it."""
    return coordinator_partition(group_id, num_partitions)


# ---------------------------------------------------------------- writing


def encode_string(value: str) -> bytes:
    raw = value.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise ValueError(f"string of {len(raw)} bytes does not fit an int16 length")
    return _I16.pack(len(raw)) + raw


def encode_nullable_string(value: str | None) -> bytes:
    return _I16.pack(-1) if value is None else encode_string(value)


def encode_bytes(value: bytes) -> bytes:
    return _I32.pack(len(value)) + value


def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    return (
        _I16.pack(OFFSET_KEY_VERSION)
        + encode_string(group)
        + encode_string(topic)
        + _I32.pack(partition)
    )


def encode_group_key(group: str) -> bytes:
    return _I16.pack(GROUP_KEY_VERSION) + encode_string(group)


def encode_offset_value(value: OffsetAndMetadata) -> bytes:
    if value.expire_timestamp_ms is not None:
        return b"".join(
            (
                _I16.pack(OFFSET_VALUE_VERSION_WITH_EXPIRY),
                _I64.pack(value.offset),
                encode_string(value.metadata),
                _I64.pack(value.commit_timestamp_ms),
                _I64.pack(value.expire_timestamp_ms),
            )
        )
    return b"".join(
        (
            _I16.pack(OFFSET_VALUE_VERSION),
            _I64.pack(value.offset),
            _I32.pack(value.leader_epoch),
            encode_string(value.metadata),
            _I64.pack(value.commit_timestamp_ms),
        )
    )


def _encode_member(member: MemberRecord) -> bytes:
    return b"".join(
        (
            encode_string(member.member_id),
            encode_nullable_string(member.group_instance_id),
            encode_string(member.client_id),
            encode_string(member.client_host),
            _I32.pack(member.rebalance_timeout_ms),
            _I32.pack(member.session_timeout_ms),
            encode_bytes(member.subscription),
            encode_bytes(member.assignment),
        )
    )


def encode_group_value(value: GroupRecord) -> bytes:
    parts = [
        _I16.pack(GROUP_VALUE_VERSION),
        encode_string(value.protocol_type),
        _I32.pack(value.generation),
        encode_nullable_string(value.protocol),
        encode_nullable_string(value.leader),
        _I64.pack(value.current_state_timestamp_ms),
        _I32.pack(len(value.members)),
    ]
    parts.extend(_encode_member(m) for m in value.members)
    return b"".join(parts)


# ---------------------------------------------------------------- reading


def corrupt(message: str) -> KafkaError:
    """An unreadable __consumer_offsets record (a CORRUPT_MESSAGE)."""
    return KafkaError(ErrorCode.corrupt_message, f"__consumer_offsets record: {message}")


class RecordReader:
    """A cursor over one key or value; every short read is a CORRUPT_MESSAGE, never IndexError."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def _take(self, size: int) -> bytes:
        end = self._pos + size
        if size < 0 or end > len(self._data):
            raise corrupt(f"needs {size} bytes at {self._pos} of {len(self._data)}")
        chunk = self._data[self._pos : end]
        self._pos = end
        return chunk

    def take(self, size: int) -> bytes:
        return self._take(size)

    def i8(self) -> int:
        return int.from_bytes(self._take(1), "big", signed=True)

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def nullable_string(self) -> str | None:
        size = self.i16()
        if size == -1:
            return None
        try:
            return self._take(size).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise corrupt(f"string is not UTF-8: {exc}") from exc

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise corrupt("null where a string is required")
        return value

    def bytes_(self) -> bytes:
        size = self.i32()
        return b"" if size == -1 else self._take(size)


def decode_key(data: bytes) -> OffsetKey | GroupKey | None:
    """The key of a `__consumer_offsets` record, or None for a kind we do not know.

    Newer Kafka releases store other record kinds (consumer protocol groups, share groups)
    in the same topic under higher key versions; they are skipped, not fatal.
    """
    reader = RecordReader(data)
    version = reader.i16()
    if version in (0, OFFSET_KEY_VERSION):
        return OffsetKey(reader.string(), reader.string(), reader.i32())
    if version == GROUP_KEY_VERSION:
        return GroupKey(reader.string())
    return None


def decode_offset_value(data: bytes) -> OffsetAndMetadata:
    reader = RecordReader(data)
    version = reader.i16()
    if version not in (0, 1, 2, 3):
        raise corrupt(f"offset commit value version {version} is not supported")
    offset = reader.i64()
    leader_epoch = reader.i32() if version >= 3 else NO_LEADER_EPOCH
    metadata = reader.string()
    commit_ts = reader.i64()
    expire_ts = reader.i64() if version == 1 else None
    if expire_ts == NO_TIMESTAMP:
        expire_ts = None
    return OffsetAndMetadata(offset, leader_epoch, metadata, commit_ts, expire_ts)


def decode_group_value(data: bytes) -> GroupRecord:
    reader = RecordReader(data)
    version = reader.i16()
    if version not in (0, 1, 2, 3):
        raise corrupt(f"group metadata value version {version} is not supported")
    protocol_type = reader.string()
    generation = reader.i32()
    protocol = reader.nullable_string()
    leader = reader.nullable_string()
    state_ts = reader.i64() if version >= 2 else NO_TIMESTAMP
    count = reader.i32()
    if count < 0:
        raise corrupt(f"negative member count {count}")
    members = []
    for _ in range(count):
        member_id = reader.string()
        instance_id = reader.nullable_string() if version >= 3 else None
        client_id = reader.string()
        client_host = reader.string()
        rebalance_timeout = reader.i32() if version >= 1 else None
        session_timeout = reader.i32()
        members.append(
            MemberRecord(
                member_id=member_id,
                group_instance_id=instance_id,
                client_id=client_id,
                client_host=client_host,
                # v0 had no rebalance timeout: the session timeout served as both.
                rebalance_timeout_ms=session_timeout
                if rebalance_timeout is None
                else rebalance_timeout,
                session_timeout_ms=session_timeout,
                subscription=reader.bytes_(),
                assignment=reader.bytes_(),
            )
        )
    return GroupRecord(protocol_type, generation, protocol, leader, state_ts, tuple(members))
