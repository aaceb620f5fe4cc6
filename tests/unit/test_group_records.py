"""__consumer_offsets record formats and the group -> partition hash."""

from __future__ import annotations

import struct

import pytest

from onceflow.coordinator.group.offsets import (
    GroupKey,
    GroupRecord,
    MemberRecord,
    OffsetAndMetadata,
    OffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
    partition_for,
)
from onceflow.errors import ErrorCode, KafkaError
from onceflow.protocol.coordinator_key import java_string_hash

# Computed with a JVM: String.hashCode() and abs(hash) % 50 as Kafka's partitionFor does.
JAVA_HASHES = [
    ("my-group", -1906497762, 12),
    ("", 0, 0),
    ("hello", 99162322, 22),
    ("polygenelubricants", -(2**31), 0),  # Integer.MIN_VALUE: Kafka's abs maps it to 0
    ("console-consumer-12345", 158455506, 6),
    ("grüße-\U0001f600", 347391577, 27),  # non-ASCII and a surrogate pair
    ("test-group", 627841412, 12),
    ("spark-kafka-source-abc", 2037676455, 5),
]


@pytest.mark.parametrize(("group", "java_hash", "partition"), JAVA_HASHES)
def test_partition_for_matches_kafka(group: str, java_hash: int, partition: int) -> None:
    assert java_string_hash(group) == java_hash
    assert partition_for(group, 50) == partition


def test_offset_key_layout() -> None:
    key = encode_offset_key("g", "topic", 7)
    assert key == struct.pack(">hh1sh5si", 1, 1, b"g", 5, b"topic", 7)
    assert decode_key(key) == OffsetKey("g", "topic", 7)
    # Key version 0 shares the layout.
    assert decode_key(b"\x00\x00" + key[2:]) == OffsetKey("g", "topic", 7)


def test_group_key_layout() -> None:
    key = encode_group_key("grp")
    assert key == struct.pack(">hh3s", 2, 3, b"grp")
    assert decode_key(key) == GroupKey("grp")


def test_unknown_key_versions_are_skipped() -> None:
    assert decode_key(struct.pack(">hh3s", 3, 3, b"grp")) is None


def test_offset_value_v3_round_trip() -> None:
    value = OffsetAndMetadata(42, leader_epoch=5, metadata="meta", commit_timestamp_ms=1000)
    raw = encode_offset_value(value)
    assert raw == struct.pack(">hqih4sq", 3, 42, 5, 4, b"meta", 1000)
    assert decode_offset_value(raw) == value


def test_offset_value_with_expiry_uses_v1() -> None:
    value = OffsetAndMetadata(42, -1, "", 1000, expire_timestamp_ms=5000)
    raw = encode_offset_value(value)
    assert raw == struct.pack(">hqhqq", 1, 42, 0, 1000, 5000)
    assert decode_offset_value(raw) == value


@pytest.mark.parametrize("version", [0, 2])
def test_old_offset_values_decode(version: int) -> None:
    raw = struct.pack(">hqh2sq", version, 9, 2, b"md", 77)
    assert decode_offset_value(raw) == OffsetAndMetadata(9, -1, "md", 77, None)


def member(member_id: str, instance: str | None = None) -> MemberRecord:
    return MemberRecord(member_id, instance, "client", "/127.0.0.1", 60000, 10000, b"sub", b"asg")


def test_group_value_v3_round_trip() -> None:
    record = GroupRecord("consumer", 3, "range", "m1", 1234, (member("m1"), member("m2", "i2")))
    raw = encode_group_value(record)
    assert raw[:2] == b"\x00\x03"
    assert decode_group_value(raw) == record


def test_empty_group_value_has_null_protocol_and_leader() -> None:
    record = GroupRecord("consumer", 4, None, None, 99, ())
    raw = encode_group_value(record)
    assert raw == struct.pack(">hh8sihhqi", 3, 8, b"consumer", 4, -1, -1, 99, 0)
    assert decode_group_value(raw) == record


def test_group_value_v0_decodes_with_session_timeout_as_rebalance_timeout() -> None:
    raw = (
        struct.pack(">hh1sih1sh2si", 0, 1, b"c", 2, 1, b"r", 2, b"m1", 1)
        + struct.pack(">h2sh1sh1si", 2, b"m1", 1, b"c", 1, b"h", 3000)
        + struct.pack(">i1si1s", 1, b"s", 1, b"a")
    )
    record = decode_group_value(raw)
    assert record.current_state_timestamp_ms == -1
    assert record.members == (MemberRecord("m1", None, "c", "h", 3000, 3000, b"s", b"a"),)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x00",
        b"\x00\x03\x00\x00",
        b"\x00\x09" + b"\x00" * 30,
        struct.pack(">hqih", 3, 1, 1, 10) + b"short",
    ],
)
def test_corrupt_offset_values_raise_kafka_error(raw: bytes) -> None:
    with pytest.raises(KafkaError) as info:
        decode_offset_value(raw)
    assert info.value.code is ErrorCode.corrupt_message


def test_corrupt_group_value_raises_kafka_error() -> None:
    raw = encode_group_value(GroupRecord("consumer", 1, "range", "m1", 0, (member("m1"),)))
    with pytest.raises(KafkaError):
        decode_group_value(raw[:-3])
