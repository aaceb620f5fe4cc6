"""Which KIP-890 behaviour each request version gets, and the codes its clients are told."""

from __future__ import annotations

import pytest

from onceflow.errors import ErrorCode
from onceflow.protocol.txn_support import (
    TxnSupport,
    for_produce,
    for_txn_offset_commit,
    write_refusal,
)


def test_versions_map_to_kafkas_transaction_supported_operations() -> None:
    assert [for_produce(v) for v in (3, 10, 11, 12, 13)] == [
        TxnSupport.DEFAULT_ERROR,
        TxnSupport.DEFAULT_ERROR,
        TxnSupport.GENERIC_ERROR,
        TxnSupport.ADD_PARTITION,
        TxnSupport.ADD_PARTITION,
    ]
    assert [for_txn_offset_commit(v) for v in (0, 3, 4, 5)] == [
        TxnSupport.DEFAULT_ERROR,
        TxnSupport.DEFAULT_ERROR,
        TxnSupport.GENERIC_ERROR,
        TxnSupport.ADD_PARTITION,
    ]


@pytest.mark.parametrize("support", list(TxnSupport))
def test_fenced_is_always_invalid_producer_epoch(support: TxnSupport) -> None:
    assert write_refusal(ErrorCode.producer_fenced, support) is (ErrorCode.invalid_producer_epoch)


def test_transaction_abortable_only_for_clients_that_understand_it() -> None:
    code = ErrorCode.transaction_abortable
    assert write_refusal(code, TxnSupport.DEFAULT_ERROR) is ErrorCode.invalid_txn_state
    assert write_refusal(code, TxnSupport.GENERIC_ERROR) is code
    assert write_refusal(code, TxnSupport.ADD_PARTITION) is code
    assert write_refusal(ErrorCode.invalid_producer_id_mapping, TxnSupport.DEFAULT_ERROR) is (
        ErrorCode.invalid_producer_id_mapping
    )


@pytest.mark.parametrize("support", list(TxnSupport))
def test_coordinator_trouble_is_the_retriable_not_enough_replicas(support: TxnSupport) -> None:
    for code in (ErrorCode.concurrent_transactions, ErrorCode.not_coordinator):
        assert write_refusal(code, support) is ErrorCode.not_enough_replicas
