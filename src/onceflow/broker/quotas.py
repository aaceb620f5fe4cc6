"""Client quotas: which quota binds a request's client, the rates measured against it, and
the changes AlterClientQuotas makes (Kafka's ClientQuotaManager and its ZooKeeper-era
admin path).

Three budgets, as Kafka's quota types: Produce (the bytes of produce requests,
`producer_byte_rate`), Fetch (the bytes of consumer fetch responses, `consumer_byte_rate`)
and Request (handler time as a percentage of one thread, `request_percentage`). Each rate
is measured over `quota.window.num` windows of `quota.window.size.seconds`. A request over
its budget is answered with `throttle_time_ms` and its connection is muted that long
(`throttling.py`). Per request this costs a dictionary lookup, one addition to a window and
a sum over the windows, whatever the request's record count; with no quota set, nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

from onceflow.broker.quota_entities import (
    CONSUMER_BYTE_RATE,
    CONTROLLER_MUTATION_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    BoundQuota,
    FilterComponent,
    MetricTags,
    QuotaEntity,
    Values,
    apply_ops,
    check_filter,
    matches,
    resolve,
)
from onceflow.broker.quota_sensors import QuotaSensor, Rate, TokenBucket
from onceflow.broker.quota_store import Quotas, QuotaStore
from onceflow.clock import Clock
from onceflow.errors import ErrorCode, KafkaError


class QuotaType(Enum):
    """Kafka's quota types; the value names their metrics' type, as Kafka's sensors do."""

    PRODUCE = "Produce"
    FETCH = "Fetch"
    REQUEST = "Request"


QUOTA_KEY = {
    QuotaType.PRODUCE: PRODUCER_BYTE_RATE,
    QuotaType.FETCH: CONSUMER_BYTE_RATE,
    QuotaType.REQUEST: REQUEST_PERCENTAGE,
}
PERCENT_PER_SECOND = 100.0  # a request_percentage of 100: one thread's whole time


def user_of(principal: str) -> str:
    """The user name of a principal (`User:alice` -> `alice`), as quota entities name it."""
    return principal.split(":", 1)[1] if ":" in principal else principal


