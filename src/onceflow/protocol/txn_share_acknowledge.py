"""TxnShareAcknowledge: Onceflow's own API (key 32001, v0, flexible), the wire form of
acknowledgements inside a transaction (the idea of KIP-1289, which has no settled schema).

A share consumer's acknowledgements, sent with a transactional producer's id and epoch, to
the leader of the share-partitions: the broker adds their `__share_group_state` partitions
to the transaction and writes the acknowledgements there as transactional records, so they
take effect when the transaction commits and are undone when it aborts. The entities are
declared as kio declares its generated ones, so kio's readers and writers serve them
(`onceflow_apis` registers them for the codec). API key 32001 is far above Kafka's (32000
is CompleteTransactions); clients that do not know it ignore it in ApiVersions.

    TxnShareAcknowledgeRequest => transactional_id producer_id producer_epoch group_id
        member_id [topics]
      topics => topic_id [partitions]
        partitions => partition_index [acknowledgement_batches]
          acknowledgement_batches => first_offset last_offset [acknowledge_types]
    TxnShareAcknowledgeResponse => throttle_time_ms error_code error_message [responses]
      responses => topic_id [partitions]
        partitions => partition_index error_code error_message
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

API_KEY = 32001
VERSION = 0
_KEY = i16(API_KEY)
_V = i16(VERSION)


@dataclass(frozen=True, slots=True, kw_only=True)
class AcknowledgementBatch:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = _V
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = _KEY
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    first_offset: i64 = field(metadata={"kafka_type": "int64"})
    last_offset: i64 = field(metadata={"kafka_type": "int64"})
    acknowledge_types: tuple[i8, ...] = field(metadata={"kafka_type": "int8"}, default=())


@dataclass(frozen=True, slots=True, kw_only=True)
class AcknowledgePartition:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = _V
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = _KEY
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    acknowledgement_batches: tuple[AcknowledgementBatch, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class AcknowledgeTopic:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = _V
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = _KEY
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    partitions: tuple[AcknowledgePartition, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnShareAcknowledgeRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = _V
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = _KEY
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    transactional_id: str = field(metadata={"kafka_type": "string"})
    producer_id: i64 = field(metadata={"kafka_type": "int64"})
    producer_epoch: i16 = field(metadata={"kafka_type": "int16"})
    group_id: str = field(metadata={"kafka_type": "string"})
    member_id: str = field(metadata={"kafka_type": "string"})
    topics: tuple[AcknowledgeTopic, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionData:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = _V
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = _KEY
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    partition_index: i32 = field(metadata={"kafka_type": "int32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicResponse:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = _V
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = _KEY
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    topic_id: uuid.UUID | None = field(metadata={"kafka_type": "uuid"})
    partitions: tuple[PartitionData, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnShareAcknowledgeResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = _V
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = _KEY
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    error_message: str | None = field(metadata={"kafka_type": "string"}, default=None)
    responses: tuple[TopicResponse, ...]
