"""The Spark source's range check counts only a partition Kafka says is gone as lost
data. A cluster that cannot be asked fails the task (Spark retries it) instead of letting
failOnDataLoss=false skip records that still exist."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from confluent_kafka import KafkaError, KafkaException

from onceflow.spark import range_reader, source_metadata
from onceflow.spark.range_reader import KafkaRange
from onceflow.spark.source_metadata import KafkaMetadata, PartitionGone
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import create_topic


def test_list_offsets_of_a_deleted_topic_is_partition_gone(shared_broker: BrokerProcess) -> None:
    meta = KafkaMetadata({"bootstrap.servers": shared_broker.bootstrap})
    try:
        create_topic(shared_broker.bootstrap, "range-check-live", 1)
        assert meta.earliest([("range-check-live", 0)]) == {("range-check-live", 0): 0}
        with pytest.raises(PartitionGone):
            meta.earliest([("range-check-never-created", 0)])
    finally:
        meta.close()


class _LeaderlessAdmin:
    """An AdminClient for one partition "t"-0 whose ListOffsets fails `failures` times as
    librdkafka fails it while the partition has no leader (its broker died, the controller
    has not yet elected another): _NOENT, "no leaders found"."""

    failures: ClassVar[int] = 2
    calls: ClassVar[int] = 0

    def __init__(self, _conf: Any) -> None:
        pass

    def poll(self, _timeout: float = -1) -> int:
        return 0

    def list_topics(self, _topic: str | None = None, timeout: float = -1) -> Any:
        partition = SimpleNamespace(leader=-1)
        return SimpleNamespace(topics={"t": SimpleNamespace(error=None, partitions={0: partition})})

    def list_offsets(self, requests: dict[Any, Any], **_kwargs: Any) -> dict[Any, Future[Any]]:
        type(self).calls += 1
        answer: Future[Any] = Future()
        if type(self).calls <= self.failures:
            self.fail(answer)
        else:
            answer.set_result(SimpleNamespace(offset=7))
        return dict.fromkeys(requests, answer)

    def fail(self, answer: Future[Any]) -> None:
        no_leader = KafkaError(
            KafkaError._NOENT, "Failed to query partition leaders: No leaders found"
        )
        answer.set_exception(KafkaException(no_leader))


def test_list_offsets_waits_out_a_partition_without_a_leader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Seen in the Spark pipeline test on a cluster: a broker killed, its partitions leaderless
    # for the ~12 s until the controller notices; every task attempt failed at once.
    monkeypatch.setattr(source_metadata, "AdminClient", _LeaderlessAdmin)
    monkeypatch.setattr(_LeaderlessAdmin, "calls", 0)
    monkeypatch.setattr(source_metadata, "LIST_OFFSETS_BACKOFF_S", 0.01)
    meta = KafkaMetadata({"bootstrap.servers": "127.0.0.1:1"})
    assert meta.earliest([("t", 0)]) == {("t", 0): 7}
    assert _LeaderlessAdmin.calls == 3


class _Meta:
    def __init__(self, failure: Exception) -> None:
        self.failure = failure

    def earliest(self, _tps: Any) -> Any:
        raise self.failure

    latest = earliest


def _range_reader(failure: Exception, fail_on_data_loss: bool) -> Any:
    rr = object.__new__(range_reader.RangeReader)
    rr.r = KafkaRange("t", 0, 5, 10)
    rr.name = "t-0"
    rr.meta = _Meta(failure)
    rr.opts = type("Opts", (), {"fail_on_data_loss": fail_on_data_loss})()
    return rr


def test_only_a_gone_partition_is_skipped_without_failondataloss() -> None:
    gone = _range_reader(PartitionGone("UNKNOWN_TOPIC_OR_PART"), fail_on_data_loss=False)
    assert gone._check_range(5, 10) == (5, 5)  # nothing left to read: skipped
    unreachable = _range_reader(RuntimeError("ListOffsets failed: _TRANSPORT"), False)
    with pytest.raises(RuntimeError, match="_TRANSPORT"):
        unreachable._check_range(5, 10)  # the task fails and Spark retries it


def test_a_gone_partition_with_failondataloss_is_data_loss() -> None:
    gone = _range_reader(PartitionGone("UNKNOWN_TOPIC_OR_PART"), fail_on_data_loss=True)
    with pytest.raises(range_reader.DataLossError):
        gone._check_range(5, 10)


class _SilentAdmin(_LeaderlessAdmin):
    """An AdminClient whose first ListOffsets is never answered, as librdkafka left one
    request to a partition leader killed with -9 unanswered for over a minute although the
    broker was back after 17 s (the Spark pipeline test on a cluster)."""

    instances: ClassVar[int] = 0

    def __init__(self, conf: Any) -> None:
        super().__init__(conf)
        type(self).instances += 1

    def list_offsets(self, requests: dict[Any, Any], **_kwargs: Any) -> dict[Any, Future[Any]]:
        type(self).calls += 1
        answer: Future[Any] = Future()
        if type(self).calls > 1:
            answer.set_result(SimpleNamespace(offset=7))
        return dict.fromkeys(requests, answer)


def test_an_unanswered_list_offsets_is_asked_again_on_a_new_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(source_metadata, "AdminClient", _SilentAdmin)
    monkeypatch.setattr(_SilentAdmin, "calls", 0)
    monkeypatch.setattr(_SilentAdmin, "instances", 0)
    monkeypatch.setattr(source_metadata, "LIST_OFFSETS_ATTEMPT_S", 0.2)
    monkeypatch.setattr(source_metadata, "LIST_OFFSETS_BACKOFF_S", 0.01)
    meta = KafkaMetadata({"bootstrap.servers": "127.0.0.1:1"})
    assert meta.latest([("t", 0)]) == {("t", 0): 7}
    assert (_SilentAdmin.calls, _SilentAdmin.instances) == (2, 2)


def test_list_offsets_unanswered_until_the_deadline_fails_the_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(source_metadata, "AdminClient", _SilentAdmin)
    monkeypatch.setattr(_SilentAdmin, "calls", -1000)  # never answered
    monkeypatch.setattr(source_metadata, "LIST_OFFSETS_ATTEMPT_S", 0.2)
    monkeypatch.setattr(source_metadata, "ADMIN_TIMEOUT_S", 0.5)
    monkeypatch.setattr(source_metadata, "LIST_OFFSETS_BACKOFF_S", 0.01)
    meta = KafkaMetadata({"bootstrap.servers": "127.0.0.1:1"})
    with pytest.raises(RuntimeError, match="no answer"):
        meta.latest([("t", 0)])


class _OffsetlessAdmin(_LeaderlessAdmin):
    """Its first `failures` ListOffsets answers carry no offset and no error (librdkafka's
    OFFSET_INVALID), as one did in the Spark pipeline test on a cluster while a new leader
    took over: the query took -1001 for an LSO that went back."""

    def fail(self, answer: Future[Any]) -> None:
        answer.set_result(SimpleNamespace(offset=-1001))


def test_an_answer_without_an_offset_is_asked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source_metadata, "AdminClient", _OffsetlessAdmin)
    monkeypatch.setattr(_OffsetlessAdmin, "calls", 0)
    monkeypatch.setattr(source_metadata, "LIST_OFFSETS_BACKOFF_S", 0.01)
    meta = KafkaMetadata({"bootstrap.servers": "127.0.0.1:1"})
    assert meta.latest([("t", 0)]) == {("t", 0): 7}
    assert _OffsetlessAdmin.calls == _OffsetlessAdmin.failures + 1


def test_answers_without_an_offset_until_the_deadline_fail(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(source_metadata, "AdminClient", _OffsetlessAdmin)
    monkeypatch.setattr(_OffsetlessAdmin, "calls", -1_000_000)  # never an offset
    monkeypatch.setattr(source_metadata, "ADMIN_TIMEOUT_S", 0.3)
    monkeypatch.setattr(source_metadata, "LIST_OFFSETS_BACKOFF_S", 0.01)
    meta = KafkaMetadata({"bootstrap.servers": "127.0.0.1:1"})
    with pytest.raises(RuntimeError, match="no offset"):
        meta.earliest([("t", 0)])


class _NewLeaderAdmin(_LeaderlessAdmin):
    """Its ListOffsets fail with OFFSET_NOT_AVAILABLE more times than a retriable error is
    tried: a leader just elected, its high watermark not yet past the start of its epoch."""

    failures: ClassVar[int] = source_metadata.LIST_OFFSETS_ATTEMPTS + 2

    def fail(self, answer: Future[Any]) -> None:
        not_yet = KafkaError(KafkaError.OFFSET_NOT_AVAILABLE, "Broker: Offset not available")
        answer.set_exception(KafkaException(not_yet))


def test_list_offsets_waits_out_a_new_leaders_high_watermark(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(source_metadata, "AdminClient", _NewLeaderAdmin)
    monkeypatch.setattr(_NewLeaderAdmin, "calls", 0)
    monkeypatch.setattr(source_metadata, "LIST_OFFSETS_BACKOFF_S", 0.01)
    meta = KafkaMetadata({"bootstrap.servers": "127.0.0.1:1"})
    assert meta.latest([("t", 0)]) == {("t", 0): 7}
    assert _NewLeaderAdmin.calls == _NewLeaderAdmin.failures + 1
