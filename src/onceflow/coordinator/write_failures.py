"""One log line when a coordinator's writes start failing, one when they succeed again.

A full disk fails every write until space is freed; a warning per failed write (and per
retry of a marker) buried the one line that said why. The count of failures in between is
kept for the recovery line.
"""

from __future__ import annotations

import logging

from onceflow.errors import ErrorCode, KafkaError
from onceflow.storage.failures import LogOffline, OutOfSpace


class WriteFailureLog:
    def __init__(self, logger: logging.Logger, what: str) -> None:
        self._log = logger
        self._what = what
        self.failures = 0  # since the last success

    def failed(self, detail: str, exc: BaseException) -> None:
        if self.failures == 0:
            self._log.warning(
                "%s failing (%s: %s); retried quietly until one succeeds",
                self._what,
                detail,
                exc,
            )
        self.failures += 1

    def succeeded(self) -> None:
        if self.failures:
            self._log.info("%s succeed again after %d failures", self._what, self.failures)
            self.failures = 0


def storage_error_code(exc: BaseException) -> ErrorCode | None:
    """Kafka's answer for a coordinator whose log write failed: a full disk is transient
    (COORDINATOR_NOT_AVAILABLE, retried here), an offline log is Kafka's lost partition
    (NOT_COORDINATOR). None for anything else."""
    if isinstance(exc, OutOfSpace):
        return ErrorCode.coordinator_not_available
    if isinstance(exc, LogOffline):
        return ErrorCode.not_coordinator
    if isinstance(exc, KafkaError) and exc.code is ErrorCode.kafka_storage_error:
        return ErrorCode.not_coordinator
    return None
