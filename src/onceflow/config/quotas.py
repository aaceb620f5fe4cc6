"""Client quota keys: the sample windows over which a client's byte rates and request time
are measured (Kafka's quota.window.num and quota.window.size.seconds)."""

from __future__ import annotations

from dataclasses import dataclass

from onceflow.config.kinds import INT, POSITIVE
from onceflow.config.spec import key


@dataclass(frozen=True)
class QuotaKeys:
    """Part of `BrokerConfig`: how client quotas are measured (the quotas themselves are
    set with AlterClientQuotas)."""

    # fmt: off
    quota_window_num: int = key(
        "quota.window.num", INT, 11, POSITIVE,
        "Samples kept in memory for client quotas: a client's rate is measured over this "
        "many windows.",
    )
    quota_window_size_seconds: int = key(
        "quota.window.size.seconds", INT, 1, POSITIVE,
        "Length of each client quota sample window. A request_percentage throttle lasts at "
        "most one window.",
    )
    # fmt: on