class ClientQuotas:
    def __init__(self, store: QuotaStore, clock: Clock, samples: int, window_s: int) -> None:
        self.store = store
        self.clock = clock
        self.samples = samples
        self.window_ms = window_s * 1000
        self.quotas: Quotas = {}
        self.sensors: dict[tuple[QuotaType, MetricTags], QuotaSensor] = {}
        self._bound: dict[tuple[QuotaType, str, str], BoundQuota | None] = {}
        self._enforced: frozenset[QuotaType] = frozenset()
        self.mutation_buckets: dict[MetricTags, TokenBucket] = {}
        self._mutations_enforced = False

    # ---- the quotas ------------------------------------------------------------------

    def load(self) -> None:
        self.set_all(self.store.load())

    def set_all(self, quotas: Quotas) -> None:
        """Quotas read from the store (at start, or after another broker changed them)."""
        self.quotas = {entity: dict(values) for entity, values in quotas.items() if values}
        self._bound.clear()
        keys = {key for values in self.quotas.values() for key in values}
        self._enforced = frozenset(t for t, key in QUOTA_KEY.items() if key in keys)
        self._mutations_enforced = CONTROLLER_MUTATION_RATE in keys

    def enforces(self, quota_type: QuotaType) -> bool:
        """Whether any entity sets this type's quota (else there is nothing to measure)."""
        return quota_type in self._enforced

    @property
    def active(self) -> bool:
        return bool(self._enforced) or self._mutations_enforced

    def describe(
        self, components: Iterable[FilterComponent], strict: bool
    ) -> list[tuple[QuotaEntity, Values]]:
        """The entities a DescribeClientQuotas filter selects, with their quotas."""
        checked = check_filter(components)
        return [
            (entity, dict(values))
            for entity, values in sorted(self.quotas.items(), key=lambda item: item[0].path())
            if matches(entity, checked, strict)
        ]

    async def alter(
        self, entity: QuotaEntity, ops: list[tuple[str, float, bool]], validate_only: bool
    ) -> None:
        """Apply an AlterClientQuotas entry's operations (checked first), durably."""
        apply_ops(self.quotas.get(entity, {}), ops)  # refuse before writing anything
        if validate_only:
            return
        try:
            written = await self.store.update(entity, lambda current: apply_ops(current, ops))
        except KafkaError:
            raise
        except Exception as exc:  # the file or ZooKeeper could not be written
            raise KafkaError(
                ErrorCode.unknown_server_error, f"client quotas not written: {exc!r}"
            ) from exc
        quotas = dict(self.quotas)
        quotas[entity] = written
        self.set_all(quotas)

    # ---- measuring -------------------------------------------------------------------

    def bound(self, quota_type: QuotaType, principal: str, client_id: str) -> BoundQuota | None:
        cache_key = (quota_type, principal, client_id)
        try:
            return self._bound[cache_key]
        except KeyError:
            found = resolve(self.quotas, QUOTA_KEY[quota_type], user_of(principal), client_id)
            self._bound[cache_key] = found
            return found

    def sensor(self, quota_type: QuotaType, bound: BoundQuota) -> QuotaSensor:
        key = (quota_type, bound.tags)
        sensor = self.sensors.get(key)
        if sensor is None:
            sensor = QuotaSensor(Rate(self.samples, self.window_ms), bound.limit)
            self.sensors[key] = sensor
        sensor.limit = bound.limit
        return sensor

    def record(
        self, quota_type: QuotaType, principal: str, client_id: str, value: float
    ) -> tuple[int, QuotaSensor | None]:
        """Add bytes (or request-time percent) to the client's budget; the throttle time
        it earns and the budget's sensor (None: no quota binds the client)."""
        if quota_type not in self._enforced:
            return 0, None
        bound = self.bound(quota_type, principal, client_id)
        if bound is None:
            return 0, None
        sensor = self.sensor(quota_type, bound)
        # Kafka bounds only the request-time throttle, at one window.
        cap = self.window_ms if quota_type is QuotaType.REQUEST else None
        return sensor.record(value, self.clock.monotonic_ms(), cap), sensor

    def record_request_time(
        self, principal: str, client_id: str, seconds: float
    ) -> tuple[int, QuotaSensor | None]:
        return self.record(QuotaType.REQUEST, principal, client_id, seconds * PERCENT_PER_SECOND)

    def over_quota(
        self, quota_type: QuotaType, principal: str, client_id: str
    ) -> tuple[int, QuotaSensor | None]:
        """How long until the client's budget is back within its quota, recording nothing
        (0 when it is within now), and the budget's sensor."""
        bound = self.bound(quota_type, principal, client_id) if self.enforces(quota_type) else None
        if bound is None:
            return 0, None
        sensor = self.sensor(quota_type, bound)
        return sensor.delay_ms(self.clock.monotonic_ms()), sensor

    def unrecord(self, sensor: QuotaSensor, value: float) -> None:
        sensor.unrecord(value, self.clock.monotonic_ms())

    def mutation_bucket(self, principal: str, client_id: str) -> TokenBucket | None:
        """The client's controller_mutation_rate budget (KIP-599), None without one: a token
        bucket of `quota.window.num` x `quota.window.size.seconds` seconds' worth."""
        if not self._mutations_enforced:
            return None
        bound = resolve(self.quotas, CONTROLLER_MUTATION_RATE, user_of(principal), client_id)
        if bound is None:
            return None
        burst = bound.limit * self.samples * self.window_ms / 1000
        bucket = self.mutation_buckets.get(bound.tags)
        if bucket is None:
            now = self.clock.monotonic_ms()
            bucket = self.mutation_buckets[bound.tags] = TokenBucket(bound.limit, burst, burst, now)
        bucket.rate, bucket.burst = bound.limit, burst
        return bucket

    def fetch_limit_bytes(self, principal: str, client_id: str) -> int | None:
        """The most a consumer's fetch may return: what its quota allows over the windows
        but the current one (Kafka's getMaxValueInQuotaWindow). Without it a response
        larger than the budget would be refused for ever."""
        if QuotaType.FETCH not in self._enforced:
            return None
        bound = self.bound(QuotaType.FETCH, principal, client_id)
        if bound is None:
            return None
        return max(1, int(bound.limit * (self.samples - 1) * self.window_ms / 1000))
