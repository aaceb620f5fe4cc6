"""Client quotas without a broker: entities and Kafka's precedence, the checks of
AlterClientQuotas and DescribeClientQuotas filters, sampled rates and throttle times, the
quota manager's budgets and the file store across a reload."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from onceflow.broker.quota_entities import (
    DEFAULT,
    MATCH_ANY,
    MATCH_DEFAULT,
    MATCH_EXACT,
    FilterComponent,
    QuotaEntity,
    apply_ops,
    check_filter,
    matches,
    parse_entity,
    resolve,
)
from onceflow.broker.quota_sensors import QuotaSensor, Rate, TokenBucket, throttle_ms
from onceflow.broker.quota_store import LocalQuotaStore
from onceflow.broker.quotas import ClientQuotas, QuotaType, user_of
from onceflow.clock import ManualClock
from onceflow.errors import ErrorCode, KafkaError
from onceflow.storage.fs import RealFileSystem

KEY = "producer_byte_rate"
ALL_LEVELS = {
    QuotaEntity("alice", "app"): 1.0,
    QuotaEntity("alice", DEFAULT): 2.0,
    QuotaEntity("alice", None): 3.0,
    QuotaEntity(DEFAULT, "app"): 4.0,
    QuotaEntity(DEFAULT, DEFAULT): 5.0,
    QuotaEntity(DEFAULT, None): 6.0,
    QuotaEntity(None, "app"): 7.0,
    QuotaEntity(None, DEFAULT): 8.0,
}


def test_precedence_is_kafkas_most_specific_first() -> None:
    """Remove the winning level one at a time: the next one in Kafka's order binds."""
    quotas = {entity: {KEY: limit} for entity, limit in ALL_LEVELS.items()}
    for expected in range(1, 9):
        bound = resolve(quotas, KEY, "alice", "app")
        assert bound is not None and bound.limit == float(expected)
        del quotas[bound.entity]
    assert resolve(quotas, KEY, "alice", "app") is None


@pytest.mark.parametrize(
    ("entity", "tags"),
    [
        (QuotaEntity("alice", "app"), ("alice", "app")),
        (QuotaEntity("alice", None), ("alice", "")),  # the user's clients share one budget
        (QuotaEntity(DEFAULT, DEFAULT), ("alice", "app")),
        (QuotaEntity(DEFAULT, None), ("alice", "")),
        (QuotaEntity(None, DEFAULT), ("", "app")),  # each client id its own budget
    ],
)
def test_the_binding_entity_says_who_shares_the_budget(
    entity: QuotaEntity, tags: tuple[str, str]
) -> None:
    bound = resolve({entity: {KEY: 10.0}}, KEY, "alice", "app")
    assert bound is not None and bound.tags == tags


def test_a_quota_of_another_type_does_not_bind() -> None:
    quotas = {QuotaEntity(None, "app"): {"consumer_byte_rate": 5.0}}
    assert resolve(quotas, KEY, "alice", "app") is None


def test_entity_paths_are_kafkas_znodes_and_round_trip() -> None:
    cases = {
        QuotaEntity("alice", "app"): "users/alice/clients/app",
        QuotaEntity(DEFAULT, DEFAULT): "users/<default>/clients/<default>",
        QuotaEntity(None, "my client/1"): "clients/my%20client%2F1",
        QuotaEntity("<default>", None): "users/%3Cdefault%3E",  # a user so named is not the default
    }
    for entity, path in cases.items():
        assert entity.path() == path
        assert QuotaEntity.from_path(path) == entity


def test_parse_entity_refuses_what_kafka_refuses() -> None:
    assert parse_entity([("user", None), ("client-id", "c")]) == QuotaEntity(DEFAULT, "c")
    for bad in ([], [("user", "a"), ("user", "b")], [("topic", "x")], [("ip", "1.2.3.4")]):
        with pytest.raises(KafkaError) as caught:
            parse_entity(bad)
        assert caught.value.code is ErrorCode.invalid_request


