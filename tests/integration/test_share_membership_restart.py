"""Share-group membership survives a broker kill -9 (Kafka 4.2 keeps it in
`__consumer_offsets`): after the restart the group has its epoch and its members, each
member at its epoch carries on, an older epoch is fenced, an unknown member is
UNKNOWN_MEMBER_ID, a new member gets the next epoch, a member that left stays gone, and a
member that does not come back expires after its session."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from tests.helpers.broker import BrokerProcess
from tests.helpers.share import SHORT_LOCKS, create_topic
from tests.helpers.wire import RawConnection
from tests.integration.test_core_versions_wire import request
from tests.integration.test_share_wire import _heartbeat

NOT_READY = {
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_not_available,
}


def _beat(broker: BrokerProcess, group: str, member: str, epoch: int, topics: Any) -> Any:
    """A heartbeat, asked again while the coordinator is still loading."""
    deadline = time.monotonic() + 30
    while True:
        with RawConnection(broker.bootstrap) as conn:
            answer = _heartbeat(conn, group, member, epoch, topics)
        if answer.error_code not in NOT_READY or time.monotonic() > deadline:
            return answer
        time.sleep(0.2)


def _members(broker: BrokerProcess, group: str) -> dict[str, int]:
    with RawConnection(broker.bootstrap) as conn:
        answer = conn.call(
            request(
                ApiKey.SHARE_GROUP_DESCRIBE,
                1,
                group_ids=(group,),
                include_authorized_operations=False,
            )
        )
    (described,) = answer.groups
    assert described.error_code == ErrorCode.none
    return {m.member_id: m.member_epoch for m in described.members}


@pytest.mark.broker_overrides(SHORT_LOCKS)
def test_membership_survives_a_broker_kill(broker: BrokerProcess) -> None:
    topic, group = f"t-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    create_topic(broker.bootstrap, topic)
    first = _beat(broker, group, "m1", 0, (topic,))
    assert first.error_code == ErrorCode.none
    second = _beat(broker, group, "m2", 0, (topic,))
    epoch = second.member_epoch
    assert epoch > first.member_epoch
    assert _beat(broker, group, "m1", first.member_epoch, None).member_epoch == epoch
    assert _beat(broker, group, "gone", 0, (topic,)).error_code == ErrorCode.none
    left = _beat(broker, group, "gone", -1, None)
    assert left.error_code == ErrorCode.none
    epoch = _beat(broker, group, "m1", epoch, None).member_epoch
    assert _beat(broker, group, "m2", second.member_epoch, None).member_epoch == epoch
    assert _members(broker, group) == {"m1": epoch, "m2": epoch}

    broker.restart(kill=True)

    assert _beat(broker, group, "m1", epoch, None).error_code == ErrorCode.none
    assert _members(broker, group) == {"m1": epoch, "m2": epoch}
    back = _beat(broker, group, "m1", epoch, None)
    assert (back.error_code, back.member_epoch) == (ErrorCode.none, epoch)
    stale = _beat(broker, group, "m2", epoch - 1, None)
    assert stale.error_code == ErrorCode.fenced_member_epoch
    assert _beat(broker, group, "gone", epoch, None).error_code == ErrorCode.unknown_member_id
    newcomer = _beat(broker, group, "m3", 0, (topic,))
    assert newcomer.error_code == ErrorCode.none and newcomer.member_epoch == epoch + 1
    # m2 never heartbeats again: its session (6 s here) runs out as it would have.
    deadline = time.monotonic() + 20
    while "m2" in _members(broker, group):
        assert time.monotonic() < deadline, "m2 never expired"
        _beat(broker, group, "m1", _members(broker, group)["m1"], None)
        _beat(broker, group, "m3", _members(broker, group)["m3"], None)
        time.sleep(1.0)
    # And the expiry is durable too.
    broker.restart(kill=True)
    assert _beat(broker, group, "m1", 0, (topic,)).error_code == ErrorCode.none
    assert set(_members(broker, group)) == {"m1", "m3"}
