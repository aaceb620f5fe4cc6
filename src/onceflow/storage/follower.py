"""What a follower checks in the bytes it fetched before appending them as they are.

A follower appends its leader's batches unchanged: their offsets, their leader epochs,
their CRCs. So it validates only what could make its log wrong: whole v2 batches with
valid CRCs, offsets that start at or after its log end (after only where the leader's log
has a gap, from compaction) and rise strictly. A fetch response may end in a partial batch
(the leader cuts at the fetch's byte limit, as Kafka does); that tail is dropped, not an
error, and the next fetch starts at it.

Errors, for the replica fetcher (both KafkaErrors, neither takes the log offline, and
nothing is written when either is raised):

- `UnexpectedAppendOffset` (OFFSET_OUT_OF_RANGE): the data starts below the log end. The
  fetcher asked for the wrong offset or the log changed under it: it should resynchronise
  (ask the leader's epochs again, truncate, fetch from the log end). `first_offset` and
  `last_offset` let it recognise Kafka's one legitimate case, a leader whose log start
  falls inside the first batch of an empty follower log (`truncate_fully_and_start_at`).
- `InvalidReplicaData` (CORRUPT_MESSAGE): a corrupt batch, another magic, or offsets that
  do not rise. Retrying the same bytes cannot help; the fetcher should fetch again.
"""

from __future__ import annotations

from onceflow.errors import ErrorCode, KafkaError
from onceflow.records.batch import (
    CURRENT_MAGIC,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    BatchHeader,
    parse_header,
    read_batch_length,
    scan_batches,
)


class UnexpectedAppendOffset(KafkaError):
    """Fetched data that starts below the follower's log end (Kafka's
    UnexpectedAppendOffsetException)."""

    def __init__(self, message: str, first_offset: int, last_offset: int) -> None:
        super().__init__(ErrorCode.offset_out_of_range, message)
        self.first_offset = first_offset  # the first batch's base offset
        self.last_offset = last_offset  # the last offset of the whole append


class InvalidReplicaData(KafkaError):
    """Fetched bytes that are not whole, valid, increasing v2 batches."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.corrupt_message, message)


def follower_batches(
    data: bytes | bytearray | memoryview, log_end_offset: int, name: str
) -> tuple[list[BatchHeader], int]:
    """The headers of the whole batches in `data` and the bytes they fill (a partial last
    batch is left out). Raises as the module docstring says; per batch work only."""
    scanned, end = scan_batches(data)
    if end < len(data):
        _check_tail(data, end, name)
    headers = [b.header for b in scanned]
    if not headers:
        return headers, 0
    first = headers[0]
    if first.base_offset < log_end_offset:
        raise UnexpectedAppendOffset(
            f"append to {name} starts at offset {first.base_offset}, below its log end "
            f"{log_end_offset} (last offset {headers[-1].last_offset})",
            first.base_offset,
            headers[-1].last_offset,
        )
    expected = log_end_offset
    for header in headers:
        if header.base_offset < expected or header.last_offset_delta < 0:
            raise InvalidReplicaData(
                f"offsets in the append to {name} do not rise: a batch at "
                f"{header.base_offset}..{header.last_offset} follows offset {expected - 1}"
            )
        expected = header.next_offset
    return headers, end


def _check_tail(data: bytes | bytearray | memoryview, end: int, name: str) -> None:
    """Bytes after the last whole, valid batch are a batch cut short (fine) or corruption."""
    left = len(data) - end
    if left < LOG_OVERHEAD:
        return
    size = read_batch_length(data, end)
    if size < HEADER_SIZE:
        raise InvalidReplicaData(f"batch at byte {end} for {name} has a bad length {size}")
    if size > left:
        return  # cut short by the fetch's size limit: fetched again next time
    magic = data[end + MAGIC_OFFSET]
    if magic != CURRENT_MAGIC:
        raise InvalidReplicaData(f"batch at byte {end} for {name} has magic {magic}, not 2")
    header = parse_header(data, end)
    raise InvalidReplicaData(
        f"batch at offset {header.base_offset} for {name} is corrupt (CRC mismatch)"
    )
