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


# Verification answers that older clients would not retry from Produce: Kafka hands them
# over as the retriable NOT_ENOUGH_REPLICAS, which needs no metadata refresh (the last one
# is Onceflow's: the coordinator's broker could not be reached).
_RETRY_AS_NOT_ENOUGH_REPLICAS = frozenset(
    {
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.concurrent_transactions,
        ErrorCode.network_exception,
        ErrorCode.not_leader_or_follower,
    }
)


def write_refusal(code: ErrorCode, support: TxnSupport) -> ErrorCode:
    """The coordinator's verification answer as the writing client is told it (Kafka's
    AddPartitionsToTxnManager and ReplicaManager): coordinator trouble is the retriable
    NOT_ENOUGH_REPLICAS, producers expect INVALID_PRODUCER_EPOCH for a fenced epoch, and
    clients before KIP-890 INVALID_TXN_STATE for TRANSACTION_ABORTABLE."""
    if code in _RETRY_AS_NOT_ENOUGH_REPLICAS:
        return ErrorCode.not_enough_replicas
    if code is ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    if code is ErrorCode.transaction_abortable and support is TxnSupport.DEFAULT_ERROR:
        return ErrorCode.invalid_txn_state
    return code
