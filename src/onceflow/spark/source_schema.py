"""The fixed schema of the `onceflow` source: Spark's Kafka schema, and its Arrow form."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from onceflow.spark.options import OptionError

__all__ = ["arrow_schema", "check_schema", "kafka_schema"]


def kafka_schema(include_headers: bool) -> StructType:
    """The schema of Spark's Kafka source."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow form of `kafka_schema` that Spark expects from `read()` (timestamps in
    microseconds, UTC; list elements named `element`)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
        fields.append(pa.field("headers", pa.list_(pa.field("element", header))))
    return pa.schema(fields)


def check_schema(schema: StructType, include_headers: bool) -> None:
    """The source has a fixed schema, as Spark's Kafka source does."""
    expected = kafka_schema(include_headers)
    if schema != expected:
        raise OptionError(
            "the onceflow source has a fixed schema and cannot read with a user-specified one "
            f"(expected {expected.simpleString()}, got {schema.simpleString()}); "
            "use includeHeaders=true for the headers column"
        )
