"""What the participant client hands over and is configured with: the prepared state a
deciding process stores, the producer's settings, and the refusal of a stale state."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from onceflow.client.blocking import DEFAULT_CLIENT_ID
from onceflow.client.errors import ClientError, ConfigError, KafkaApiError
from onceflow.errors import ErrorCode
from onceflow.records.compression import Compression
from onceflow.security.client_config import ClientSecurity

__all__ = [
    "PreparedTransaction",
    "ProducerSettings",
    "StalePreparedTransaction",
    "TransactionStateError",
]


@dataclass(frozen=True, slots=True)
class PreparedTransaction:
    """A prepared transaction as `complete` needs it: which id, and the producer id and
    epoch its records carry (what InitProducerId with keepPreparedTxn reports as ongoing)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int

    def to_json(self) -> str:
        return json.dumps(
            {
                "transactional_id": self.transactional_id,
                "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch,
            },
            separators=(",", ":"),
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> PreparedTransaction:
        """The state `to_json` wrote; anything else is a ConfigError (never a KeyError)."""
        try:
            value = json.loads(text)
            return cls(
                str(value["transactional_id"]),
                int(value["producer_id"]),
                int(value["producer_epoch"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"not a prepared transaction: {exc}") from None

    def to_bytes(self) -> bytes:
        return self.to_json().encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> PreparedTransaction:
        return cls.from_json(data)


class StalePreparedTransaction(KafkaApiError):
    """A commit of a prepared state that is no longer the open transaction of its id: it
    was completed already, or aborted by a newer instance. Nothing was committed."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.invalid_txn_state, message)


class TransactionStateError(ClientError):
    """A call the producer's state does not allow (produce outside a transaction, commit
    after a failure that leaves only abort): the caller's mistake, nothing was sent."""


_COMPRESSION = {c.name.lower(): c for c in Compression}


@dataclass(frozen=True, slots=True)
class ProducerSettings:
    """The producer's settings, by Kafka's names (`batch.size`) or as keywords (`batch_size`)."""

    security: ClientSecurity | None = None
    client_id: str = DEFAULT_CLIENT_ID
    batch_size: int = 1_000_000
    linger_ms: float = 5.0
    compression: Compression = Compression.NONE
    request_timeout_ms: int = 30_000
    delivery_timeout_ms: int = 120_000
    transaction_timeout_ms: int = 60_000
    retry_backoff_ms: int = 100
    buffer_memory: int = 32 * 1024 * 1024  # sealed bytes waiting before produce waits
    two_phase: bool = True

    @classmethod
    def of(cls, settings: Mapping[str, Any]) -> ProducerSettings:
        """Settings from keywords or Kafka names; an unknown one is a ConfigError."""
        known = set(cls.__dataclass_fields__)
        values: dict[str, Any] = {}
        for name, value in settings.items():
            key = name.replace(".", "_")
            if key in ("compression_type", "compression_codec"):
                key = "compression"
            if key not in known:
                raise ConfigError(f"unknown producer setting {name!r}")
            values[key] = value
        compression = values.get("compression")
        if isinstance(compression, str):
            if compression.lower() not in _COMPRESSION:
                raise ConfigError(f"unknown compression type {compression!r}")
            values["compression"] = _COMPRESSION[compression.lower()]
        try:
            result = cls(**values)
        except TypeError as exc:
            raise ConfigError(str(exc)) from None
        if result.batch_size <= 0:
            raise ConfigError("batch.size must be positive")
        return result
