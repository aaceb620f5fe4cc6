"""DescribeTopicPartitions (KIP-966) through kafka-python's describe_topic_partitions, page by
page with its cursor, and an unknown topic answered UNKNOWN_TOPIC_OR_PARTITION."""

from __future__ import annotations

import uuid
from typing import Any

from kafka import KafkaAdminClient

from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import create_topic


def test_kafka_python_describe_topic_partitions_pages(shared_broker: BrokerProcess) -> None:
    bs = shared_broker.bootstrap
    # Topics come back in name order, whichever has more partitions.
    counts = {create_topic(bs, partitions=5): 5, create_topic(bs, partitions=2): 2}
    first, second = sorted(counts)
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bs, request_timeout_ms=20_000)
    try:
        seen: list[tuple[str, int]] = []
        cursor: dict[str, Any] | None = None
        pages = 0
        while True:
            result = admin.describe_topic_partitions(
                [first, second, missing], response_partition_limit=3, cursor=cursor
            )
            pages += 1
            for topic in result["topics"]:
                if topic["name"] == missing:
                    assert topic["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION
                    continue
                assert topic["error_code"] == 0 and not topic["is_internal"]
                for p in topic["partitions"]:
                    assert p["leader_id"] >= 0 and p["replica_nodes"] == [p["leader_id"]]
                    seen.append((topic["name"], p["partition_index"]))
            cursor = result["next_cursor"]
            if cursor is None:
                break
            assert pages < 10
        assert seen == [(t, p) for t in (first, second) for p in range(counts[t])]
        assert pages == 3
    finally:
        admin.close()
