"""Kafka's share coordinator API on the wire (the share persister's requests, Kafka 4.2's
versions): InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState v0-1,
ReadShareGroupStateSummary v0-1 (v1: the delivery complete count) and
DeleteShareGroupState, each answered per partition with Kafka's codes (a key with no state
reads as Kafka's uninitialized one: start offset -1)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from onceflow.coordinator.share.state import RecordState
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from tests.helpers.broker import BrokerProcess
from tests.helpers.share import set_group_configs
from tests.helpers.wire import RawConnection
from tests.integration.test_core_versions_wire import entity, request

GROUP = "g"


def _partition(api: int, version: int, name: str, **fields: Any) -> Any:
    return entity(api, version, name, partition=0, **fields)


def _call(
    conn: RawConnection, api: int, version: int, topic_id: uuid.UUID, data: str, **p: Any
) -> Any:
    partition = _partition(api, version, "PartitionData", **p)
    topic = entity(api, version, data, topic_id=topic_id, partitions=(partition,))
    answer = conn.call(request(api, version, group_id=GROUP, topics=(topic,)))
    return answer.results[0].partitions[0]


def _summary(conn: RawConnection, topic_id: uuid.UUID, version: int = 1) -> Any:
    return _call(
        conn,
        ApiKey.READ_SHARE_GROUP_STATE_SUMMARY,
        version,
        topic_id,
        "ReadStateSummaryData",
        leader_epoch=0,
    )


def _write(conn: RawConnection, topic_id: uuid.UUID, epoch: int, start: int, *batches: Any) -> Any:
    api = ApiKey.WRITE_SHARE_GROUP_STATE
    return _call(
        conn,
        api,
        1,
        topic_id,
        "WriteStateData",
        state_epoch=epoch,
        leader_epoch=0,
        start_offset=start,
        delivery_complete_count=-1,
        state_batches=tuple(
            entity(
                api,
                1,
                "StateBatch",
                first_offset=first,
                last_offset=last,
                delivery_state=int(state),
                delivery_count=1,
            )
            for first, last, state in batches
        ),
    )


@pytest.mark.parametrize("summary_version", [0, 1])
def test_the_share_coordinator_api(broker: BrokerProcess, summary_version: int) -> None:
    set_group_configs(broker.bootstrap, GROUP, {"share.auto.offset.reset": "earliest"})
    topic_id = uuid.uuid4()
    with RawConnection(broker.bootstrap) as conn:
        missing = _summary(conn, topic_id, summary_version)
        assert (missing.error_code, missing.start_offset) == (ErrorCode.none, -1)  # no state
        init = _call(
            conn,
            ApiKey.INITIALIZE_SHARE_GROUP_STATE,
            0,
            topic_id,
            "InitializeStateData",
            state_epoch=3,
            start_offset=7,
        )
        assert init.error_code == ErrorCode.none
        summary = _summary(conn, topic_id, summary_version)
        assert (summary.error_code, summary.state_epoch, summary.start_offset) == (0, 3, 7)
        acked, avail = RecordState.ACKNOWLEDGED, RecordState.AVAILABLE
        written = _write(conn, topic_id, 3, 7, (7, 7, avail), (8, 9, acked), (10, 12, avail))
        assert written.error_code == ErrorCode.none
        summary = _summary(conn, topic_id, summary_version)
        assert summary.start_offset == 7
        if summary_version >= 1:
            assert summary.delivery_complete_count == 2
        read = _call(
            conn, ApiKey.READ_SHARE_GROUP_STATE, 0, topic_id, "ReadStateData", leader_epoch=0
        )
        assert [(b.first_offset, b.last_offset) for b in read.state_batches] == [
            (7, 7),
            (8, 9),
            (10, 12),
        ]
        # An older state epoch is fenced; the stored state stands.
        fenced = _call(
            conn,
            ApiKey.INITIALIZE_SHARE_GROUP_STATE,
            0,
            topic_id,
            "InitializeStateData",
            state_epoch=2,
            start_offset=0,
        )
        assert fenced.error_code == ErrorCode.fenced_state_epoch
        assert _summary(conn, topic_id, summary_version).start_offset == 7
        deleted = _call(conn, ApiKey.DELETE_SHARE_GROUP_STATE, 0, topic_id, "DeleteStateData")
        assert deleted.error_code == ErrorCode.none
        gone = _summary(conn, topic_id, summary_version)
        assert (gone.error_code, gone.start_offset) == (ErrorCode.none, -1)
        read = _call(
            conn, ApiKey.READ_SHARE_GROUP_STATE, 0, topic_id, "ReadStateData", leader_epoch=0
        )
        assert (read.error_code, read.start_offset, read.state_batches) == (0, -1, ())
