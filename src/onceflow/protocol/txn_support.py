"""What a client's request version understands of KIP-890, and the codes it is answered with.

Kafka's TransactionSupportedOperation: a transactional write (Produce, TxnOffsetCommit) is
checked against the transaction coordinator, whose verify-only answer for a partition
outside the producer's ongoing transaction is TRANSACTION_ABORTABLE. Clients from Produce
v11 and TxnOffsetCommit v4 (KIP-890 part 1) understand that code and abort; older ones get
INVALID_TXN_STATE instead. From Produce v12 and TxnOffsetCommit v5 (transaction version 2,
KIP-890 part 2) the write adds its partition to the transaction itself.
"""

from __future__ import annotations

from enum import IntEnum

from onceflow.errors import ErrorCode


class TxnSupport(IntEnum):
    DEFAULT_ERROR = 0  # INVALID_TXN_STATE for a write outside its transaction
    GENERIC_ERROR = 1  # TRANSACTION_ABORTABLE understood
    ADD_PARTITION = 2  # transaction version 2: the write adds its partition


def for_produce(version: int) -> TxnSupport:
    if version >= 12:
        return TxnSupport.ADD_PARTITION
    return TxnSupport.GENERIC_ERROR if version >= 11 else TxnSupport.DEFAULT_ERROR


def for_txn_offset_commit(version: int) -> TxnSupport:
    if version >= 5:
        return TxnSupport.ADD_PARTITION
    return TxnSupport.GENERIC_ERROR if version >= 4 else TxnSupport.DEFAULT_ERROR


def verification_error(code: ErrorCode, support: TxnSupport) -> ErrorCode:
    """The coordinator's verification answer as the client is told it (Kafka's
    AddPartitionsToTxnManager): producers expect INVALID_PRODUCER_EPOCH for a fenced
    epoch, and clients before KIP-890 INVALID_TXN_STATE for TRANSACTION_ABORTABLE."""
    if code is ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    if code is ErrorCode.transaction_abortable and support is TxnSupport.DEFAULT_ERROR:
        return ErrorCode.invalid_txn_state
    return code
