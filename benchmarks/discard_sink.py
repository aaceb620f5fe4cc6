"""A Python data source that reads every Arrow batch Spark hands its writer and writes
nothing: the floor of any sink built on Spark's Python data source API, which serialises
every row to Arrow again and streams it to a Python worker where a JVM sink (such as
`noop`) needs neither. The spark figures compare the onceflow sink with it and with `noop`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

__all__ = ["DiscardDataSource"]


class DiscardWriter(DataSourceArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        for _batch in iterator:
            pass
        return WriterCommitMessage()

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        pass


class DiscardDataSource(DataSource):
    """`df.write.format("discard")`."""

    @classmethod
    def name(cls) -> str:
        return "discard"

    def writer(self, schema: StructType, overwrite: bool) -> DiscardWriter:
        return DiscardWriter()
