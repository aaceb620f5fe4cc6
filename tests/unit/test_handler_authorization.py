"""Every handler authorizes as Kafka's KafkaApis does: the operation and resource asked
about, the error code and the level it is set at, and nothing changed by a refused request.

A real in-process Broker serves the requests; its authorizer is a fake that allows exactly
the (operation, resource type, name) triples a test grants and records every question (the
real authorizer's decisions are tested in test_security_authorizer.py). Each response is
also encoded, proving the refusals serialise at the request's version.
"""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import pytest
from kio.index import load_payload_module
from kio.serial import entity_reader
from kio.static.constants import EntityType
from tests.helpers.broker import SMALL_DISK_FOOTPRINT

from onceflow.broker.broker import Broker
from onceflow.broker.handlers.base import RequestContext
from onceflow.broker.handlers.registry import HANDLERS
from onceflow.broker.responses import Deferred, RawBody
from onceflow.broker.server import _settle
from onceflow.clock import ManualClock
from onceflow.config import BrokerConfig
from onceflow.coordinator.transaction.state import TxnState
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import RequestHeader, build, encode_body, request_type, response_type
from onceflow.records.batch import validate_produced_batches
from onceflow.records.builder import build_batch
from onceflow.security.acl import CLUSTER_NAME, SUPPORTED_OPERATIONS, AclOperation, ResourceType
from onceflow.security.session import Session

Op = AclOperation
R = ResourceType
Grant = tuple[AclOperation, ResourceType, str]

OPEN, SECRET = "orders", "secret"
ALICE = Session(principal="User:alice")
TOPIC_DENIED = ErrorCode.topic_authorization_failed
GROUP_DENIED = ErrorCode.group_authorization_failed
CLUSTER_DENIED = ErrorCode.cluster_authorization_failed
TXN_DENIED = ErrorCode.transactional_id_authorization_failed
SECONDS = datetime.timedelta(seconds=1)


def cluster(op: AclOperation) -> Grant:
    return (op, R.CLUSTER, CLUSTER_NAME)


def topic(op: AclOperation, name: str = OPEN) -> Grant:
    return (op, R.TOPIC, name)


class FakeAuthorizer:
    """Allows exactly the granted triples (and `authorize_any` for the granted pairs)."""

    def __init__(self) -> None:
        self.grants: set[Grant] = set()
        self.any_grants: set[tuple[AclOperation, ResourceType]] = set()
        self.calls: list[Grant] = []
        self.quiet: list[Grant] = []  # asked with log_denied=False

    def grant(self, *grants: Grant) -> None:
        self.grants.update(grants)

    def authorize(
        self,
        session: Session,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
        *,
        log_denied: bool = True,
    ) -> bool:
        assert session is ALICE
        self.calls.append((operation, resource_type, name))
        if not log_denied:
            self.quiet.append((operation, resource_type, name))
        return (operation, resource_type, name) in self.grants

    def authorize_any(
        self,
        session: Session,
        operation: AclOperation,
        resource_type: ResourceType,
        *,
        log_denied: bool = True,
    ) -> bool:
        self.calls.append((operation, resource_type, "<any>"))
        return (operation, resource_type) in self.any_grants


class Harness:
    def __init__(self, broker: Broker, clock: ManualClock) -> None:
        self.broker = broker
        self.clock = clock
        self.acl = FakeAuthorizer()
        self.use(self.acl)

    def use(self, authorizer: FakeAuthorizer | None) -> None:
        """Make the broker decide with `authorizer` (None: no authorizer, allow all)."""
        self.broker.security.authorizer = cast(Any, authorizer)

    async def call(self, api: int, version: int, /, **fields: Any) -> Any:
        request = build(request_type(api, version), **fields)
        ctx = RequestContext(RequestHeader(api, version, 1, "test"), self.broker, ALICE)
        response = await HANDLERS[api](ctx, request)
        if isinstance(response, Deferred):
            response = await asyncio.wait_for(_settle(response), 10)
        if isinstance(response, RawBody):  # Fetch: the bytes a client would read
            raw = b"".join(p if isinstance(p, bytes) else p.read() for p in response.parts)
            decoded, size = entity_reader(response_type(api, version))(raw, 0)
            assert size == len(raw)
            return decoded
        encode_body(response)
        return response

    def end_offset(self, name: str, partition: int = 0) -> int:
        plog = self.broker.logs.get(name, partition)
        assert plog is not None
        return plog.log_end_offset

    async def open_txn(self, txn_id: str, *partitions: tuple[str, int]) -> tuple[int, int]:
        coordinator = self.broker.txn_coordinator
        init = await coordinator.init_producer_id(txn_id, 60_000)
        error = await coordinator.add_partitions(
            txn_id, init.producer_id, init.producer_epoch, list(partitions)
        )
        assert error == ErrorCode.none
        return init.producer_id, init.producer_epoch


def run(tmp_path: Path, body: Callable[[Harness], Awaitable[None]], **config: Any) -> None:
    async def main() -> None:
        clock = ManualClock()
        settings = {
            "offsets_topic_num_partitions": 2,
            "transaction_state_log_num_partitions": 2,
            **SMALL_DISK_FOOTPRINT,
        }
        broker_config = BrokerConfig(log_dirs=(str(tmp_path / "data"),), **(settings | config))
        broker = Broker(broker_config, clock=clock)
        await broker.start()
        try:
            await broker.create_topic(OPEN, 2)
            await broker.create_topic(SECRET, 1)
            await body(Harness(broker, clock))
        finally:
            await broker.stop()

    asyncio.run(main())


def nested(api: int, version: int, name: str, /, **fields: Any) -> Any:
    return build(getattr(load_payload_module(api, version, EntityType.request), name), **fields)


def partition_errors(topics: Any, partitions: str = "partitions") -> dict[tuple[str, int], Any]:
    """(topic, partition) -> error code of a response's topics."""
    out = {}
    for t in topics:
        for p in getattr(t, partitions):
            index = getattr(p, "partition_index", getattr(p, "index", getattr(p, "partition", -1)))
            out[(t.name if hasattr(t, "name") else t.topic, index)] = getattr(
                p, "error_code", getattr(p, "partition_error_code", None)
            )
    return out


# ---- Produce -------------------------------------------------------------------------------


