"""dump-log decodes `.txnindex` files and `__transaction_state` records."""

from __future__ import annotations

from pathlib import Path

import pytest

from onceflow.cli.main import main
from onceflow.coordinator.transaction.log import encode_key, encode_value
from onceflow.coordinator.transaction.metadata import TxnTransit
from onceflow.coordinator.transaction.state import TxnState
from onceflow.records.builder import build_batch
from onceflow.storage.fs import RealFileSystem
from onceflow.storage.indexes.txn import AbortedTxn, TxnIndex


def test_txn_index_entries_are_printed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    index = TxnIndex(RealFileSystem(), str(path))
    index.append(AbortedTxn(7, 11, 16, 16))
    index.close()
    assert main(["dump-log", str(path)]) == 0
    out = capsys.readouterr().out
    assert "producerId: 7 firstOffset: 11 lastOffset: 16 lastStableOffset: 16" in out


def test_a_torn_txn_index_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    path.write_bytes(b"\x00" * 20)
    assert main(["dump-log", str(path)]) == 1
    assert "Corrupt transaction index" in capsys.readouterr().out


def test_transaction_log_records_are_decoded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    transit = TxnTransit(
        "payments-1", 42, -1, 3, -1, 60_000, TxnState.ONGOING, frozenset({("out", 2)}), 5, 6
    )
    # Transaction version 2, rolling over to producer id 43 (value version 2).
    v2 = TxnTransit(
        "tv2", 42, -1, 32767, 32766, 60_000, TxnState.PREPARE_COMMIT, frozenset(), 5, 6, 2, 43
    )
    batch = build_batch(
        [
            (encode_key("payments-1"), encode_value(transit), ()),
            (encode_key("tv2"), encode_value(v2), ()),
            (encode_key("old"), None, ()),
        ],
        timestamp_ms=1,
    )
    directory = tmp_path / "__transaction_state-7"
    directory.mkdir()
    (directory / "00000000000000000000.log").write_bytes(batch)
    assert main(["dump-log", "--print-data-log", str(directory / "00000000000000000000.log")]) == 0
    out = capsys.readouterr().out
    assert "transactionalId: payments-1 producerId: 42 producerEpoch: 3" in out
    assert "state: Ongoing partitions: [out-2]" in out
    assert "transactionalId: old <tombstone: the id expired>" in out
    assert "nextProducerId: -1 clientTransactionVersion: 0" in out
    assert "state: PrepareCommit" in out
    assert "nextProducerId: 43 clientTransactionVersion: 2" in out
