"""The durable form of consumer-protocol groups (KIP-848) in `__consumer_offsets`.

Two kinds of records, under Kafka's key versions for the same things, so compaction keeps
the newest of each and a null value deletes it:

    group key   int16 version=3 (Kafka's ConsumerGroupMetadataKey), string group
    member key  int16 version=5 (Kafka's ConsumerGroupMemberMetadataKey), string group,
                string member

    group value v0   int32 group_epoch, int32 assignment_epoch, string assignor,
                     array of topics: string name, 16-byte topic id (zeros: none),
                     int32 partition count
    member value v0  nullable string instance_id, nullable string rack_id,
                     string client_id, string client_host, int32 rebalance_timeout,
                     array of string subscribed topics, nullable string regex,
                     nullable string server_assignor,
                     int8 state, int32 epoch, int32 previous_epoch, and three partition
                     sets (assigned, revoking, target), each an array of
                     (string topic, array of int32 partitions)
    member value v1  v0, then int8 1 and a classic member's int32 session timeout and
                     array of protocols (string name, bytes metadata); only classic
                     members are written as v1

Kafka spreads a member over three records (metadata, target and current assignment) to
write less per change; one record per member keeps every write self-contained, so the log
replays to the state of the last write whatever was written before. The values are
Onceflow's own layout (Kafka's are flexible structs), in the conventions of offsets.py.
"""

from __future__ import annotations

import struct
import uuid
from collections import defaultdict
from collections.abc import Iterable
from typing import NamedTuple

from onceflow.coordinator.group.consumer_group import (
    ClassicMetadata,
    ConsumerGroup,
    ConsumerMember,
)
from onceflow.coordinator.group.offsets import (
    RecordReader,
    TopicPartition,
    corrupt,
    encode_bytes,
    encode_nullable_string,
    encode_string,
)
from onceflow.coordinator.group.offsets import encode_group_key as encode_classic_group_key
from onceflow.coordinator.group.reconcile import MemberState, Partitions, Reconciliation
from onceflow.protocol.topic_ids import ZERO_UUID

CONSUMER_GROUP_KEY_VERSION = 3
CONSUMER_MEMBER_KEY_VERSION = 5
KEY_VERSIONS = frozenset({CONSUMER_GROUP_KEY_VERSION, CONSUMER_MEMBER_KEY_VERSION})
_VALUE_VERSION = 0
_CLASSIC_MEMBER_VERSION = 1
_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_STATES = list(MemberState)


class ConsumerGroupKey(NamedTuple):
    group: str


class ConsumerMemberKey(NamedTuple):
    group: str
    member: str


def encode_group_key(group: str) -> bytes:
    return _I16.pack(CONSUMER_GROUP_KEY_VERSION) + encode_string(group)


def encode_member_key(group: str, member: str) -> bytes:
    return _I16.pack(CONSUMER_MEMBER_KEY_VERSION) + encode_string(group) + encode_string(member)


def encode_group_value(group: ConsumerGroup) -> bytes:
    parts = [
        _I16.pack(_VALUE_VERSION),
        _I32.pack(group.group_epoch),
        _I32.pack(group.assignment_epoch),
        encode_string(group.assignor_name),
        _I32.pack(len(group.topics)),
    ]
    for name, (topic_id, count) in sorted(group.topics.items()):
        parts += [encode_string(name), (topic_id or ZERO_UUID).bytes, _I32.pack(count)]
    return b"".join(parts)


def encode_member_value(member: ConsumerMember, target: Partitions) -> bytes:
    recon = member.recon
    parts = [
        _I16.pack(_VALUE_VERSION if member.classic is None else _CLASSIC_MEMBER_VERSION),
        encode_nullable_string(member.instance_id),
        encode_nullable_string(member.rack_id),
        encode_string(member.client_id),
        encode_string(member.client_host),
        _I32.pack(member.rebalance_timeout_ms),
        _I32.pack(len(member.subscribed)),
        *(encode_string(t) for t in member.subscribed),
        encode_nullable_string(member.regex),
        encode_nullable_string(member.server_assignor),
        _I8.pack(_STATES.index(recon.state)),
        _I32.pack(recon.epoch),
        _I32.pack(recon.previous_epoch),
        _partitions(recon.assigned),
        _partitions(recon.revoking),
        _partitions(target),
    ]
    if member.classic is not None:
        parts += [
            _I8.pack(1),
            _I32.pack(member.classic.session_timeout_ms),
            _I32.pack(len(member.classic.protocols)),
        ]
        for name, metadata in member.classic.protocols:
            parts += [encode_string(name), encode_bytes(metadata)]
    return b"".join(parts)


