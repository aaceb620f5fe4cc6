"""Share groups' group-level configs (KIP-848/932's GROUP config resource): Kafka's
`share.*` keys, each defaulting to its broker key and bounded by its min and max."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from onceflow.config import BrokerConfig

AUTO_OFFSET_RESET = "share.auto.offset.reset"
ISOLATION_LEVEL = "share.isolation.level"
LOCK_DURATION = "share.record.lock.duration.ms"
DELIVERY_COUNT_LIMIT = "share.delivery.count.limit"
SESSION_TIMEOUT = "share.session.timeout.ms"
HEARTBEAT_INTERVAL = "share.heartbeat.interval.ms"


@dataclass(frozen=True, slots=True)
class ShareGroupSettings:
    auto_offset_reset: str = "latest"
    isolation_level: str = "read_uncommitted"
    lock_duration_ms: int = 30_000
    delivery_count_limit: int = 5
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == "read_committed"

    @property
    def reset_duration_ms(self) -> int | None:
        """by_duration:<ISO-8601 duration>'s duration (None: earliest or latest)."""
        if not self.auto_offset_reset.startswith(BY_DURATION):
            return None
        return parse_duration_ms(self.auto_offset_reset[len(BY_DURATION) :])


#: Java's Duration.parse format, PnDTnHnMn.nS (non-negative, as Kafka requires here).
_DURATION = re.compile(
    r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)(?:[.,](\d{1,9}))?S)?)?",
    re.IGNORECASE,
)
BY_DURATION = "by_duration:"


def parse_duration_ms(text: str) -> int:
    """An ISO-8601 duration in ms; ValueError when it is not one."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or not any(match.group(i) for i in (1, 2, 3, 4)):
        raise ValueError(f"{text!r} is not an ISO-8601 duration such as PT1H or P1DT30M")
    days, hours, minutes, seconds, fraction = match.groups()
    ms = int(days or 0) * 86_400_000 + int(hours or 0) * 3_600_000 + int(minutes or 0) * 60_000
    return ms + int(seconds or 0) * 1000 + int(((fraction or "") + "000")[:3])


class InvalidGroupConfig(ValueError):
    pass


class GroupConfigs:
    def __init__(self, broker: BrokerConfig, stored: Callable[[str], dict[str, str]]) -> None:
        """`stored`: a group's overrides as `__share_group_state` holds them here."""
        self._broker = broker
        self._local = stored
        #: Overrides of groups whose partition another broker leads, as last read there.
        self.remote: dict[str, dict[str, str]] = {}

    def _stored(self, group_id: str) -> dict[str, str]:
        remote = self.remote.get(group_id)
        return dict(remote) if remote is not None else self._local(group_id)

    def set_broker_config(self, broker: BrokerConfig) -> None:
        self._broker = broker

    def defaults(self) -> dict[str, str]:
        b = self._broker
        return {
            AUTO_OFFSET_RESET: "latest",
            ISOLATION_LEVEL: "read_uncommitted",
            LOCK_DURATION: str(b.group_share_record_lock_duration_ms),
            DELIVERY_COUNT_LIMIT: str(b.group_share_delivery_count_limit),
            SESSION_TIMEOUT: str(b.group_share_session_timeout_ms),
            HEARTBEAT_INTERVAL: str(b.group_share_heartbeat_interval_ms),
        }

    def overrides(self, group_id: str) -> dict[str, str]:
        return self._stored(group_id)

    def of(self, group_id: str) -> ShareGroupSettings:
        values = {**self.defaults(), **self._stored(group_id)}
        return ShareGroupSettings(
            auto_offset_reset=values[AUTO_OFFSET_RESET],
            isolation_level=values[ISOLATION_LEVEL],
            lock_duration_ms=int(values[LOCK_DURATION]),
            delivery_count_limit=int(values[DELIVERY_COUNT_LIMIT]),
            session_timeout_ms=int(values[SESSION_TIMEOUT]),
            heartbeat_interval_ms=int(values[HEARTBEAT_INTERVAL]),
        )

    def validate(self, configs: Mapping[str, str]) -> None:
        b = self._broker
        bounds = {
            LOCK_DURATION: (
                b.group_share_min_record_lock_duration_ms,
                b.group_share_max_record_lock_duration_ms,
            ),
            DELIVERY_COUNT_LIMIT: (
                b.group_share_min_delivery_count_limit,
                b.group_share_max_delivery_count_limit,
            ),
            SESSION_TIMEOUT: (
                b.group_share_min_session_timeout_ms,
                b.group_share_max_session_timeout_ms,
            ),
            HEARTBEAT_INTERVAL: (
                b.group_share_min_heartbeat_interval_ms,
                b.group_share_max_heartbeat_interval_ms,
            ),
        }
        for name, value in configs.items():
            if name == AUTO_OFFSET_RESET:
                try:
                    if value not in ("earliest", "latest"):
                        if not value.startswith(BY_DURATION):
                            raise ValueError(value)
                        parse_duration_ms(value[len(BY_DURATION) :])
                except ValueError:
                    raise InvalidGroupConfig(
                        f"Invalid value {value} for configuration {name}: "
                        "must be earliest, latest or by_duration:<ISO-8601 duration>"
                    ) from None
            elif name == ISOLATION_LEVEL:
                if value not in ("read_committed", "read_uncommitted"):
                    raise InvalidGroupConfig(f"Invalid value {value} for configuration {name}")
            elif name in bounds:
                low, high = bounds[name]
                try:
                    number = int(value)
                except ValueError:
                    raise InvalidGroupConfig(
                        f"Invalid value {value} for configuration {name}: not a number"
                    ) from None
                if not low <= number <= high:
                    raise InvalidGroupConfig(
                        f"Invalid value {value} for configuration {name}: "
                        f"must be between {low} and {high}"
                    )
            else:
                raise InvalidGroupConfig(f"Unknown group config name: {name}")