def test_apply_ops_sets_removes_and_checks_values() -> None:
    values = apply_ops({}, [(KEY, 1024.0, False), ("request_percentage", 12.5, False)])
    assert values == {KEY: 1024.0, "request_percentage": 12.5}
    assert apply_ops(values, [(KEY, 0.0, True)]) == {"request_percentage": 12.5}
    bad_ops = [
        [("no_such_quota", 1.0, False)],
        [(KEY, 10.5, False)],  # a byte rate is a Long
        [(KEY, 0.0, False)],
        [("request_percentage", -1.0, False)],
        [(KEY, float("nan"), False)],
        [(KEY, 1.0, False), (KEY, 2.0, False)],
    ]
    for ops in bad_ops:
        with pytest.raises(KafkaError) as caught:
            apply_ops(values, ops)
        assert caught.value.code is ErrorCode.invalid_request


def test_filters_match_exact_default_any_and_strict() -> None:
    user_client = QuotaEntity("alice", "app")
    user_only = QuotaEntity("alice", None)
    default_user = QuotaEntity(DEFAULT, None)

    def selected(components: list[FilterComponent], strict: bool) -> set[QuotaEntity]:
        checked = check_filter(components)
        return {e for e in (user_client, user_only, default_user) if matches(e, checked, strict)}

    alice = FilterComponent("user", MATCH_EXACT, "alice")
    assert selected([alice], strict=False) == {user_client, user_only}
    assert selected([alice], strict=True) == {user_only}
    assert selected([FilterComponent("user", MATCH_DEFAULT, None)], False) == {default_user}
    assert selected([FilterComponent("user", MATCH_ANY, None)], True) == {user_only, default_user}
    assert selected([], strict=False) == {user_client, user_only, default_user}
    for bad in (
        [FilterComponent("", MATCH_ANY, None)],
        [alice, alice],
        [FilterComponent("user", 7, None)],
        [FilterComponent("user", MATCH_EXACT, None)],
    ):
        with pytest.raises(KafkaError):
            check_filter(bad)


def test_throttle_time_is_kafkas() -> None:
    # QuotaUtils: (observed - quota) / quota * window, here 100 vs 50 over 2 s.
    assert throttle_ms(100.0, 50.0, 2000) == 2000
    assert throttle_ms(18.2, 18.2, 11_000) == 0
    assert throttle_ms(16.5, 20.4, 11_000) == 0


def test_rate_counts_at_least_all_but_one_window() -> None:
    rate = Rate(samples=11, window_ms=1000)
    rate.record(10_000.0, now_ms=0)
    # A burst at once is spread over 10 windows, not over the 0 ms since it began.
    assert rate.window_size_ms(0) == 10_000
    assert rate.per_second(0) == pytest.approx(1000.0)
    for second in range(1, 30):
        rate.record(500.0, now_ms=second * 1000)
    # Steady 500 B/s once the burst has aged out of the 11 windows.
    assert rate.per_second(29_000) == pytest.approx(500.0 * 11 / 10, rel=0.01)


def test_a_sensor_throttles_in_proportion_and_the_request_time_bound_caps() -> None:
    sensor = QuotaSensor(Rate(samples=3, window_ms=1000), limit=100.0)
    assert sensor.record(150.0, now_ms=0) == 0  # 150 over 2 s: 75/s, within
    delay = sensor.record(250.0, now_ms=10)  # 400 over 2.01 s: about twice the quota
    assert delay == throttle_ms(400 / 2.010, 100.0, 2010) == 1990
    assert sensor.record(1000.0, now_ms=20, bound_ms=1000) == 1000


