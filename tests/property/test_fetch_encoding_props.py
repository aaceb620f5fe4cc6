"""A Fetch response as the broker sends it (`handlers/fetch._encode`: the top, topics and
common partitions packed by hand, the records spliced in as file regions) is byte for byte
kio's encoding of the same response with the records in, at every Fetch version served:
topic names of any length and script, topic ids, regions of any size around the compact
length's steps, no records, errors, aborted transactions and diverging epochs (these two
encoded by kio itself)."""

from __future__ import annotations

import datetime
import io
import uuid
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from onceflow.broker.handlers.fetch import _encode, _PartitionRead
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey
from onceflow.protocol.codec import RequestHeader, build, encode_body, nested, response_type
from onceflow.storage.indexes import AbortedTxn
from onceflow.storage.partition_log import FileRegion

LOWEST, HIGHEST = SUPPORTED_VERSIONS[ApiKey.FETCH]
# Sizes around the one-, two- and three-byte compact lengths (127 and 16383 plus one).
SIZES = st.one_of(st.integers(0, 300), st.integers(16380, 16386))
ERRORS = st.sampled_from([ErrorCode.none, ErrorCode.not_leader_or_follower])


class _File:
    """The FileHandle a region reads from: bytes at positions, as a segment file."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def pread(self, size: int, position: int) -> bytes:
        return self.data[position : position + size]


class _Ctx:
    def __init__(self, version: int) -> None:
        self.api_version = version
        self.header = RequestHeader(ApiKey.FETCH, version, 1, "test")

    def response(self, **fields: Any) -> Any:
        return build(response_type(ApiKey.FETCH, self.api_version), **fields)


@st.composite
def partitions(draw: st.DrawFn, data: bytes, version: int) -> tuple[_PartitionRead, bytes | None]:
    index = draw(st.integers(0, 2**31 - 1))
    error = draw(ERRORS)
    hw, lso, start = (draw(st.integers(-1, 2**62)) for _ in range(3))
    region = None
    records = None
    if draw(st.booleans()):
        size = draw(SIZES)
        position = draw(st.integers(0, len(data) - size))
        region = FileRegion(_File(data), position, size)  # type: ignore[arg-type]
        records = data[position : position + size]
    aborted = None
    if draw(st.integers(0, 4)) == 0:
        producer, first = draw(st.integers(0, 2**40)), draw(st.integers(0, 2**40))
        aborted = [AbortedTxn(producer, first, first + 1, first + 2)]
    diverging = None
    if version >= 12 and region is None and draw(st.integers(0, 4)) == 0:  # v12+ only
        diverging = (draw(st.integers(0, 1000)), draw(st.integers(0, 2**40)))
    read = _PartitionRead(index, error, hw, lso, start, region, aborted, diverging)
    return read, records


def _reference(
    version: int,
    topics: list[Any],
    reads: list[list[Any]],
    records: Any,
    error: Any,
    session_id: int,
) -> bytes:
    """The whole response built as kio entities and encoded by kio."""
    topic_cls = nested(ApiKey.FETCH, version, "FetchableTopicResponse")
    partition_cls = nested(ApiKey.FETCH, version, "PartitionData")
    aborted_cls = nested(ApiKey.FETCH, version, "AbortedTransaction")
    epoch_cls = nested(ApiKey.FETCH, version, "EpochEndOffset") if version >= 12 else None
    responses = []
    for (name, topic_id, _), topic_reads, topic_records in zip(topics, reads, records, strict=True):
        entries = []
        for read, data in zip(topic_reads, topic_records, strict=True):
            fields: dict[str, Any] = dict(
                partition_index=read.partition,
                error_code=read.error,
                high_watermark=read.high_watermark,
                last_stable_offset=read.last_stable_offset,
                log_start_offset=read.log_start_offset,
                aborted_transactions=None
                if read.aborted is None
                else tuple(
                    build(aborted_cls, producer_id=t.producer_id, first_offset=t.first_offset)
                    for t in read.aborted
                ),
                preferred_read_replica=-1,
                records=data if data is not None else b"",
            )
            if read.diverging is not None and epoch_cls is not None:
                fields["diverging_epoch"] = build(
                    epoch_cls, epoch=read.diverging[0], end_offset=read.diverging[1]
                )
            entries.append(build(partition_cls, **fields))
        topic_name = None if version >= 13 else name
        responses.append(
            build(topic_cls, topic=topic_name, topic_id=topic_id, partitions=tuple(entries))
        )
    top = build(
        response_type(ApiKey.FETCH, version),
        throttle_time=datetime.timedelta(0),
        error_code=error,
        session_id=session_id,
        responses=tuple(responses),
    )
    return encode_body(top)


@settings(max_examples=300, deadline=None)
@given(
    version=st.integers(LOWEST, HIGHEST),
    names=st.lists(st.text(min_size=1, max_size=140), min_size=0, max_size=3, unique=True),
    content=st.data(),
    error=ERRORS,
    session_id=st.integers(0, 2**31 - 1),
)
def test_the_packed_response_is_kios_encoding(
    version: int, names: list[str], content: st.DataObject, error: ErrorCode, session_id: int
) -> None:
    data = bytes(range(256)) * 80
    topics, reads, records = [], [], []
    for name in names:
        drawn = content.draw(st.lists(partitions(data, version), min_size=0, max_size=3))
        topics.append((name, uuid.uuid4(), [None] * len(drawn)))
        reads.append([read for read, _ in drawn])
        records.append([r for _, r in drawn])
    parts = _encode(_Ctx(version), topics, reads, error, session_id)  # type: ignore[arg-type]
    sent = io.BytesIO()
    for part in parts:
        sent.write(part.read() if isinstance(part, FileRegion) else part)
    assert sent.getvalue() == _reference(version, topics, reads, records, error, session_id)


def test_a_region_is_spliced_in_not_copied(tmp_path: Path) -> None:
    """The records stay a region for sendfile: the packing never reads them."""
    region = FileRegion(_File(b"x" * 100), 0, 100)  # type: ignore[arg-type]
    read = _PartitionRead(0, ErrorCode.none, 5, 5, 0, region)
    for version in range(LOWEST, HIGHEST + 1):
        parts = _encode(_Ctx(version), [("t", uuid.uuid4(), [None])], [[read]])  # type: ignore[arg-type]
        assert region in parts
