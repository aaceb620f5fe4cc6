"""`OnceflowDataSource`: the `onceflow` format for `spark.read`, `spark.readStream`,
`df.write` and `df.writeStream`.

Spark pickles this class to every Python worker and builds it from the query's options
(a case-insensitive map). It stays a thin shell: option checks and schema here, reading in
`onceflow.spark.reader` (with `source_metadata` and `range_reader`), writing in
`onceflow.spark.writer` and `sink_tasks` (imported only when a query writes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from onceflow.spark.options import parse_source_options
from onceflow.spark.reader import OnceflowStreamReader, batch_reader
from onceflow.spark.source_schema import kafka_schema

if TYPE_CHECKING:
    from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter

__all__ = ["OnceflowDataSource"]


class OnceflowDataSource(DataSource):
    """Kafka topics, read committed and written transactionally, through confluent-kafka."""

    @classmethod
    def name(cls) -> str:
        return "onceflow"

    def schema(self) -> StructType:
        # Spark asks for the schema when a read is defined (load()), so option errors
        # surface there. Writes never call it.
        opts = parse_source_options(self.options)
        return kafka_schema(opts.include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        return batch_reader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return OnceflowStreamReader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from onceflow.spark.writer import make_writer

        return make_writer(dict(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from onceflow.spark.writer import make_stream_writer

        return make_stream_writer(dict(self.options), schema, overwrite)