def test_manager_measures_only_bound_clients_and_shares_budgets() -> None:
    clock = ManualClock()
    quotas = ClientQuotas(_MemoryStore(), clock, samples=2, window_s=1)
    quotas.set_all({QuotaEntity("alice", None): {KEY: 1000.0}})
    assert quotas.enforces(QuotaType.PRODUCE) and not quotas.enforces(QuotaType.FETCH)
    assert quotas.record(QuotaType.PRODUCE, "User:bob", "x", 10**6) == (0, None)
    quotas.record(QuotaType.PRODUCE, "User:alice", "one", 800)
    delay, sensor = quotas.record(QuotaType.PRODUCE, "User:alice", "two", 800)
    assert sensor is not None and delay > 0  # both of alice's clients drew on one budget
    assert list(quotas.sensors) == [(QuotaType.PRODUCE, ("alice", ""))]
    assert quotas.fetch_limit_bytes("User:alice", "one") is None
    assert user_of("User:alice") == "alice"


def test_a_consumer_fetch_is_capped_at_its_quota_window() -> None:
    quotas = ClientQuotas(_MemoryStore(), ManualClock(), samples=11, window_s=1)
    quotas.set_all({QuotaEntity(None, DEFAULT): {"consumer_byte_rate": 1000.0}})
    assert quotas.fetch_limit_bytes("User:ANONYMOUS", "c") == 10_000


def test_alter_checks_before_writing_and_the_file_survives_a_reload(tmp_path: Path) -> None:
    fs = RealFileSystem()
    store = LocalQuotaStore(fs, str(tmp_path))
    quotas = ClientQuotas(store, ManualClock(), samples=11, window_s=1)
    quotas.load()
    entity = QuotaEntity(DEFAULT, "app")

    async def scenario() -> None:
        await quotas.alter(entity, [(KEY, 2048.0, False)], validate_only=True)
        assert quotas.quotas == {}
        await quotas.alter(entity, [(KEY, 2048.0, False)], validate_only=False)
        with pytest.raises(KafkaError):
            await quotas.alter(entity, [("nope", 1.0, False)], validate_only=False)

    asyncio.run(scenario())
    again = ClientQuotas(LocalQuotaStore(fs, str(tmp_path)), ManualClock(), 11, 1)
    again.load()
    assert again.quotas == {entity: {KEY: 2048.0}}
    assert again.describe([FilterComponent("client-id", MATCH_EXACT, "app")], False) == [
        (entity, {KEY: 2048.0})
    ]

    async def remove() -> None:
        await again.alter(entity, [(KEY, 0.0, True)], validate_only=False)

    asyncio.run(remove())
    last = ClientQuotas(LocalQuotaStore(fs, str(tmp_path)), ManualClock(), 11, 1)
    last.load()
    assert last.quotas == {} and not last.active


def test_a_token_bucket_goes_below_zero_and_refills_at_its_rate() -> None:
    bucket = TokenBucket(rate=2.0, burst=10.0, tokens=10.0, last_ms=0)
    bucket.take(8, now_ms=0)
    assert bucket.delay_ms(0) == 0  # 2 left
    bucket.take(6, now_ms=0)  # a mutation may take it below zero: -4
    assert bucket.delay_ms(0) == 2000  # 4 tokens at 2 a second
    assert bucket.delay_ms(1000) == 1000
    assert bucket.delay_ms(60_000) == 0 and bucket.tokens == 10.0  # never above the burst


def test_mutation_buckets_follow_the_binding_entity() -> None:
    clock = ManualClock()
    quotas = ClientQuotas(_MemoryStore(), clock, samples=3, window_s=1)
    assert quotas.mutation_bucket("User:a", "c") is None
    quotas.set_all({QuotaEntity("a", None): {"controller_mutation_rate": 2.0}})
    assert quotas.active
    bucket = quotas.mutation_bucket("User:a", "c")
    assert bucket is not None and bucket.burst == 6.0
    assert quotas.mutation_bucket("User:a", "other") is bucket  # the user's one budget
    assert quotas.mutation_bucket("User:b", "c") is None


class _MemoryStore:
    def load(self) -> dict[QuotaEntity, dict[str, float]]:
        return {}

    async def update(self, entity: QuotaEntity, change: object) -> dict[str, float]:
        raise AssertionError("not written in these tests")
