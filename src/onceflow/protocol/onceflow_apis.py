"""Onceflow's own API, beside Kafka's: CompleteTransactions ends several prepared
two-phase-commit transactions (KIP-939) as one.

Kafka has no request for it: a KIP-939 coordinator completes each transaction on its own
(InitProducerId with keepPreparedTxn, then EndTxn), so a reader can see some of a
coordinator's decision before the rest, or a part of it for good if the coordinator dies
between two completions. CompleteTransactions names every transaction of one decision; their
transactional ids share a `__transaction_state` partition (the client chooses them so), and
the coordinator logs all of their PrepareCommit records in one append and writes all of
their markers on each broker in one step: the decision is taken whole or not at all.

The schemas are declared here as kio declares Kafka's, so the codec reads and writes them
like any other (flexible versions, compact strings, tagged fields).

    CompleteTransactionsRequest v0: committed bool, transactions [transactional_id string,
        producer_id int64, producer_epoch int16]   (the epoch the prepared records carry)
    CompleteTransactionsResponse v0: throttle_time_ms int32, error_code int16 (the
        request's own: NOT_COORDINATOR, INVALID_REQUEST, ...), transactions
        [transactional_id string, error_code int16]

The key is far above Kafka's (which are below 100), so no Kafka API will take it.
"""

# No `from __future__ import annotations`: kio reads the fields' types at run time.
from dataclasses import dataclass, field
from types import ModuleType
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.schema.types import ProducerId, TransactionalId
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32Timedelta

from onceflow.protocol import txn_share_acknowledge as tsa
from onceflow.protocol import txn_write_share_state as twss

COMPLETE_TRANSACTIONS = 32000


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedTransaction:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(COMPLETE_TRANSACTIONS)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    transactional_id: TransactionalId = field(metadata={"kafka_type": "string"})
    producer_id: ProducerId = field(metadata={"kafka_type": "int64"})
    producer_epoch: i16 = field(metadata={"kafka_type": "int16"})


@dataclass(frozen=True, slots=True, kw_only=True)
class CompleteTransactionsRequest:
    __type__: ClassVar = EntityType.request
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(COMPLETE_TRANSACTIONS)
    __header_schema__: ClassVar[type[RequestHeader]] = RequestHeader
    committed: bool = field(metadata={"kafka_type": "bool"})
    transactions: tuple[PreparedTransaction, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionResult:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(COMPLETE_TRANSACTIONS)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    transactional_id: TransactionalId = field(metadata={"kafka_type": "string"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})


@dataclass(frozen=True, slots=True, kw_only=True)
class CompleteTransactionsResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(COMPLETE_TRANSACTIONS)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    transactions: tuple[TransactionResult, ...]


def _module(*members: type) -> ModuleType:
    module = ModuleType(f"{__name__}.payload")
    for member in members:
        setattr(module, member.__name__, member)
    return module


_TXN_SHARE_ACK = (tsa.API_KEY, tsa.VERSION)  # TxnShareAcknowledge (txn_share_acknowledge.py)
_TXN_WRITE_SHARE = (twss.API_KEY, twss.VERSION)  # between brokers (txn_write_share_state.py)
REQUEST_MODULES = {
    (COMPLETE_TRANSACTIONS, 0): _module(PreparedTransaction, CompleteTransactionsRequest),
    _TXN_SHARE_ACK: tsa,
    _TXN_WRITE_SHARE: twss,
}
RESPONSE_MODULES = {
    (COMPLETE_TRANSACTIONS, 0): _module(TransactionResult, CompleteTransactionsResponse),
    _TXN_SHARE_ACK: tsa,
    _TXN_WRITE_SHARE: twss,
}
REQUESTS: dict[tuple[int, int], type] = {
    (COMPLETE_TRANSACTIONS, 0): CompleteTransactionsRequest,
    _TXN_SHARE_ACK: tsa.TxnShareAcknowledgeRequest,
    _TXN_WRITE_SHARE: twss.TxnWriteShareGroupStateRequest,
}
RESPONSES: dict[tuple[int, int], type] = {
    (COMPLETE_TRANSACTIONS, 0): CompleteTransactionsResponse,
    _TXN_SHARE_ACK: tsa.TxnShareAcknowledgeResponse,
    _TXN_WRITE_SHARE: twss.TxnWriteShareGroupStateResponse,
}

#: Onceflow's own API keys. ApiVersions lists them only to a client that names itself
#: `CLIENT_SOFTWARE_NAME` (ApiVersions v3+): other clients never see a key they do not
#: know (kafka-python's admin client, for one, fails on an unknown key).
OWN_API_KEYS = frozenset(key for key, _ in REQUESTS)
CLIENT_SOFTWARE_NAME = "onceflow-python"
