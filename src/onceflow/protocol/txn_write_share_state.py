"""TxnWriteShareGroupState: Onceflow's own API (key 32002, v0, flexible), between brokers
only. It carries a transactional acknowledgement (TxnShareAcknowledge, key 32001) from the
broker leading a share-partition to the share coordinator of its `__share_group_state`
partition, as Kafka's group coordinator receives a TxnOffsetCommit: the coordinator
appends it there as the producer's transactional record (KIP-890 verified with the
transaction's coordinator), and the transaction's COMMIT marker on that partition makes it
take effect. WriteShareGroupState (85) has no producer fields, hence a key of its own.

    TxnWriteShareGroupStateRequest => transactional_id producer_id producer_epoch group_id
        [topics]
      topics => topic_id [partitions]
        partitions => partition [ranges]
          ranges => first_offset last_offset delivery_state   (the state on commit)
    TxnWriteShareGroupStateResponse => throttle_time_ms error_code [results]
      results => topic_id [partitions]
        partitions => partition error_code error_message
"""

# No `from __future__ import annotations`: kio reads the field types at run time.

import uuid
from dataclasses import dataclass, field
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.static.constants import EntityType
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

API_KEY = 32002
VERSION = 0
_KEY = i16(API_KEY)
_V = i16(VERSION)


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingRange:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = _V
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = _KEY
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    first_offset: i64 = field(metadata={"kafka_type": "int64"})
    last_offset: i64 = field(metadata={"kafka_type": "int64"})
    delivery_state: i8 = field(metadata={"kafka_type": "int8"})


@dataclass(frozen=True, slots=True, kw_only=True)
class StatePartition:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = _V
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = _KEY
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    partition: i32 = field(metadata={"kafka_type": "int32"})
    ranges: tuple[PendingRange, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class StateTopic:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = _V
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = _KEY
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    partitions: tuple[StatePartition, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnWriteShareGroupStateRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = _V
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = _KEY
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    transactional_id: str = field(metadata={"kafka_type": "string"})
    producer_id: i64 = field(metadata={"kafka_type": "int64"})
    producer_epoch: i16 = field(metadata={"kafka_type": "int16"})
    group_id: str = field(metadata={"kafka_type": "string"})
    topics: tuple[StateTopic, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionResult:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = _V
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = _KEY
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    partition: i32 = field(metadata={"kafka_type": "int32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicResult:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = _V
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = _KEY
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    partitions: tuple[PartitionResult, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnWriteShareGroupStateResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = _V
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = _KEY
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    results: tuple[TopicResult, ...]
