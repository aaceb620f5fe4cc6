"""The durable form of share-group membership in `__consumer_offsets` (Kafka 4.2 keeps a
share group's metadata there, in the group's partition, as it does a consumer group's).

Two kinds of records, under Kafka's key versions, so compaction keeps the newest of each
and a null value deletes it:

    group key   int16 version=11 (Kafka's ShareGroupMetadataKey), string group
    member key  int16 version=10 (Kafka's ShareGroupMemberMetadataKey), string group,
                string member

    group value v0   int32 group epoch
    member value v0  string client id, string client host, nullable string rack id,
                     array of string subscribed topics, int32 member epoch,
                     array of assigned (string topic, array of int32 partitions)

Kafka spreads a member over its metadata, target and current assignment records; one
record per member keeps each write self-contained (as consumer_records.py does for
consumer groups), so the log replays to the state of the last write. The values are
Onceflow's own layout, in the conventions of `coordinator/group/offsets.py`.
"""

from __future__ import annotations

import logging
import struct
from collections import defaultdict
from collections.abc import Iterable
from typing import NamedTuple

from onceflow.coordinator.group.offsets import (
    RecordReader,
    TopicPartition,
    corrupt,
    encode_nullable_string,
    encode_string,
)
from onceflow.coordinator.share.group import ShareGroup, ShareMember
from onceflow.errors import KafkaError

log = logging.getLogger(__name__)

SHARE_MEMBER_KEY_VERSION = 10
SHARE_GROUP_KEY_VERSION = 11
_VALUE_VERSION = 0
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class ShareGroupKey(NamedTuple):
    group: str


class ShareMemberKey(NamedTuple):
    group: str
    member: str


Record = tuple[bytes, bytes | None]


def group_record(group: ShareGroup) -> Record:
    key = _I16.pack(SHARE_GROUP_KEY_VERSION) + encode_string(group.group_id)
    return key, _I16.pack(_VALUE_VERSION) + _I32.pack(group.epoch)


def group_tombstone(group_id: str) -> Record:
    return _I16.pack(SHARE_GROUP_KEY_VERSION) + encode_string(group_id), None


def _member_key(group_id: str, member_id: str) -> bytes:
    return _I16.pack(SHARE_MEMBER_KEY_VERSION) + encode_string(group_id) + encode_string(member_id)


def member_record(group_id: str, member: ShareMember) -> Record:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for tp in sorted(member.assignment):
        by_topic[tp.topic].append(tp.partition)
    out = [
        _I16.pack(_VALUE_VERSION),
        encode_string(member.client_id),
        encode_string(member.client_host),
        encode_nullable_string(member.rack_id),
        _I32.pack(len(member.subscribed)),
        *(encode_string(t) for t in member.subscribed),
        _I32.pack(member.epoch),
        _I32.pack(len(by_topic)),
    ]
    for topic, partitions in by_topic.items():
        out.append(encode_string(topic) + _I32.pack(len(partitions)))
        out.extend(_I32.pack(p) for p in partitions)
    return _member_key(group_id, member.member_id), b"".join(out)


def member_tombstone(group_id: str, member_id: str) -> Record:
    return _member_key(group_id, member_id), None


def decode_key(data: bytes) -> ShareGroupKey | ShareMemberKey | None:
    """A share-group key, or None for any other kind of `__consumer_offsets` record."""
    reader = RecordReader(data)
    version = reader.i16()
    if version == SHARE_GROUP_KEY_VERSION:
        return ShareGroupKey(reader.string())
    if version == SHARE_MEMBER_KEY_VERSION:
        return ShareMemberKey(reader.string(), reader.string())
    return None


def decode_group_epoch(data: bytes) -> int:
    reader = RecordReader(data)
    if (version := reader.i16()) != _VALUE_VERSION:
        raise corrupt(f"share group value version {version} is not supported")
    return reader.i32()


def decode_member(member_id: str, data: bytes, deadline_ms: int) -> ShareMember:
    reader = RecordReader(data)
    if (version := reader.i16()) != _VALUE_VERSION:
        raise corrupt(f"share member value version {version} is not supported")
    client_id, client_host, rack_id = reader.string(), reader.string(), reader.nullable_string()
    subscribed = tuple(reader.string() for _ in range(_count(reader)))
    epoch = reader.i32()
    assignment: set[TopicPartition] = set()
    for _ in range(_count(reader)):
        topic = reader.string()
        assignment.update(TopicPartition(topic, reader.i32()) for _ in range(_count(reader)))
    return ShareMember(
        member_id,
        epoch,
        subscribed,
        rack_id,
        client_id,
        client_host,
        deadline_ms,
        frozenset(assignment),
    )


def _count(reader: RecordReader) -> int:
    n = reader.i32()
    if n < 0:
        raise corrupt(f"negative array length {n}")
    return n


def replay(
    entries: Iterable[tuple[bytes | None, bytes | None]], deadline_ms: int
) -> dict[str, ShareGroup]:
    """The share groups a `__consumer_offsets` partition holds (keys and values in log
    order; other records skipped). Members get `deadline_ms`: a session to come back in."""
    epochs: dict[str, int | None] = {}
    members: dict[str, dict[str, ShareMember | None]] = defaultdict(dict)
    for raw_key, value in entries:
        if raw_key is None:
            continue
        try:
            key = decode_key(raw_key)
            if isinstance(key, ShareGroupKey):
                epochs[key.group] = None if value is None else decode_group_epoch(value)
            elif isinstance(key, ShareMemberKey):
                members[key.group][key.member] = (
                    None if value is None else decode_member(key.member, value, deadline_ms)
                )
        except KafkaError as exc:  # one bad record must not keep the groups from loading
            log.warning("skipping an undecodable share-group record: %s", exc)
    groups: dict[str, ShareGroup] = {}
    for group_id, epoch in epochs.items():
        if epoch is None:
            continue
        live = {m: v for m, v in members.get(group_id, {}).items() if v is not None}
        groups[group_id] = ShareGroup(group_id, epoch, live)
    return groups