def produce_fields(
    partitions: dict[str, tuple[int, ...]],
    *,
    transactional_id: str | None = None,
    producer: tuple[int, int] | None = None,
) -> dict[str, Any]:
    pid, epoch = producer or (-1, -1)
    batch = build_batch(
        [(b"k", b"v", ())],
        timestamp_ms=0,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=0 if producer else -1,
        transactional=transactional_id is not None,
    )
    topics = tuple(
        nested(
            ApiKey.PRODUCE,
            8,
            "TopicProduceData",
            name=name,
            partition_data=tuple(
                nested(ApiKey.PRODUCE, 8, "PartitionProduceData", index=p, records=batch)
                for p in parts
            ),
        )
        for name, parts in partitions.items()
    )
    return {
        "transactional_id": transactional_id,
        "acks": -1,
        "timeout": 30 * SECONDS,
        "topic_data": topics,
    }


def test_produce_needs_write_on_each_topic_checked_once(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        h.acl.grant(topic(Op.WRITE))
        response = await h.call(ApiKey.PRODUCE, 8, **produce_fields({OPEN: (0, 1), SECRET: (0,)}))
        assert partition_errors(response.responses, "partition_responses") == {
            (OPEN, 0): ErrorCode.none,
            (OPEN, 1): ErrorCode.none,
            (SECRET, 0): TOPIC_DENIED,
        }
        assert (h.end_offset(OPEN, 0), h.end_offset(OPEN, 1), h.end_offset(SECRET)) == (1, 1, 0)
        assert sorted(h.acl.calls) == sorted([topic(Op.WRITE), topic(Op.WRITE, SECRET)])

    run(tmp_path, body)


def test_produce_idempotent_needs_only_write_on_the_topic(tmp_path: Path) -> None:
    """Since KIP-679 Kafka checks IDEMPOTENT_WRITE at InitProducerId, not at Produce."""

    async def body(h: Harness) -> None:
        h.acl.grant(topic(Op.WRITE))
        fields = produce_fields({OPEN: (0,)}, producer=(77, 0))
        response = await h.call(ApiKey.PRODUCE, 8, **fields)
        assert partition_errors(response.responses, "partition_responses") == {
            (OPEN, 0): ErrorCode.none
        }
        assert h.acl.calls == [topic(Op.WRITE)]

    run(tmp_path, body)


@pytest.mark.parametrize("txn_id", ["payments", None])
def test_transactional_produce_needs_write_on_the_transactional_id(
    tmp_path: Path, txn_id: str | None
) -> None:
    async def body(h: Harness) -> None:
        h.acl.grant(topic(Op.WRITE), topic(Op.WRITE, SECRET))
        fields = produce_fields({OPEN: (0, 1), SECRET: (0,)}, transactional_id="x", producer=(5, 0))
        fields["transactional_id"] = txn_id  # transactional records, with or without an id
        response = await h.call(ApiKey.PRODUCE, 8, **fields)
        parts = [p for t in response.responses for p in t.partition_responses]
        assert [p.error_code for p in parts] == [TXN_DENIED] * 3
        assert {p.error_message for p in parts} == {"Transactional Id authorization failed."}
        assert (h.end_offset(OPEN, 0), h.end_offset(SECRET)) == (0, 0)
        expected = [] if txn_id is None else [(Op.WRITE, R.TRANSACTIONAL_ID, txn_id)]
        assert h.acl.calls == expected  # no topic is even asked about

    run(tmp_path, body)


def test_produce_to_a_missing_topic_without_write_or_create(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        h.acl.grant(topic(Op.WRITE, "new-a"), topic(Op.WRITE, "new-b"), topic(Op.CREATE, "new-b"))
        fields = produce_fields({"ghost": (0,), "new-a": (0,), "new-b": (0,)})
        response = await h.call(ApiKey.PRODUCE, 8, **fields)
        assert partition_errors(response.responses, "partition_responses") == {
            ("ghost", 0): TOPIC_DENIED,  # no WRITE: existence is not revealed
            ("new-a", 0): TOPIC_DENIED,  # WRITE, but auto-creating it needs CREATE
            ("new-b", 0): ErrorCode.none,
        }
        assert h.broker.topic_partition_count("ghost") is None
        assert h.broker.topic_partition_count("new-a") is None
        assert h.acl.quiet == [cluster(Op.CREATE)]

    run(tmp_path, body)


# ---- Fetch, ListOffsets, OffsetForLeaderEpoch ----------------------------------------------


def fetch_fields(
    replica_id: int,
    partitions: dict[str, tuple[int, ...]],
    version: int = 11,
    topic_ids: dict[str, uuid.UUID] | None = None,
) -> dict[str, Any]:
    """A Fetch of `version`: topics by name, or (v13+) by the id `topic_ids` gives; the
    follower's id as replica_id, or (v15+) in replica_state."""
    topics = tuple(
        nested(
            ApiKey.FETCH,
            version,
            "FetchTopic",
            topic=name,
            topic_id=(topic_ids or {}).get(name),
            partitions=tuple(
                nested(
                    ApiKey.FETCH,
                    version,
                    "FetchPartition",
                    partition=p,
                    current_leader_epoch=-1,
                    fetch_offset=0,
                    log_start_offset=-1,
                    last_fetched_epoch=-1,
                    partition_max_bytes=1 << 20,
                )
                for p in parts
            ),
        )
        for name, parts in partitions.items()
    )
    fields: dict[str, Any] = {
        "replica_id": replica_id,
        "max_wait": 0 * SECONDS,
        "min_bytes": 0,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": topics,
        "forgotten_topics_data": (),
        "rack_id": "",
    }
    if version >= 15:
        fields["replica_state"] = nested(
            ApiKey.FETCH, version, "ReplicaState", replica_id=replica_id, replica_epoch=-1
        )
    return fields


def test_consumer_fetch_needs_read_on_each_topic(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        h.acl.grant(topic(Op.WRITE), topic(Op.WRITE, SECRET), topic(Op.READ))
        await h.call(ApiKey.PRODUCE, 8, **produce_fields({OPEN: (0, 1), SECRET: (0,)}))
        h.acl.calls.clear()
        response = await h.call(ApiKey.FETCH, 11, **fetch_fields(-1, {OPEN: (0, 1), SECRET: (0,)}))
        by_key = {(t.topic, p.partition_index): p for t in response.responses for p in t.partitions}
        assert by_key[(OPEN, 0)].error_code == ErrorCode.none and by_key[(OPEN, 0)].records
        assert by_key[(SECRET, 0)].error_code == TOPIC_DENIED
        assert not by_key[(SECRET, 0)].records
        assert sorted(h.acl.calls) == sorted([topic(Op.READ), topic(Op.READ, SECRET)])

    run(tmp_path, body)


@pytest.mark.parametrize("version", [11, 17])  # v17: the followers' own version (by id)
def test_replica_fetch_needs_cluster_action(tmp_path: Path, version: int) -> None:
    async def body(h: Harness) -> None:
        open_id = h.broker.topic_id(OPEN)
        assert open_id is not None
        ids = {OPEN: open_id}

        def errors(response: Any) -> dict[int, Any]:
            return {
                p.partition_index: p.error_code for t in response.responses for p in t.partitions
            }

        h.acl.grant(topic(Op.READ))  # a consumer's rights do not make a follower
        response = await h.call(
            ApiKey.FETCH, version, **fetch_fields(2, {OPEN: (0, 1)}, version, ids)
        )
        assert errors(response) == {0: TOPIC_DENIED, 1: TOPIC_DENIED}
        h.acl.grant(cluster(Op.CLUSTER_ACTION))
        response = await h.call(
            ApiKey.FETCH, version, **fetch_fields(2, {OPEN: (0,)}, version, ids)
        )
        # Allowed, it gets what it got before: broker 2 is no follower of this one.
        assert errors(response) == {0: ErrorCode.replica_not_available}

    run(tmp_path, body)


def test_fetch_by_topic_id_looks_the_id_up_without_walking_every_topic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Followers fetch by topic id (v17) all the time: the name an id maps to is remembered,
    so a fetch costs a lookup per topic, not a walk of every topic."""

    async def body(h: Harness) -> None:
        h.use(None)
        open_id = h.broker.topic_id(OPEN)
        assert open_id is not None
        walks: list[int] = []
        real = h.broker.topics_by_id

        def counting() -> dict[uuid.UUID, str]:
            walks.append(1)
            return real()

        monkeypatch.setattr(h.broker, "topics_by_id", counting)
        for _ in range(3):
            response = await h.call(
                ApiKey.FETCH, 17, **fetch_fields(-1, {OPEN: (0,)}, 17, {OPEN: open_id})
            )
            assert response.responses[0].partitions[0].error_code == ErrorCode.none
        assert len(walks) <= 1

    run(tmp_path, body)


def test_list_offsets_needs_describe(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        h.acl.grant(topic(Op.DESCRIBE))
        part = nested(
            ApiKey.LIST_OFFSETS,
            5,
            "ListOffsetsPartition",
            partition_index=0,
            current_leader_epoch=-1,
            timestamp=-1,
        )
        topics = tuple(
            nested(ApiKey.LIST_OFFSETS, 5, "ListOffsetsTopic", name=n, partitions=(part,))
            for n in (OPEN, SECRET)
        )
        response = await h.call(
            ApiKey.LIST_OFFSETS, 5, replica_id=-1, isolation_level=0, topics=topics
        )
        opened, secret = (t.partitions[0] for t in response.topics)
        assert (opened.error_code, opened.offset) == (ErrorCode.none, 0)
        assert (secret.error_code, secret.offset, secret.timestamp) == (TOPIC_DENIED, -1, -1)

    run(tmp_path, body)


def test_offset_for_leader_epoch_cluster_action_or_describe(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        part = nested(
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            3,
            "OffsetForLeaderPartition",
            partition=0,
            current_leader_epoch=-1,
            leader_epoch=0,
        )
        fields = {
            "replica_id": -1,
            "topics": tuple(
                nested(
                    ApiKey.OFFSET_FOR_LEADER_EPOCH,
                    3,
                    "OffsetForLeaderTopic",
                    topic=n,
                    partitions=(part,),
                )
                for n in (OPEN, SECRET)
            ),
        }
        h.acl.grant(topic(Op.DESCRIBE))
        response = await h.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, **fields)
        assert partition_errors(response.topics) == {
            (OPEN, 0): ErrorCode.none,
            (SECRET, 0): TOPIC_DENIED,
        }
        assert cluster(Op.CLUSTER_ACTION) in h.acl.quiet  # the first try is not audited
        h.acl.grant(cluster(Op.CLUSTER_ACTION))
        h.acl.calls.clear()
        response = await h.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, 3, **fields)
        assert set(partition_errors(response.topics).values()) == {ErrorCode.none}
        assert h.acl.calls == [cluster(Op.CLUSTER_ACTION)]

    run(tmp_path, body)


# ---- Metadata ------------------------------------------------------------------------------


def metadata_fields(names: tuple[str, ...] | None, **extra: bool) -> dict[str, Any]:
    topics = None
    if names is not None:
        topics = tuple(nested(ApiKey.METADATA, 8, "MetadataRequestTopic", name=n) for n in names)
    return {
        "topics": topics,
        "allow_auto_topic_creation": True,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    } | extra


def test_metadata_for_all_topics_lists_only_describable_ones_quietly(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        h.acl.grant(topic(Op.DESCRIBE))
        response = await h.call(ApiKey.METADATA, 8, **metadata_fields(None))
        assert [(t.name, t.error_code) for t in response.topics] == [(OPEN, ErrorCode.none)]
        assert topic(Op.DESCRIBE, SECRET) in h.acl.quiet
        v0 = await h.call(ApiKey.METADATA, 0, topics=())  # v0's "all topics"
        assert [t.name for t in v0.topics] == [OPEN]

    run(tmp_path, body)


def test_metadata_named_topics_without_describe_or_create(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        h.acl.grant(topic(Op.DESCRIBE), topic(Op.DESCRIBE, "fresh"), topic(Op.DESCRIBE, "made"))
        h.acl.grant(topic(Op.CREATE, "made"))
        names = (OPEN, SECRET, "ghost", "fresh", "made")
        response = await h.call(ApiKey.METADATA, 8, **metadata_fields(names))
        by_name = {t.name: t for t in response.topics}
        assert by_name[OPEN].error_code == ErrorCode.none and len(by_name[OPEN].partitions) == 2
        for refused in (SECRET, "ghost", "fresh"):  # existing or not, described the same way
            assert (by_name[refused].error_code, by_name[refused].partitions) == (TOPIC_DENIED, ())
        assert by_name["made"].error_code == ErrorCode.none
        assert h.broker.topic_partition_count("fresh") is None
        assert h.broker.topic_partition_count("ghost") is None
        assert h.broker.topic_partition_count("made") == 1
        assert (Op.DESCRIBE, R.TOPIC, SECRET) not in h.acl.quiet  # named: audited

    run(tmp_path, body)


def test_metadata_create_on_the_cluster_covers_every_topic(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        h.acl.grant(topic(Op.DESCRIBE, "fresh"), cluster(Op.CREATE))
        response = await h.call(ApiKey.METADATA, 8, **metadata_fields(("fresh",)))
        assert response.topics[0].error_code == ErrorCode.none
        assert h.broker.topic_partition_count("fresh") == 1
        assert topic(Op.CREATE, "fresh") not in h.acl.calls

    run(tmp_path, body)


def test_metadata_authorized_operations(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        fields = metadata_fields(
            (OPEN,),
            include_cluster_authorized_operations=True,
            include_topic_authorized_operations=True,
        )
        h.acl.grant(topic(Op.DESCRIBE), topic(Op.READ), cluster(Op.ALTER))
        response = await h.call(ApiKey.METADATA, 8, **fields)
        assert response.cluster_authorized_operations == 0  # no DESCRIBE on the cluster
        assert response.topics[0].topic_authorized_operations == (1 << Op.READ) | (1 << Op.DESCRIBE)
        h.acl.grant(cluster(Op.DESCRIBE))
        response = await h.call(ApiKey.METADATA, 8, **fields)
        assert response.cluster_authorized_operations == (1 << Op.ALTER) | (1 << Op.DESCRIBE)
        h.use(None)  # no authorizer: everything Kafka supports on each
        response = await h.call(ApiKey.METADATA, 8, **fields)
        expected = sum(1 << op for op in SUPPORTED_OPERATIONS[R.CLUSTER])
        assert response.cluster_authorized_operations == expected
        not_asked = await h.call(ApiKey.METADATA, 8, **metadata_fields((OPEN,)))
        assert not_asked.cluster_authorized_operations == -(2**31)
        assert not_asked.topics[0].topic_authorized_operations == -(2**31)

    run(tmp_path, body)


# ---- Topic administration, configs, log dirs, cluster --------------------------------------


def create_topics_fields(*names: str, version: int = 4) -> dict[str, Any]:
    topics = tuple(
        nested(
            ApiKey.CREATE_TOPICS,
            version,
            "CreatableTopic",
            name=n,
            num_partitions=1,
            replication_factor=-1,
            assignments=(),
            configs=(),
        )
        for n in names
    )
    return {"topics": topics, "timeout": 30 * SECONDS, "validate_only": False}


def test_create_topics_needs_create_on_the_cluster_or_the_topic(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        h.acl.grant(topic(Op.CREATE, "mine"))
        response = await h.call(
            ApiKey.CREATE_TOPICS, 4, **create_topics_fields("mine", "theirs", OPEN)
        )
        assert [(t.name, t.error_code) for t in response.topics] == [
            ("mine", ErrorCode.none),
            ("theirs", TOPIC_DENIED),
            (OPEN, TOPIC_DENIED),  # not TOPIC_ALREADY_EXISTS
        ]
        assert h.broker.topic_partition_count("theirs") is None
        assert h.acl.quiet[0] == cluster(Op.CREATE)
        # Then, as quietly, who may see each topic's configs (v5+ answers them).
        assert sorted(h.acl.quiet[1:]) == sorted(
            topic(Op.DESCRIBE_CONFIGS, n) for n in ("mine", "theirs", OPEN)
        )
        h.acl.grant(cluster(Op.CREATE))
        response = await h.call(ApiKey.CREATE_TOPICS, 4, **create_topics_fields("theirs"))
        assert response.topics[0].error_code == ErrorCode.none

    run(tmp_path, body)


def test_create_topics_answers_configs_only_to_who_may_describe_them(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        h.acl.grant(cluster(Op.CREATE), topic(Op.DESCRIBE_CONFIGS, "shown"))
        response = await h.call(
            ApiKey.CREATE_TOPICS, 7, **create_topics_fields("shown", "hidden", version=7)
        )
        shown, hidden = response.topics
        assert (shown.error_code, shown.topic_config_error_code) == (0, 0)
        assert (shown.num_partitions, shown.replication_factor) == (1, 1)
        assert shown.configs
        # Created all the same, its configs withheld, as Kafka's controller answers it.
        assert (hidden.error_code, hidden.topic_config_error_code) == (0, TOPIC_DENIED)
        assert (hidden.num_partitions, hidden.replication_factor, hidden.configs) == (-1, -1, ())
        assert hidden.topic_id == h.broker.topic_id("hidden")

    run(tmp_path, body)


def test_delete_topics_by_id_names_a_refused_topic_only_to_who_may_describe_it(
    tmp_path: Path,
) -> None:
    async def body(h: Harness) -> None:
        await h.broker.create_topic("described", 1)
        h.acl.grant(topic(Op.DESCRIBE, "described"))
        ids = [h.broker.topic_id(n) for n in (SECRET, "described")]
        states = tuple(
            nested(ApiKey.DELETE_TOPICS, 6, "DeleteTopicState", name=None, topic_id=i) for i in ids
        )
        response = await h.call(ApiKey.DELETE_TOPICS, 6, topics=states, timeout=30 * SECONDS)
        assert [(t.name, t.topic_id, t.error_code) for t in response.responses] == [
            (None, ids[0], TOPIC_DENIED),  # the id reveals no name
            ("described", ids[1], TOPIC_DENIED),
        ]
        assert h.broker.topic_partition_count(SECRET) == 1

    run(tmp_path, body)


def test_delete_topics_needs_delete(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        h.acl.grant(topic(Op.DELETE), topic(Op.DESCRIBE))  # DELETE implies DESCRIBE in Kafka
        response = await h.call(
            ApiKey.DELETE_TOPICS, 3, topic_names=(OPEN, SECRET, "ghost"), timeout=30 * SECONDS
        )
        assert [(t.name, t.error_code) for t in response.responses] == [
            (OPEN, ErrorCode.none),
            (SECRET, TOPIC_DENIED),
            ("ghost", TOPIC_DENIED),  # not UNKNOWN_TOPIC_OR_PARTITION
        ]
        assert h.broker.topic_partition_count(SECRET) == 1

    run(tmp_path, body)


def test_delete_topics_by_name_needs_describe_too(tmp_path: Path) -> None:
    """Kafka's controller: a topic named without DESCRIBE (an ALLOW DELETE with a DENY
    DESCRIBE) is refused, not deleted."""

    async def body(h: Harness) -> None:
        h.acl.grant(topic(Op.DELETE))
        response = await h.call(ApiKey.DELETE_TOPICS, 3, topic_names=(OPEN,), timeout=30 * SECONDS)
        assert [(t.name, t.error_code) for t in response.responses] == [(OPEN, TOPIC_DENIED)]
        assert h.broker.topic_partition_count(OPEN) == 2

    run(tmp_path, body)


def test_delete_on_the_cluster_deletes_any_topic(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        h.acl.grant(cluster(Op.DELETE))
        secret_id = h.broker.topic_id(SECRET)
        states = (
            nested(ApiKey.DELETE_TOPICS, 6, "DeleteTopicState", name=OPEN, topic_id=None),
            nested(ApiKey.DELETE_TOPICS, 6, "DeleteTopicState", name=None, topic_id=secret_id),
        )
        response = await h.call(ApiKey.DELETE_TOPICS, 6, topics=states, timeout=30 * SECONDS)
        assert [(t.name, t.error_code) for t in response.responses] == [
            (OPEN, ErrorCode.none),
            (SECRET, ErrorCode.none),
        ]
        assert h.broker.topic_partition_count(OPEN) is None
        assert h.broker.topic_partition_count(SECRET) is None

    run(tmp_path, body)


def test_create_partitions_needs_alter(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        h.acl.grant(topic(Op.ALTER))
        topics = tuple(
            nested(
                ApiKey.CREATE_PARTITIONS,
                3,
                "CreatePartitionsTopic",
                name=n,
                count=3,
                assignments=None,
            )
            for n in (OPEN, SECRET)
        )
        response = await h.call(
            ApiKey.CREATE_PARTITIONS, 3, topics=topics, timeout=30 * SECONDS, validate_only=False
        )
        assert [(t.name, t.error_code) for t in response.results] == [
            (OPEN, ErrorCode.none),
            (SECRET, TOPIC_DENIED),
        ]
        assert (h.broker.topic_partition_count(OPEN), h.broker.topic_partition_count(SECRET)) == (
            3,
            1,
        )

    run(tmp_path, body)


def test_describe_configs_needs_describe_configs(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        h.acl.grant(topic(Op.DESCRIBE_CONFIGS))
        resources = tuple(
            nested(
                ApiKey.DESCRIBE_CONFIGS,
                3,
                "DescribeConfigsResource",
                resource_type=kind,
                resource_name=name,
                configuration_keys=None,
            )
            for kind, name in ((2, OPEN), (2, SECRET), (4, "0"))
        )
        fields = {"resources": resources, "include_synonyms": False, "include_documentation": False}
        response = await h.call(ApiKey.DESCRIBE_CONFIGS, 3, **fields)
        opened, secret, broker = response.results
        assert opened.error_code == ErrorCode.none and opened.configs
        assert (secret.error_code, secret.configs) == (TOPIC_DENIED, ())
        assert (broker.error_code, broker.configs) == (CLUSTER_DENIED, ())
        assert broker.error_message == "Cluster authorization failed."
        h.acl.grant(cluster(Op.DESCRIBE_CONFIGS))
        response = await h.call(ApiKey.DESCRIBE_CONFIGS, 3, **fields)
        assert response.results[2].error_code == ErrorCode.none

    run(tmp_path, body)


def test_describe_log_dirs_needs_describe_on_the_cluster(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        response = await h.call(ApiKey.DESCRIBE_LOG_DIRS, 4, topics=None)
        assert (response.error_code, response.results) == (CLUSTER_DENIED, ())
        h.acl.grant(cluster(Op.DESCRIBE))
        response = await h.call(ApiKey.DESCRIBE_LOG_DIRS, 4, topics=None)
        assert response.error_code == ErrorCode.none and response.results[0].topics

    run(tmp_path, body)


def test_describe_cluster_is_open_but_its_operations_are_not(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        fields = {"include_cluster_authorized_operations": True, "endpoint_type": 1}
        response = await h.call(ApiKey.DESCRIBE_CLUSTER, 1, **fields)
        assert response.error_code == ErrorCode.none and response.brokers
        assert response.cluster_authorized_operations == 0
        h.acl.grant(cluster(Op.DESCRIBE), cluster(Op.CREATE))
        response = await h.call(ApiKey.DESCRIBE_CLUSTER, 1, **fields)
        assert response.cluster_authorized_operations == (1 << Op.DESCRIBE) | (1 << Op.CREATE)

    run(tmp_path, body)


# ---- Groups --------------------------------------------------------------------------------


def commit_fields(group: str, partitions: dict[str, tuple[int, ...]]) -> dict[str, Any]:
    topics = tuple(
        nested(
            ApiKey.OFFSET_COMMIT,
            7,
            "OffsetCommitRequestTopic",
            name=name,
            partitions=tuple(
                nested(
                    ApiKey.OFFSET_COMMIT,
                    7,
                    "OffsetCommitRequestPartition",
                    partition_index=p,
                    committed_offset=5,
                    committed_leader_epoch=-1,
                    committed_metadata="",
                )
                for p in parts
            ),
        )
        for name, parts in partitions.items()
    )
    return {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "group_instance_id": None,
        "topics": topics,
    }


def fetch_offsets_fields(group: str, names: tuple[str, ...] | None) -> dict[str, Any]:
    topics = None
    if names is not None:
        topics = tuple(
            nested(
                ApiKey.OFFSET_FETCH, 7, "OffsetFetchRequestTopic", name=n, partition_indexes=(0,)
            )
            for n in names
        )
    return {"group_id": group, "topics": topics, "require_stable": False}


def test_find_coordinator_needs_describe_on_the_key(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        h.acl.grant((Op.DESCRIBE, R.GROUP, "g"), (Op.DESCRIBE, R.TRANSACTIONAL_ID, "t"))
        answers = {}
        for key_type, key in ((0, "g"), (0, "h"), (1, "t"), (1, "u")):
            response = await h.call(ApiKey.FIND_COORDINATOR, 2, key=key, key_type=key_type)
            answers[key] = (response.error_code, response.node_id)
        assert answers == {
            "g": (ErrorCode.none, h.broker.node_id),
            "h": (GROUP_DENIED, -1),
            "t": (ErrorCode.none, h.broker.node_id),
            "u": (TXN_DENIED, -1),
        }

    run(tmp_path, body)


def test_membership_apis_need_read_on_the_group(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        protocol = nested(
            ApiKey.JOIN_GROUP, 3, "JoinGroupRequestProtocol", name="range", metadata=b""
        )
        join = await h.call(
            ApiKey.JOIN_GROUP,
            3,
            group_id="g",
            session_timeout=10 * SECONDS,
            rebalance_timeout=10 * SECONDS,
            member_id="",
            protocol_type="consumer",
            protocols=(protocol,),
        )
        assert (join.error_code, join.generation_id, join.member_id) == (GROUP_DENIED, -1, "")
        sync = await h.call(
            ApiKey.SYNC_GROUP, 3, group_id="g", generation_id=1, member_id="m",
            group_instance_id=None, assignments=(),
        )  # fmt: skip
        assert (sync.error_code, sync.assignment) == (GROUP_DENIED, b"")
        beat = await h.call(
            ApiKey.HEARTBEAT,
            3,
            group_id="g",
            generation_id=1,
            member_id="m",
            group_instance_id=None,
        )
        assert beat.error_code == GROUP_DENIED
        member = nested(
            ApiKey.LEAVE_GROUP, 3, "MemberIdentity", member_id="m", group_instance_id=None
        )
        leave = await h.call(ApiKey.LEAVE_GROUP, 3, group_id="g", members=(member,))
        assert (leave.error_code, leave.members) == (GROUP_DENIED, ())
        assert h.broker.group_coordinator.list_groups() == (ErrorCode.none, [])
        assert set(h.acl.calls) == {(Op.READ, R.GROUP, "g")}

    run(tmp_path, body)


def test_offset_commit_needs_read_on_the_group_then_each_topic(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        fields = commit_fields("g", {OPEN: (0, 1), SECRET: (0,)})
        response = await h.call(ApiKey.OFFSET_COMMIT, 7, **fields)
        assert set(partition_errors(response.topics).values()) == {GROUP_DENIED}
        assert h.acl.calls == [(Op.READ, R.GROUP, "g")]  # no topic asked about
        h.acl.grant((Op.READ, R.GROUP, "g"), topic(Op.READ))
        response = await h.call(ApiKey.OFFSET_COMMIT, 7, **fields)
        assert partition_errors(response.topics) == {
            (OPEN, 0): ErrorCode.none,
            (OPEN, 1): ErrorCode.none,
            (SECRET, 0): TOPIC_DENIED,
        }
        committed = h.broker.group_coordinator.fetch_offsets("g", None).partitions
        assert {(tp.topic, tp.partition) for tp in committed} == {(OPEN, 0), (OPEN, 1)}

    run(tmp_path, body)


def test_offset_fetch_needs_describe_on_the_group_and_topics(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        h.acl.grant((Op.READ, R.GROUP, "g"), topic(Op.READ), topic(Op.READ, SECRET))
        await h.call(ApiKey.OFFSET_COMMIT, 7, **commit_fields("g", {OPEN: (0,), SECRET: (0,)}))
        refused = await h.call(ApiKey.OFFSET_FETCH, 7, **fetch_offsets_fields("g", (OPEN,)))
        assert (refused.error_code, refused.topics) == (GROUP_DENIED, ())
        v1 = await h.call(ApiKey.OFFSET_FETCH, 1, **fetch_offsets_fields("g", (OPEN,)))
        assert partition_errors(v1.topics) == {(OPEN, 0): GROUP_DENIED}  # no group-level field
        h.acl.grant((Op.DESCRIBE, R.GROUP, "g"), topic(Op.DESCRIBE))
        named = await h.call(ApiKey.OFFSET_FETCH, 7, **fetch_offsets_fields("g", (OPEN, SECRET)))
        assert partition_errors(named.topics) == {
            (OPEN, 0): ErrorCode.none,
            (SECRET, 0): TOPIC_DENIED,
        }
        assert named.topics[1].partitions[0].committed_offset == -1
        every = await h.call(ApiKey.OFFSET_FETCH, 7, **fetch_offsets_fields("g", None))
        assert [(t.name, t.partitions[0].committed_offset) for t in every.topics] == [(OPEN, 5)]

    run(tmp_path, body)


def test_offset_fetch_v8_authorizes_each_group_on_its_own(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        h.acl.grant((Op.READ, R.GROUP, "g1"), (Op.READ, R.GROUP, "g2"), topic(Op.READ))
        for group in ("g1", "g2"):
            await h.call(ApiKey.OFFSET_COMMIT, 7, **commit_fields(group, {OPEN: (0,)}))
        h.acl.grant((Op.DESCRIBE, R.GROUP, "g1"), topic(Op.DESCRIBE))
        groups = tuple(
            nested(ApiKey.OFFSET_FETCH, 8, "OffsetFetchRequestGroup", group_id=g, topics=None)
            for g in ("g1", "g2")
        )
        answer = await h.call(ApiKey.OFFSET_FETCH, 8, groups=groups, require_stable=False)
        g1, g2 = answer.groups
        assert (g1.error_code, [t.name for t in g1.topics]) == (ErrorCode.none, [OPEN])
        assert (g2.group_id, g2.error_code, g2.topics) == ("g2", GROUP_DENIED, ())

    run(tmp_path, body)


def test_describe_and_list_groups(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        h.acl.grant((Op.READ, R.GROUP, "g1"), (Op.READ, R.GROUP, "g2"), topic(Op.READ))
        for group in ("g1", "g2"):
            await h.call(ApiKey.OFFSET_COMMIT, 7, **commit_fields(group, {OPEN: (0,)}))
        h.acl.grant((Op.DESCRIBE, R.GROUP, "g1"))
        described = await h.call(
            ApiKey.DESCRIBE_GROUPS, 4, groups=("g1", "g2"), include_authorized_operations=True
        )
        g1, g2 = described.groups
        assert (g1.error_code, g1.group_state) == (ErrorCode.none, "Empty")
        assert g1.authorized_operations == (1 << Op.READ) | (1 << Op.DESCRIBE)
        assert (g2.error_code, g2.group_state, g2.members) == (GROUP_DENIED, "", ())
        assert g2.authorized_operations == -(2**31)
        h.acl.quiet.clear()
        listed = await h.call(ApiKey.LIST_GROUPS, 2, states_filter=())
        assert [g.group_id for g in listed.groups] == ["g1"]
        assert cluster(Op.DESCRIBE) in h.acl.quiet and (Op.DESCRIBE, R.GROUP, "g2") in h.acl.quiet
        h.acl.grant(cluster(Op.DESCRIBE))
        listed = await h.call(ApiKey.LIST_GROUPS, 2, states_filter=())
        assert sorted(g.group_id for g in listed.groups) == ["g1", "g2"]

    run(tmp_path, body)


# ---- Transactions --------------------------------------------------------------------------


def init_fields(txn_id: str | None) -> dict[str, Any]:
    return {
        "transactional_id": txn_id,
        "transaction_timeout": 60 * SECONDS,
        "producer_id": -1,
        "producer_epoch": -1,
    }


def test_init_producer_id_with_a_transactional_id_needs_write_on_it(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        response = await h.call(ApiKey.INIT_PRODUCER_ID, 4, **init_fields("payments"))
        assert (response.error_code, response.producer_id, response.producer_epoch) == (
            TXN_DENIED,
            -1,
            -1,
        )
        assert "payments" not in h.broker.txn_coordinator.txns
        h.acl.grant((Op.WRITE, R.TRANSACTIONAL_ID, "payments"))
        response = await h.call(ApiKey.INIT_PRODUCER_ID, 4, **init_fields("payments"))
        assert response.error_code == ErrorCode.none and response.producer_id >= 0

    run(tmp_path, body)


def test_init_producer_id_with_enable2pc_needs_two_phase_commit_too(tmp_path: Path) -> None:
    """KIP-939: WRITE first, then TWO_PHASE_COMMIT; both refusals are the same code."""

    async def body(h: Harness) -> None:
        two_pc = {**init_fields("payments"), "enable2_pc": True}
        response = await h.call(ApiKey.INIT_PRODUCER_ID, 6, **two_pc)
        assert response.error_code == TXN_DENIED
        h.acl.grant((Op.TWO_PHASE_COMMIT, R.TRANSACTIONAL_ID, "payments"))
        response = await h.call(ApiKey.INIT_PRODUCER_ID, 6, **two_pc)
        assert response.error_code == TXN_DENIED  # WRITE is asked first
        h.acl = FakeAuthorizer()
        h.use(h.acl)
        h.acl.grant((Op.WRITE, R.TRANSACTIONAL_ID, "payments"))
        response = await h.call(ApiKey.INIT_PRODUCER_ID, 6, **two_pc)
        assert (response.error_code, response.producer_id) == (TXN_DENIED, -1)
        keep_only = {**init_fields("payments"), "keep_prepared_txn": True}
        response = await h.call(ApiKey.INIT_PRODUCER_ID, 6, **keep_only)
        assert response.error_code == ErrorCode.none
        assert (response.ongoing_txn_producer_id, response.ongoing_txn_producer_epoch) == (-1, -1)
        h.acl.grant((Op.TWO_PHASE_COMMIT, R.TRANSACTIONAL_ID, "payments"))
        response = await h.call(ApiKey.INIT_PRODUCER_ID, 6, **two_pc)
        assert response.error_code == ErrorCode.none
        assert h.broker.txn_coordinator.txns["payments"].two_phase

    run(tmp_path, body, transaction_two_phase_commit_enable=True)


def test_idempotent_init_producer_id_needs_idempotent_write_or_write_on_any_topic(
    tmp_path: Path,
) -> None:
    async def body(h: Harness) -> None:
        response = await h.call(ApiKey.INIT_PRODUCER_ID, 4, **init_fields(None))
        assert (response.error_code, response.producer_id) == (CLUSTER_DENIED, -1)
        assert h.acl.quiet == [cluster(Op.IDEMPOTENT_WRITE)]
        h.acl.any_grants.add((Op.WRITE, R.TOPIC))
        response = await h.call(ApiKey.INIT_PRODUCER_ID, 4, **init_fields(None))
        assert response.error_code == ErrorCode.none and response.producer_id >= 0
        h.acl.any_grants.clear()
        h.acl.grant(cluster(Op.IDEMPOTENT_WRITE))
        response = await h.call(ApiKey.INIT_PRODUCER_ID, 4, **init_fields(None))
        assert response.error_code == ErrorCode.none

    run(tmp_path, body)


def add_partitions_fields(txn_id: str, pid: int, epoch: int, *names: str) -> dict[str, Any]:
    topics = tuple(
        nested(ApiKey.ADD_PARTITIONS_TO_TXN, 3, "AddPartitionsToTxnTopic", name=n, partitions=(0,))
        for n in names
    )
    return {
        "v3_and_below_transactional_id": txn_id,
        "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": topics,
    }


def test_add_partitions_to_txn_needs_write_on_the_id_then_each_topic(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        h.acl.grant((Op.WRITE, R.TRANSACTIONAL_ID, "t"))
        pid, epoch = await h.open_txn("t")
        h.acl.grant((Op.WRITE, R.TRANSACTIONAL_ID, "other"), topic(Op.WRITE))
        fields = add_partitions_fields("u", pid, epoch, OPEN)
        response = await h.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, **fields)
        assert partition_errors(response.results_by_topic_v3_and_below, "results_by_partition") == {
            (OPEN, 0): TXN_DENIED
        }
        fields = add_partitions_fields("t", pid, epoch, OPEN, SECRET)
        response = await h.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, **fields)
        assert partition_errors(response.results_by_topic_v3_and_below, "results_by_partition") == {
            (OPEN, 0): ErrorCode.operation_not_attempted,
            (SECRET, 0): TOPIC_DENIED,
        }
        assert h.broker.txn_coordinator.txns["t"].partitions == set()  # nothing added
        fields = add_partitions_fields("t", pid, epoch, OPEN)
        response = await h.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, **fields)
        assert (
            response.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
            == ErrorCode.none
        )

    run(tmp_path, body)


def test_add_partitions_to_txn_refuses_internal_topics_even_without_acls(tmp_path: Path) -> None:
    """Only the coordinators add __consumer_offsets partitions (through AddOffsetsToTxn)."""

    async def body(h: Harness) -> None:
        h.use(None)
        pid, epoch = await h.open_txn("t")
        fields = add_partitions_fields("t", pid, epoch, OPEN, "__consumer_offsets")
        response = await h.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, **fields)
        assert partition_errors(response.results_by_topic_v3_and_below, "results_by_partition") == {
            (OPEN, 0): ErrorCode.operation_not_attempted,
            ("__consumer_offsets", 0): TOPIC_DENIED,
        }

    run(tmp_path, body)


def test_add_partitions_to_txn_v4_needs_cluster_action(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        h.acl.grant((Op.WRITE, R.TRANSACTIONAL_ID, "t"), topic(Op.WRITE))
        pid, epoch = await h.open_txn("t", (OPEN, 0))
        topics = (
            nested(
                ApiKey.ADD_PARTITIONS_TO_TXN,
                4,
                "AddPartitionsToTxnTopic",
                name=OPEN,
                partitions=(0,),
            ),
        )
        txn = nested(
            ApiKey.ADD_PARTITIONS_TO_TXN, 4, "AddPartitionsToTxnTransaction",
            transactional_id="t", producer_id=pid, producer_epoch=epoch, verify_only=True,
            topics=topics,
        )  # fmt: skip
        response = await h.call(ApiKey.ADD_PARTITIONS_TO_TXN, 4, transactions=(txn,))
        assert (response.error_code, response.results_by_transaction) == (CLUSTER_DENIED, ())
        h.acl.grant(cluster(Op.CLUSTER_ACTION))
        response = await h.call(ApiKey.ADD_PARTITIONS_TO_TXN, 4, transactions=(txn,))
        assert response.error_code == ErrorCode.none
        assert (
            response.results_by_transaction[0]
            .topic_results[0]
            .results_by_partition[0]
            .partition_error_code
            == ErrorCode.none
        )

    run(tmp_path, body)


def test_add_offsets_and_end_txn_need_write_on_the_id_and_read_on_the_group(
    tmp_path: Path,
) -> None:
    async def body(h: Harness) -> None:
        pid, epoch = await h.open_txn("t", (OPEN, 0))
        offsets = {"transactional_id": "t", "producer_id": pid, "producer_epoch": epoch}
        response = await h.call(ApiKey.ADD_OFFSETS_TO_TXN, 3, group_id="g", **offsets)
        assert response.error_code == TXN_DENIED
        h.acl.grant((Op.WRITE, R.TRANSACTIONAL_ID, "t"))
        response = await h.call(ApiKey.ADD_OFFSETS_TO_TXN, 3, group_id="g", **offsets)
        assert response.error_code == GROUP_DENIED
        meta = h.broker.txn_coordinator.txns["t"]
        assert {t for t, _ in meta.partitions} == {OPEN}  # __consumer_offsets not added
        h.acl.grants.clear()
        response = await h.call(ApiKey.END_TXN, 3, committed=True, **offsets)
        assert response.error_code == TXN_DENIED
        assert meta.state == TxnState.ONGOING

    run(tmp_path, body)


def test_txn_offset_commit_needs_write_on_the_id_read_on_the_group_and_topics(
    tmp_path: Path,
) -> None:
    async def body(h: Harness) -> None:
        topics = tuple(
            nested(
                ApiKey.TXN_OFFSET_COMMIT,
                3,
                "TxnOffsetCommitRequestTopic",
                name=n,
                partitions=(
                    nested(
                        ApiKey.TXN_OFFSET_COMMIT,
                        3,
                        "TxnOffsetCommitRequestPartition",
                        partition_index=0,
                        committed_offset=3,
                        committed_leader_epoch=-1,
                        committed_metadata="",
                    ),
                ),
            )
            for n in (OPEN, SECRET)
        )
        fields = {
            "transactional_id": "t",
            "group_id": "g",
            "producer_id": 1,
            "producer_epoch": 0,
            "generation_id": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": topics,
        }
        expected = [TXN_DENIED, GROUP_DENIED]
        for grant in ((Op.WRITE, R.TRANSACTIONAL_ID, "t"), (Op.READ, R.GROUP, "g")):
            response = await h.call(ApiKey.TXN_OFFSET_COMMIT, 3, **fields)
            assert set(partition_errors(response.topics).values()) == {expected.pop(0)}
            h.acl.grant(grant)
        h.acl.grant(topic(Op.READ))
        response = await h.call(ApiKey.TXN_OFFSET_COMMIT, 3, **fields)
        errors = partition_errors(response.topics)
        assert errors[(SECRET, 0)] == TOPIC_DENIED
        assert errors[(OPEN, 0)] not in (TOPIC_DENIED, GROUP_DENIED, TXN_DENIED)

    run(tmp_path, body)


# ---- KIP-664 tooling -----------------------------------------------------------------------


def test_describe_producers_needs_read(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        h.acl.grant(topic(Op.READ))
        topics = tuple(
            nested(ApiKey.DESCRIBE_PRODUCERS, 0, "TopicRequest", name=n, partition_indexes=(0,))
            for n in (OPEN, SECRET)
        )
        response = await h.call(ApiKey.DESCRIBE_PRODUCERS, 0, topics=topics)
        opened, secret = (t.partitions[0] for t in response.topics)
        assert (opened.error_code, opened.error_message) == (ErrorCode.none, None)
        assert (secret.error_code, secret.error_message) == (
            TOPIC_DENIED,
            "Topic authorization failed.",
        )

    run(tmp_path, body)


def test_describe_and_list_transactions_show_only_what_may_be_described(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        await h.open_txn("mine", (OPEN, 0), (SECRET, 0))
        await h.open_txn("theirs", (OPEN, 1))
        h.acl.grant((Op.DESCRIBE, R.TRANSACTIONAL_ID, "mine"), topic(Op.DESCRIBE))
        response = await h.call(
            ApiKey.DESCRIBE_TRANSACTIONS, 0, transactional_ids=("mine", "theirs")
        )
        mine, theirs = response.transaction_states
        assert (mine.error_code, mine.transaction_state) == (ErrorCode.none, "Ongoing")
        assert [(t.topic, t.partitions) for t in mine.topics] == [(OPEN, (0,))]  # not SECRET
        assert (theirs.error_code, theirs.topics) == (TXN_DENIED, ())
        listed = await h.call(
            ApiKey.LIST_TRANSACTIONS,
            1,
            state_filters=(),
            producer_id_filters=(),
            duration_filter=-1,
        )
        assert [t.transactional_id for t in listed.transaction_states] == ["mine"]

    run(tmp_path, body)


def test_aborting_a_hanging_transaction_needs_alter_or_cluster_action(tmp_path: Path) -> None:
    async def body(h: Harness) -> None:
        plog = h.broker.logs.get(OPEN, 0)
        assert plog is not None
        batch = build_batch(
            [(b"k", b"v", ())], timestamp_ms=0, producer_id=900, producer_epoch=0,
            base_sequence=0, transactional=True,
        )  # fmt: skip
        plog.append_batches(batch, validate_produced_batches(batch, 1 << 20))
        h.broker.writes.appended(plog)
        topics = (nested(27, 1, "WritableTxnMarkerTopic", name=OPEN, partition_indexes=(0,)),)
        marker = nested(
            27, 1, "WritableTxnMarker", producer_id=900, producer_epoch=0,
            transaction_result=False, topics=topics, coordinator_epoch=0,
        )  # fmt: skip
        stuck = plog.last_stable_offset
        response = await h.call(27, 1, markers=(marker,))
        assert partition_errors(response.markers[0].topics) == {(OPEN, 0): CLUSTER_DENIED}
        assert (plog.last_stable_offset, plog.log_end_offset) == (stuck, 1)
        assert h.acl.quiet == [cluster(Op.ALTER)]  # the fallback CLUSTER_ACTION is audited
        assert h.acl.calls == [cluster(Op.ALTER), cluster(Op.CLUSTER_ACTION)]
        h.acl.grant(cluster(Op.ALTER))  # what Kafka 3.8+ lets the abort tool use
        response = await h.call(27, 1, markers=(marker,))
        assert partition_errors(response.markers[0].topics) == {(OPEN, 0): ErrorCode.none}
        assert plog.last_stable_offset == plog.log_end_offset == 2

    run(tmp_path, body)
