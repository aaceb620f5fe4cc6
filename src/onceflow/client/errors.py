"""The client's own errors: each message is one line, naming the broker, that a caller can
show as it is (the CLI prints it, the console answers it, a broker logs it)."""

from __future__ import annotations

from onceflow.errors import ErrorCode

__all__ = [
    "ClientError",
    "ConfigError",
    "InvalidArgument",
    "KafkaApiError",
    "NotFound",
    "Unreachable",
    "UnreadableResponse",
    "UnsupportedVersion",
    "error_name",
]


def error_name(code: int) -> str:
    """Kafka's name for an error code, as its tools print it (UNKNOWN_TOPIC_OR_PARTITION)."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"error code {code}"


class ClientError(Exception):
    """Any failure of a request through `onceflow.client`."""


class Unreachable(ClientError):
    """The broker could not be reached, did not answer in time, closed the connection, or
    refused the TLS handshake (or, on a broker's own links, its credentials)."""


class UnreadableResponse(ClientError):
    """A response frame that is not the answer expected (another correlation id, a size no
    broker sends), or not Kafka at all."""


class UnsupportedVersion(ClientError):
    """The broker lacks an API, or no version of it is spoken by both sides."""


class ConfigError(ClientError):
    """A client setting that cannot be used (a bootstrap address, a TLS file, a property);
    found before anything is sent."""


class KafkaApiError(ClientError):
    """A broker answered with an error code; `code` lets callers act on the specific one."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code

    @property
    def name(self) -> str:
        return error_name(self.code)


class InvalidArgument(ClientError):
    """The broker refused an argument the caller chose (a pattern, a state filter): the
    caller's mistake, which the CLI shows as a usage error."""


class NotFound(ClientError):
    """The broker's answer lacks what was asked for (a transactional id it did not
    describe, no open transaction at the offset given)."""
