"""The `onceflow` PySpark data source: exactly-once Structured Streaming on Kafka
transactions.

    import onceflow.spark
    onceflow.spark.register(spark)
    df = (spark.readStream.format("onceflow")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "payments")
          .load())

It speaks the Kafka protocol only through confluent-kafka, so the same query runs against
an Onceflow broker or an Apache Kafka cluster. Options mirror Spark's Kafka connector:
every `kafka.*` option (security settings included, in librdkafka's names) reaches every
client the connector makes, on the driver and in the tasks; docs/spark-security.md lists
the ACLs a pipeline needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onceflow.spark.access import KafkaAccessError
from onceflow.spark.options import OptionError, kafka_client_config
from onceflow.spark.source import OnceflowDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "KafkaAccessError",
    "OnceflowDataSource",
    "OptionError",
    "kafka_client_config",
    "register",
]


def register(spark: SparkSession) -> None:
    """Register the data source with `spark` under the name `onceflow`."""
    spark.dataSource.register(OnceflowDataSource)
