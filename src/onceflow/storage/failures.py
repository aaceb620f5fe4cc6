"""How storage failures reach the layers above: two Kafka errors, both KAFKA_STORAGE_ERROR.

- `OutOfSpace`: a write found no space and was cut back whole; the log is exactly as it was
  before, so the write may be retried once space is free. Clients retry it (the code is
  retriable) and the partition stays online.
- `LogOffline`: any other failure (EIO, a failed fsync, a write that could not be cut back).
  The log's file may no longer match its state in memory, or data the kernel said it had
  written may be gone, so the partition stops serving until a restart recovers it from what
  is on disk: PostgreSQL's lesson of 2018, and Kafka's offline log dir.
"""

from __future__ import annotations

from onceflow.errors import ErrorCode, KafkaError


class OutOfSpace(KafkaError):
    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.kafka_storage_error, message)


class LogOffline(KafkaError):
    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.kafka_storage_error, message)
