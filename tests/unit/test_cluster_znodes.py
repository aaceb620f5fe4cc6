"""Kafka's ZooKeeper JSON, both ways: what Onceflow writes is what Kafka's tools read."""

from __future__ import annotations

import dataclasses
import json

import pytest

from onceflow.cluster.znodes import (
    BrokerRegistration,
    CorruptZnode,
    PartitionState,
    ProducerIdBlock,
    decode_assignment,
    decode_controller,
    decode_epoch,
    encode_assignment,
    encode_controller,
    partition_state_path,
)


def test_values_round_trip_in_kafkas_json() -> None:
    reg = BrokerRegistration(
        3, "h", 9093, 17, (("PLAINTEXT", "PLAINTEXT", "h", 9093), ("EXT", "SASL_SSL", "::1", 9094))
    )
    assert BrokerRegistration.decode(3, reg.encode()) == reg
    assert reg.endpoint("EXT") == ("::1", 9094)
    assert reg.endpoint("UNKNOWN") == ("h", 9093)  # the inter-broker address
    bare = BrokerRegistration(3, "h", 9093, 17)  # as an older Onceflow registered
    assert BrokerRegistration.decode(3, bare.encode()).endpoint("PLAINTEXT") == ("h", 9093)
    assert json.loads(reg.encode())["endpoints"] == ["PLAINTEXT://h:9093", "EXT://[::1]:9094"]
    assert json.loads(reg.encode())["listener_security_protocol_map"]["EXT"] == "SASL_SSL"
    assert "rack" not in json.loads(reg.encode())
    racked = dataclasses.replace(reg, rack="r1")  # broker.rack, Kafka's "rack"
    assert json.loads(racked.encode())["rack"] == "r1"
    assert BrokerRegistration.decode(3, racked.encode()) == racked
    state = PartitionState(2, 7, (2, 3), 4)
    path = partition_state_path("t", 0)
    assert path == "/brokers/topics/t/partitions/0/state"
    assert PartitionState.decode(path, state.encode()) == state
    assert json.loads(state.encode()) == {
        "controller_epoch": 4,
        "isr": [2, 3],
        "leader": 2,
        "leader_epoch": 7,
        "version": 1,
    }
    assert decode_controller(encode_controller(5, 1)) == 5
    assert decode_epoch(b"12") == 12
    assert decode_assignment("t", encode_assignment("id", {1: [2, 3], 0: [3, 2]})) == (
        "id",
        {0: [3, 2], 1: [2, 3]},
    )
    block = ProducerIdBlock(1, 1000, 1999)
    assert ProducerIdBlock.decode(block.encode()) == block
    assert json.loads(block.encode())["block_start"] == "1000"  # Kafka writes strings


@pytest.mark.parametrize(
    "call",
    [
        lambda: decode_controller(b"not json"),
        lambda: decode_controller(b"[1]"),
        lambda: decode_epoch(b"x"),
        lambda: decode_assignment("t", b'{"partitions": 3}'),
        lambda: PartitionState.decode("/p", b'{"leader": 1}'),
        lambda: ProducerIdBlock.decode(b'{"broker": "a"}'),
        lambda: BrokerRegistration.decode(1, b"{}"),
    ],
)
def test_a_znode_that_is_not_kafkas_json_is_refused_by_name(call: object) -> None:
    with pytest.raises(CorruptZnode):
        call()  # type: ignore[operator]
