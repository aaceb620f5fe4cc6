"""Record batch v2: header, records, compression and control markers. Pure, no I/O."""

from onceflow.records.batch import (
    BatchHeader,
    InvalidBatch,
    ScannedBatch,
    assign_offsets,
    compute_crc,
    iter_batches,
    parse_header,
    scan_batches,
    validate_produced_batches,
)
from onceflow.records.builder import RecordInput, build_batch
from onceflow.records.compression import Compression, compress, decompress
from onceflow.records.control import ControlType, build_control_batch, parse_control_record
from onceflow.records.record import Record, decode_records

__all__ = [
    "BatchHeader",
    "Compression",
    "ControlType",
    "InvalidBatch",
    "Record",
    "RecordInput",
    "ScannedBatch",
    "assign_offsets",
    "build_batch",
    "build_control_batch",
    "compress",
    "compute_crc",
    "decode_records",
    "decompress",
    "iter_batches",
    "parse_control_record",
    "parse_header",
    "scan_batches",
    "validate_produced_batches",
]
