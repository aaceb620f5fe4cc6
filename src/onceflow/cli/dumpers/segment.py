"""`.log` segments: one line per batch and, with --print-data-log, one per record.

The file is mapped, not read, so a 1 GiB segment costs no 1 GiB of memory. The walk follows
batch lengths only and checks each CRC for display, so one corrupt batch in the middle does
not hide the rest. It stops at the first bytes that cannot be a whole batch, which after a
crash is normally a torn tail that recovery will truncate, and says why it stopped.
"""

from __future__ import annotations

import mmap
from pathlib import Path
from typing import TextIO

from onceflow.cli.dumpers.registry import (
    DumpOptions,
    RecordFormatter,
    base_offset_of,
    record_formatter_for,
    register_dumper,
)
from onceflow.errors import KafkaError
from onceflow.records.batch import (
    CURRENT_MAGIC,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    compute_crc,
    parse_header,
)
from onceflow.records.control import parse_control_record
from onceflow.records.record import Record, decode_records

__all__ = ["dump_segment", "format_key_payload", "show_bytes"]

Buffer = bytes | memoryview
CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")
SEQUENCE_MODULUS = 1 << 31


# Control characters would break the one-line-per-record layout or garble a terminal.
_ESCAPES = {code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F)}
_ESCAPES.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})


def show_bytes(data: bytes | None) -> str:
    """Bytes as text on one line: UTF-8, with undecodable bytes and control chars escaped."""
    if data is None:
        return "null"
    return data.decode("utf-8", "backslashreplace").translate(_ESCAPES)


def format_key_payload(record: Record) -> str:
    """The default record formatter: key and value as text."""
    return f"key: {show_bytes(record.key)} payload: {show_bytes(record.value)}"


def _size(data: bytes | None) -> int:
    return -1 if data is None else len(data)


def _time_name(header: BatchHeader) -> str:
    return "LogAppendTime" if header.attributes & TIMESTAMP_TYPE_MASK else "CreateTime"


def _codec(header: BatchHeader) -> str:
    codec = header.compression
    return CODEC_NAMES[codec] if codec < len(CODEC_NAMES) else f"unknown({codec})"


def _bool(flag: bool) -> str:
    return "true" if flag else "false"


def _batch_line(header: BatchHeader, position: int, valid: bool) -> str:
    return (
        f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
        f"count: {header.record_count} baseSequence: {header.base_sequence} "
        f"lastSequence: {header.last_sequence} producerId: {header.producer_id} "
        f"producerEpoch: {header.producer_epoch} "
        f"partitionLeaderEpoch: {header.partition_leader_epoch} "
        f"isTransactional: {_bool(header.is_transactional)} "
        f"isControl: {_bool(header.is_control)} position: {position} "
        f"{_time_name(header)}: {header.max_timestamp} size: {header.size} "
        f"magic: {header.magic} compresscodec: {_codec(header)} crc: {header.crc} "
        f"isvalid: {_bool(valid)}\n"
    )


def _stop_reason(buf: Buffer, pos: int, end: int) -> str | None:
    """Why the bytes at `pos` are not a whole batch, or None when they are one."""
    remaining = end - pos
    if remaining < HEADER_SIZE:
        return f"torn tail: {remaining} bytes, fewer than a batch header"
    if buf[pos + MAGIC_OFFSET] != CURRENT_MAGIC:
        return f"magic byte {buf[pos + MAGIC_OFFSET]} where a v{CURRENT_MAGIC} batch should start"
    header = parse_header(buf, pos)
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        return f"batch length {header.batch_length} is shorter than a batch header"
    if header.size > remaining:
        return f"torn tail: a batch of {header.size} bytes with only {remaining} bytes left"
    return None


def _record_lines(
    batch: bytes, header: BatchHeader, formatter: RecordFormatter, out: TextIO
) -> None:
    try:
        records = decode_records(batch, verify_crc=False)
        marker = parse_control_record(batch, verify_crc=False) if header.is_control else None
    except KafkaError as exc:
        out.write(f"| records cannot be decoded: {exc.message or exc}\n")
        return
    time_name = _time_name(header)
    for record in records:
        sequence = NO_SEQUENCE
        if header.base_sequence >= 0:
            delta = record.offset - header.base_offset
            sequence = (header.base_sequence + delta) % SEQUENCE_MODULUS
        header_keys = ",".join(name for name, _ in record.headers)
        line = (
            f"| offset: {record.offset} {time_name}: {record.timestamp} "
            f"keySize: {_size(record.key)} valueSize: {_size(record.value)} "
            f"sequence: {sequence} headerKeys: [{header_keys}]"
        )
        if marker is not None:
            line += f" endTxnMarker: {marker[0].name} coordinatorEpoch: {marker[1]}"
        else:
            line += " " + formatter(record)
        out.write(line + "\n")


def _walk(buf: Buffer, path: Path, options: DumpOptions, out: TextIO) -> int:
    formatter = record_formatter_for(path) or format_key_payload
    end = len(buf)
    pos = 0
    invalid = 0
    while pos < end:
        reason = _stop_reason(buf, pos, end)
        if reason is not None:
            out.write(f"Stopped at position {pos}: {reason}; {end - pos} bytes not dumped\n")
            return 1 if options.verify_crc else 0
        header = parse_header(buf, pos)
        valid = compute_crc(buf, pos, header.size) == header.crc
        invalid += not valid
        out.write(_batch_line(header, pos, valid))
        if options.print_data_log:
            _record_lines(bytes(buf[pos : pos + header.size]), header, formatter, out)
        pos += header.size
    if invalid:
        out.write(f"{invalid} batch{'es' if invalid > 1 else ''} failed the CRC check\n")
    return 1 if invalid and options.verify_crc else 0


@register_dumper(".log", in_directory=True)
def dump_segment(path: Path, options: DumpOptions, out: TextIO) -> int:
    """Dump one segment; with --verify-crc a bad CRC or a partial last batch is exit 1."""
    base = base_offset_of(path)
    if base is not None:
        out.write(f"Log starting offset: {base}\n")
    with path.open("rb") as file:
        if path.stat().st_size == 0:
            return 0
        with (
            mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped,
            memoryview(mapped) as view,  # released before the map closes, as mmap requires
        ):
            return _walk(view, path, options, out)
