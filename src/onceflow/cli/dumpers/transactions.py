"""`.txnindex` files and the records of `__transaction_state`, decoded for dump-log.

Both use the broker's own decoders, so what the dump shows is what the broker would load.
"""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from onceflow.cli.dumpers.registry import (
    DumpOptions,
    register_dumper,
    register_record_formatter,
)
from onceflow.coordinator.transaction.log import CorruptTxnRecord, decode_key, decode_value
from onceflow.records.record import Record
from onceflow.storage.fs import RealFileSystem
from onceflow.storage.indexes.txn import ENTRY, TxnIndex

__all__ = ["dump_txn_index", "format_txn_record"]


@register_dumper(".txnindex", in_directory=True)
def dump_txn_index(path: Path, options: DumpOptions, out: TextIO) -> int:
    """One line per aborted transaction; an unreadable file is exit status 1."""
    index = TxnIndex(RealFileSystem(), str(path))
    if not index.load():
        size = path.stat().st_size
        out.write(
            f"Corrupt transaction index ({size} bytes, entries are {ENTRY.size}): the broker "
            "rebuilds it by replaying the markers\n"
        )
        return 1
    for e in index.entries:
        out.write(
            f"version: 0 producerId: {e.producer_id} firstOffset: {e.first_offset} "
            f"lastOffset: {e.last_offset} lastStableOffset: {e.last_stable_offset}\n"
        )
    return 0


@register_record_formatter("__transaction_state")
def format_txn_record(record: Record) -> str:
    """`transactionalId: ... producerId: ... state: ...` for a transaction-log record."""
    if record.key is None:
        return "key: null (not a transaction-log record)"
    try:
        txn_id = decode_key(record.key)
        if record.value is None:
            return f"transactionalId: {txn_id} <tombstone: the id expired>"
        t = decode_value(txn_id, record.value)
    except CorruptTxnRecord as exc:
        return f"undecodable transaction-log record: {exc}"
    partitions = ",".join(f"{topic}-{p}" for topic, p in sorted(t.partitions))
    return (
        f"transactionalId: {txn_id} producerId: {t.producer_id} "
        f"producerEpoch: {t.producer_epoch} lastProducerId: {t.last_producer_id} "
        f"lastProducerEpoch: {t.last_producer_epoch} state: {t.state.display} "
        f"partitions: [{partitions}] txnTimeoutMs: {t.timeout_ms} "
        f"txnStartTimestamp: {t.start_ms} txnLastUpdateTimestamp: {t.update_ms}"
        f" nextProducerId: {t.next_producer_id} clientTransactionVersion: {t.client_version}"
    )
