"""A confluent-kafka admin error as Kafka's tools show it: Kafka's error name and the
broker's message (`INVALID_PARTITIONS (topic 't' has 3 partitions; 2 would not add any)`).

librdkafka names some codes its own way (UNKNOWN_TOPIC_OR_PART) and prefixes the generic
text with "Broker: "; a broker error is named here by Kafka's name for its code instead, so
the line reads the same as Kafka's and as Onceflow's own client's errors.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, KafkaException

from onceflow.cli.common import explain_failure
from onceflow.client.errors import error_name

__all__ = ["error_code", "error_text"]


def error_code(exc: BaseException) -> int | None:
    """The KafkaError code inside a confluent-kafka exception, if there is one."""
    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return int(error.code()) if isinstance(error, KafkaError) else None


def error_text(exc: BaseException, client: Any = None) -> str:
    """`NAME (message)` for a broker's error; librdkafka's own text (with the connection
    failure behind it, given the client) for a local one such as a timeout."""
    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if not isinstance(error, KafkaError) or error.code() < 0:
        return explain_failure(exc, client)
    message = str(error.str()).removeprefix("Broker: ")
    name = error_name(int(error.code()))
    return name if message in ("", "(null)") else f"{name} ({message})"
