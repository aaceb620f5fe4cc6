"""The Spark source's range check counts only a partition Kafka says is gone as lost
data. A cluster that cannot be asked fails the task (Spark retries it) instead of letting
failOnDataLoss=false skip records that still exist."""

from __future__ import annotations

from typing import Any

import pytest

from onceflow.spark import reader
from onceflow.spark.reader import KafkaMetadata, KafkaRange, PartitionGone
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


class _Meta:
    def __init__(self, failure: Exception) -> None:
        self.failure = failure

    def earliest(self, _tps: Any) -> Any:
        raise self.failure

    latest = earliest


def _range_reader(failure: Exception, fail_on_data_loss: bool) -> Any:
    rr = object.__new__(reader._RangeReader)
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
    with pytest.raises(reader.DataLossError):
        gone._check_range(5, 10)
