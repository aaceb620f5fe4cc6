"""`.snapshot`: a partition's producer state at an offset, one line per producer.

Each producer line is followed by one `|` line per batch it remembers (at most five, oldest
first): the batches a retry is matched against. The file is parsed by the broker's own
decoder, so a file the dump shows is exactly one the broker would load, and a file it calls
corrupt is one the broker skips (and deletes) at startup, replaying the log instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from onceflow.cli.dumpers.registry import DumpOptions, base_offset_of, register_dumper
from onceflow.storage.producer_state import ProducerEntry, decode

__all__ = ["dump_producer_snapshot"]


def _producer_lines(entry: ProducerEntry) -> list[str]:
    lines = [
        f"producerId: {entry.producer_id} producerEpoch: {entry.epoch} "
        f"coordinatorEpoch: {entry.coordinator_epoch} lastTimestamp: {entry.last_timestamp} "
        f"currentTxnFirstOffset: {entry.txn_first_offset} "
        f"lastMarkerOffset: {entry.last_marker_offset} batches: {len(entry.batches)}\n"
    ]
    lines.extend(
        f"| firstSequence: {b.first_seq} lastSequence: {b.last_seq} lastOffset: {b.last_offset} "
        f"offsetDelta: {b.offset_delta} timestamp: {b.timestamp}\n"
        for b in entry.batches
    )
    return lines


@register_dumper(".snapshot")
def dump_producer_snapshot(path: Path, options: DumpOptions, out: TextIO) -> int:
    """Dump one producer-state snapshot; a corrupt or unreadable one is exit status 1."""
    offset = base_offset_of(path)
    if offset is not None:
        out.write(f"Producer state snapshot at offset: {offset}\n")
    data = path.read_bytes()
    try:
        producers = decode(data)
    except ValueError as exc:
        out.write(
            f"Corrupt producer snapshot ({len(data)} bytes): {exc}. The broker skips and "
            "deletes it at startup and rebuilds the state from an older snapshot or the log\n"
        )
        return 1
    for entry in sorted(producers.values(), key=lambda e: e.producer_id):
        out.writelines(_producer_lines(entry))
    out.write(f"{len(producers)} producer{'' if len(producers) == 1 else 's'}\n")
    return 0