def _partitions(partitions: Iterable[TopicPartition]) -> bytes:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for tp in partitions:
        by_topic[tp.topic].append(tp.partition)
    out = [_I32.pack(len(by_topic))]
    for topic in sorted(by_topic):
        numbers = sorted(by_topic[topic])
        out += [
            encode_string(topic),
            _I32.pack(len(numbers)),
            struct.pack(f">{len(numbers)}i", *numbers),
        ]
    return b"".join(out)


def change_records(
    group_id: str, group: ConsumerGroup, changes: tuple[bool, bool, set[str]]
) -> list[tuple[bytes, bytes | None]]:
    """The records that make the log say what the group is now, for `take_changes`'s
    changes: whole records of the changed members (tombstones for those gone)."""
    replaces_classic, group_changed, members = changes
    records: list[tuple[bytes, bytes | None]] = []
    if replaces_classic:
        records.append((encode_classic_group_key(group_id), None))
    if group_changed:
        records.append((encode_group_key(group_id), encode_group_value(group)))
    for member_id in sorted(members):
        member = group.members.get(member_id)
        value = None
        if member is not None:
            value = encode_member_value(member, group.target.get(member_id, frozenset()))
        records.append((encode_member_key(group_id, member_id), value))
    return records


def tombstones(group_id: str, group: ConsumerGroup) -> list[tuple[bytes, bytes | None]]:
    """Deletes the group's consumer-protocol records (it is deleted, or turns classic):
    its members', and those of members gone since the last write (a leave whose tombstone
    failed to append would otherwise come back as a member on reload)."""
    gone = set(group.members) | group.changed_members
    records: list[tuple[bytes, bytes | None]] = [(encode_group_key(group_id), None)]
    records += [(encode_member_key(group_id, m), None) for m in sorted(gone)]
    return records


def decode_key(version: int, data: bytes) -> ConsumerGroupKey | ConsumerMemberKey | None:
    reader = RecordReader(data)
    reader.i16()
    if version == CONSUMER_GROUP_KEY_VERSION:
        return ConsumerGroupKey(reader.string())
    if version == CONSUMER_MEMBER_KEY_VERSION:
        return ConsumerMemberKey(reader.string(), reader.string())
    return None


class MemberRecord(NamedTuple):
    member: ConsumerMember
    target: Partitions


def decode_group_value(data: bytes, group: ConsumerGroup) -> None:
    """Set the group-level fields of `group` from a group value."""
    reader = RecordReader(data)
    _check_version(reader.i16(), "consumer group")
    group.group_epoch = reader.i32()
    group.assignment_epoch = reader.i32()
    group.assignor_name = reader.string()
    group.topics = {}
    for _ in range(_count(reader.i32())):
        name = reader.string()
        raw_id = uuid.UUID(bytes=reader.take(16))
        group.topics[name] = (None if raw_id.int == 0 else raw_id, reader.i32())


def decode_member_value(member_id: str, data: bytes) -> MemberRecord:
    reader = RecordReader(data)
    version = reader.i16()
    _check_version(version, "consumer group member", _CLASSIC_MEMBER_VERSION)
    member = ConsumerMember(
        member_id=member_id,
        instance_id=reader.nullable_string(),
        rack_id=reader.nullable_string(),
        client_id=reader.string(),
        client_host=reader.string(),
    )
    member.rebalance_timeout_ms = reader.i32()
    member.subscribed = tuple(reader.string() for _ in range(_count(reader.i32())))
    member.regex = reader.nullable_string()
    member.server_assignor = reader.nullable_string()
    state = reader.i8()
    if not 0 <= state < len(_STATES):
        raise corrupt(f"member state {state}")
    epoch, previous = reader.i32(), reader.i32()
    assigned, revoking, target = (_read_partitions(reader) for _ in range(3))
    member.recon = Reconciliation(_STATES[state], epoch, previous, assigned, revoking)
    if version >= _CLASSIC_MEMBER_VERSION and reader.i8():
        session_timeout_ms = reader.i32()
        protocols = tuple((reader.string(), reader.bytes_()) for _ in range(_count(reader.i32())))
        member.classic = ClassicMetadata(session_timeout_ms, protocols)
    return MemberRecord(member, target)


def _read_partitions(reader: RecordReader) -> Partitions:
    out: set[TopicPartition] = set()
    for _ in range(_count(reader.i32())):
        topic = reader.string()
        out.update(TopicPartition(topic, reader.i32()) for _ in range(_count(reader.i32())))
    return frozenset(out)


def _count(n: int) -> int:
    if n < 0:
        raise corrupt(f"negative count {n}")
    return n


def _check_version(version: int, what: str, newest: int = _VALUE_VERSION) -> None:
    if not _VALUE_VERSION <= version <= newest:
        raise corrupt(f"{what} value version {version} is not supported")
