"""A follower's Fetch request (v12 to v17) packed with struct, sans-IO.

A follower sends one on every round of its fetch session, so kio's generic writer (about
20 us a request here, most of a round's encoding) is replaced by this packing of the
fields a follower sets; tests/property/test_follower_fetch_props.py holds it byte for byte
to kio's encoding at every version. All these versions are flexible: compact arrays and
strings (length + 1 as an unsigned varint) and a tag buffer after each entity. Before v13
topics go by name, from v13 by id; before v15 the follower's id is `replica_id`, from v15
the tagged ReplicaState (tag 1).
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from onceflow.protocol.compact import compact_length, uvarint

LOWEST, HIGHEST = 12, 17
_TOP_BEFORE_15 = struct.Struct(">iiiibii")  # replica id, then as below
_TOP = struct.Struct(">iiibii")  # max wait, min bytes, max bytes, isolation, session, epoch
_PARTITION = struct.Struct(">iiqiqi")  # index, leader epoch, offset, last epoch, start, max
_REPLICA_STATE = struct.Struct(">iq")  # replica id, broker epoch (-1: none)
_I32 = struct.Struct(">i")
_NO_TAGS = b"\x00"
_NO_LAST_FETCHED_EPOCH = -1  # truncation is done by OffsetsForLeaderEpoch beforehand
# What a follower always asks: an answer as soon as one byte is there, records up to the log
# end (read_uncommitted), and no rack.
_MIN_BYTES = 1
_READ_UNCOMMITTED = 0
_NO_RACK = b"\x01"  # "" as a compact string


@dataclass(frozen=True, slots=True)
class FetchPartition:
    index: int
    leader_epoch: int
    fetch_offset: int
    log_start_offset: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class FetchTopic:
    name: str
    topic_id: uuid.UUID | None  # sent from v13 (by id), the name before
    partitions: tuple[FetchPartition, ...]


@dataclass(frozen=True, slots=True)
class ForgottenTopic:
    name: str
    topic_id: uuid.UUID | None
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class FollowerFetch:
    replica_id: int
    max_wait_ms: int
    max_bytes: int
    session_id: int
    session_epoch: int
    topics: tuple[FetchTopic, ...]
    forgotten: tuple[ForgottenTopic, ...]


def encode_body(version: int, fetch: FollowerFetch) -> bytes:
    """The request's body (after the request header) at `version` (12 to 17)."""
    if not LOWEST <= version <= HIGHEST:
        raise ValueError(f"a follower's Fetch is packed at v{LOWEST} to v{HIGHEST}, not v{version}")
    out = bytearray()
    if version < 15:
        out += _TOP_BEFORE_15.pack(
            fetch.replica_id, fetch.max_wait_ms, _MIN_BYTES, fetch.max_bytes,
            _READ_UNCOMMITTED, fetch.session_id, fetch.session_epoch,
        )  # fmt: skip
    else:
        out += _TOP.pack(
            fetch.max_wait_ms, _MIN_BYTES, fetch.max_bytes, _READ_UNCOMMITTED,
            fetch.session_id, fetch.session_epoch,
        )  # fmt: skip
    out += compact_length(len(fetch.topics))
    for topic in fetch.topics:
        _topic_key(out, version, topic.name, topic.topic_id)
        out += compact_length(len(topic.partitions))
        for p in topic.partitions:
            out += _PARTITION.pack(
                p.index, p.leader_epoch, p.fetch_offset, _NO_LAST_FETCHED_EPOCH,
                p.log_start_offset, p.max_bytes,
            )  # fmt: skip
            out += _NO_TAGS
        out += _NO_TAGS
    out += compact_length(len(fetch.forgotten))
    for gone in fetch.forgotten:
        _topic_key(out, version, gone.name, gone.topic_id)
        out += compact_length(len(gone.partitions))
        for index in gone.partitions:
            out += _I32.pack(index)
        out += _NO_TAGS
    out += _NO_RACK
    if version < 15:
        out += _NO_TAGS
    else:  # one tagged field: ReplicaState (tag 1), its own tag buffer empty
        state = _REPLICA_STATE.pack(fetch.replica_id, -1) + _NO_TAGS
        out += b"\x01\x01" + uvarint(len(state)) + state
    return bytes(out)


def _topic_key(out: bytearray, version: int, name: str, topic_id: uuid.UUID | None) -> None:
    if version >= 13:
        out += (topic_id or uuid.UUID(int=0)).bytes
    else:
        raw = name.encode()
        out += compact_length(len(raw))
        out += raw
