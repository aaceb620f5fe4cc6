"""Transaction markers: the one-record control batches that end a transaction in a partition.

Layout, as Kafka writes it: attributes transactional|control, the producer's id and epoch,
base sequence -1, and one record whose key is int16 version 0 + int16 type and whose value is
int16 version 0 + int32 coordinator epoch. Clients (kafka-python, aiokafka) check the CRC and
skip these batches, and read_committed consumers use them to drop aborted data.
"""

from __future__ import annotations

import struct
from enum import IntEnum

from onceflow.errors import ErrorCode, KafkaError
from onceflow.records.batch import NO_PARTITION_LEADER_EPOCH, NO_SEQUENCE, parse_header
from onceflow.records.builder import build_batch
from onceflow.records.record import decode_records

__all__ = ["ControlType", "build_control_batch", "parse_control_record"]

_KEY = struct.Struct(">hh")  # version, type
_VALUE = struct.Struct(">hi")  # version, coordinator epoch
_VERSION = 0


class ControlType(IntEnum):
    """Control record types of transaction markers (Kafka's other types are KRaft-only)."""

    ABORT = 0
    COMMIT = 1


def build_control_batch(
    control_type: ControlType,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp_ms: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A COMMIT or ABORT marker batch for one producer, one offset long."""
    key = _KEY.pack(_VERSION, ControlType(control_type))
    value = _VALUE.pack(_VERSION, coordinator_epoch)
    return build_batch(
        [(key, value, ())],
        timestamp_ms=timestamp_ms,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        transactional=True,
        control=True,
    )


def parse_control_record(
    batch: bytes | bytearray | memoryview, *, verify_crc: bool = True
) -> tuple[ControlType, int]:
    """The marker type and coordinator epoch of a control batch.

    Newer key or value versions are read as version 0, which Kafka guarantees stays a prefix;
    a negative version, a short field or an unknown type is corruption.
    """
    records = decode_records(batch, verify_crc=verify_crc)
    if not parse_header(batch).is_control:
        raise _corrupt("not a control batch")
    if len(records) != 1:
        raise _corrupt(f"control batch with {len(records)} records")
    key, value = records[0].key, records[0].value
    if key is None or len(key) < _KEY.size:
        raise _corrupt("control record key too short")
    if value is None or len(value) < _VALUE.size:
        raise _corrupt("control record value too short")
    key_version, type_id = _KEY.unpack_from(key)
    value_version, coordinator_epoch = _VALUE.unpack_from(value)
    if key_version < 0 or value_version < 0:
        raise _corrupt(f"negative control record version {key_version}/{value_version}")
    if type_id not in (ControlType.ABORT, ControlType.COMMIT):
        raise _corrupt(f"control record type {type_id} is not a transaction marker")
    return ControlType(type_id), coordinator_epoch


def _corrupt(message: str) -> KafkaError:
    return KafkaError(ErrorCode.corrupt_message, message)
