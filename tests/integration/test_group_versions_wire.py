"""The classic consumer group APIs at every advertised version, over the wire: each request is
built with kio's schema of that version, sent by a raw client, and the answer decoded with
kio's response schema of the same version (flexible versions and tagged fields included).
"""

from __future__ import annotations

import datetime
from typing import Any, NamedTuple

import pytest

from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import SUPPORTED_VERSIONS, ApiKey
from tests.helpers.broker import BrokerProcess
from tests.helpers.wire import RawConnection
from tests.integration.test_core_versions_wire import entity, request, versions

SESSION = datetime.timedelta(seconds=10)
PROTOCOL = "range"


def newest(api: int) -> int:
    return SUPPORTED_VERSIONS[api][1]


class Member(NamedTuple):
    member_id: str
    generation_id: int


def join(conn: RawConnection, group: str, member_id: str = "") -> Any:
    version = newest(ApiKey.JOIN_GROUP)
    protocols = (
        entity(
            ApiKey.JOIN_GROUP, version, "JoinGroupRequestProtocol", name=PROTOCOL, metadata=b"m"
        ),
    )
    return conn.call(
        request(
            ApiKey.JOIN_GROUP,
            version,
            group_id=group,
            session_timeout=SESSION,
            rebalance_timeout=SESSION,
            member_id=member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocols=protocols,
            reason=None,
        )
    )


def sync(conn: RawConnection, group: str, member: Member, version: int, **fields: Any) -> Any:
    assignments = (
        entity(
            ApiKey.SYNC_GROUP,
            version,
            "SyncGroupRequestAssignment",
            member_id=member.member_id,
            assignment=b"a",
        ),
    )
    defaults: dict[str, Any] = {"protocol_type": "consumer", "protocol_name": PROTOCOL}
    return conn.call(
        request(
            ApiKey.SYNC_GROUP,
            version,
            group_id=group,
            generation_id=member.generation_id,
            member_id=member.member_id,
            group_instance_id=None,
            assignments=assignments,
            **(defaults | fields),
        )
    )


def joined(conn: RawConnection, group: str) -> Member:
    """A one-member group in CompletingRebalance (JoinGroup v4+ asks for a member id first)."""
    first = join(conn, group)
    assert first.error_code == ErrorCode.member_id_required
    answer = join(conn, group, first.member_id)
    assert answer.error_code == 0
    return Member(answer.member_id, answer.generation_id)


def stable(conn: RawConnection, group: str) -> Member:
    member = joined(conn, group)
    assert sync(conn, group, member, newest(ApiKey.SYNC_GROUP)).error_code == 0
    return member


# ---- SyncGroup -----------------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(ApiKey.SYNC_GROUP))
def test_sync_group(shared_broker: BrokerProcess, version: int) -> None:
    group = f"wire-sync-{version}"
    with RawConnection(shared_broker.bootstrap) as conn:
        member = joined(conn, group)
        if version >= 5:  # the group's protocol is checked against the one named
            wrong = sync(conn, group, member, version, protocol_name="roundrobin")
            assert wrong.error_code == ErrorCode.inconsistent_group_protocol
        answer = sync(conn, group, member, version)
    assert (answer.error_code, answer.assignment) == (0, b"a")
    if version >= 5:
        assert (answer.protocol_type, answer.protocol_name) == ("consumer", PROTOCOL)


# ---- Heartbeat -----------------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(ApiKey.HEARTBEAT))
def test_heartbeat(shared_broker: BrokerProcess, version: int) -> None:
    group = f"wire-heartbeat-{version}"
    with RawConnection(shared_broker.bootstrap) as conn:
        member = stable(conn, group)

        def beat(member_id: str) -> int:
            req = request(
                ApiKey.HEARTBEAT,
                version,
                group_id=group,
                generation_id=member.generation_id,
                member_id=member_id,
                group_instance_id=None,
            )
            return int(conn.call(req).error_code)

        assert beat(member.member_id) == 0
        assert beat("nobody") == ErrorCode.unknown_member_id


# ---- LeaveGroup ----------------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(ApiKey.LEAVE_GROUP))
def test_leave_group(shared_broker: BrokerProcess, version: int) -> None:
    group = f"wire-leave-{version}"
    with RawConnection(shared_broker.bootstrap) as conn:
        member = stable(conn, group)
        if version < 3:
            req = request(ApiKey.LEAVE_GROUP, version, group_id=group, member_id=member.member_id)
            assert conn.call(req).error_code == 0
        else:  # batched, with a reason from v5, and one member unknown
            members = tuple(
                entity(
                    ApiKey.LEAVE_GROUP,
                    version,
                    "MemberIdentity",
                    member_id=member_id,
                    group_instance_id=None,
                    reason="wire test",
                )
                for member_id in (member.member_id, "nobody")
            )
            answer = conn.call(
                request(ApiKey.LEAVE_GROUP, version, group_id=group, members=members)
            )
            assert answer.error_code == 0
            assert [(m.member_id, m.error_code) for m in answer.members] == [
                (member.member_id, 0),
                ("nobody", ErrorCode.unknown_member_id),
            ]
        described = describe(conn, group, newest(ApiKey.DESCRIBE_GROUPS)).groups[0]
    assert (described.group_state, described.members) == ("Empty", ())


# ---- DescribeGroups ------------------------------------------------------------------------


def describe(conn: RawConnection, group: str, version: int) -> Any:
    return conn.call(
        request(
            ApiKey.DESCRIBE_GROUPS,
            version,
            groups=(group, f"{group}-unknown"),
            include_authorized_operations=True,
        )
    )


@pytest.mark.parametrize("version", versions(ApiKey.DESCRIBE_GROUPS))
def test_describe_groups(shared_broker: BrokerProcess, version: int) -> None:
    group = f"wire-describe-{version}"
    with RawConnection(shared_broker.bootstrap) as conn:
        member = stable(conn, group)
        known, unknown = describe(conn, group, version).groups
    assert (known.error_code, known.group_state, known.protocol_data) == (0, "Stable", PROTOCOL)
    assert [m.member_id for m in known.members] == [member.member_id]
    if version >= 6:  # KIP-1043: an unknown group is an error
        assert (unknown.error_code, unknown.error_message, unknown.group_state) == (
            ErrorCode.group_id_not_found,
            f"Group {group}-unknown not found.",
            "Dead",
        )
    else:
        assert (unknown.error_code, unknown.group_state) == (0, "Dead")


# ---- ListGroups ----------------------------------------------------------------------------


@pytest.mark.parametrize("version", versions(ApiKey.LIST_GROUPS))
def test_list_groups(shared_broker: BrokerProcess, version: int) -> None:
    group = f"wire-list-{version}"

    def listed(conn: RawConnection, states: tuple[str, ...], types: tuple[str, ...]) -> Any:
        req = request(ApiKey.LIST_GROUPS, version, states_filter=states, types_filter=types)
        answer = conn.call(req)
        assert answer.error_code == 0
        return {g.group_id: g for g in answer.groups}

    with RawConnection(shared_broker.bootstrap) as conn:
        stable(conn, group)
        # Kafka's filters ignore case; a version without them lists every group.
        everything = listed(conn, (), ())
        in_stable = listed(conn, (" STABLE",), ("Classic",))
        in_empty = listed(conn, ("empty",), ())
        consumer_type = listed(conn, (), ("consumer",))
    assert everything[group].protocol_type == "consumer"
    assert group in in_stable
    assert (group in in_empty) is (version < 4)
    assert (group in consumer_type) is (version < 5)
    if version >= 4:
        assert everything[group].group_state == "Stable"
    if version >= 5:
        assert everything[group].group_type == "classic"


# ---- OffsetCommit and OffsetFetch ----------------------------------------------------------


def create_topic(conn: RawConnection, name: str) -> None:
    topic = (entity(ApiKey.METADATA, 4, "MetadataRequestTopic", name=name),)
    conn.call(request(ApiKey.METADATA, 4, topics=topic, allow_auto_topic_creation=True))


def commit(
    conn: RawConnection, version: int, group: str, topic: str, offset: int, generation: int = -1
) -> int:
    """Commits `offset` of partition 0; the partition's error code."""
    partition = entity(
        ApiKey.OFFSET_COMMIT,
        version,
        "OffsetCommitRequestPartition",
        partition_index=0,
        committed_offset=offset,
        committed_leader_epoch=-1,
        committed_metadata="meta",
    )
    topics = (
        entity(
            ApiKey.OFFSET_COMMIT,
            version,
            "OffsetCommitRequestTopic",
            name=topic,
            partitions=(partition,),
        ),
    )
    req = request(
        ApiKey.OFFSET_COMMIT,
        version,
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id="",
        group_instance_id=None,
        retention_time=datetime.timedelta(milliseconds=-1),
        topics=topics,
    )
    (answer,) = conn.call(req).topics[0].partitions
    return int(answer.error_code)


def fetched(conn: RawConnection, group: str, topic: str) -> tuple[int, str]:
    """The committed offset and metadata of partition 0, read with OffsetFetch v7."""
    topics = (
        entity(
            ApiKey.OFFSET_FETCH, 7, "OffsetFetchRequestTopic", name=topic, partition_indexes=(0,)
        ),
    )
    answer = conn.call(request(ApiKey.OFFSET_FETCH, 7, group_id=group, topics=topics))
    (partition,) = answer.topics[0].partitions
    return int(partition.committed_offset), str(partition.metadata)


@pytest.mark.parametrize("version", versions(ApiKey.OFFSET_COMMIT))
def test_offset_commit(shared_broker: BrokerProcess, version: int) -> None:
    group, topic = f"wire-commit-{version}", f"wire-commit-{version}"
    with RawConnection(shared_broker.bootstrap) as conn:
        create_topic(conn, topic)
        # No generation (v9: member epoch -1): a simple commit that creates the group.
        assert commit(conn, version, group, topic, 42) == 0
        assert fetched(conn, group, topic) == (42, "meta")
        # A generation for a group that does not exist: GROUP_ID_NOT_FOUND from v9.
        unknown = commit(conn, version, f"{group}-unknown", topic, 1, generation=3)
    expected = ErrorCode.group_id_not_found if version >= 9 else ErrorCode.illegal_generation
    assert unknown == expected


def fetch_request(version: int, groups: dict[str, str | None]) -> Any:
    """OffsetFetch of partition 0 of each group's topic (None: every committed offset)."""
    if version < 8:
        ((group, topic),) = groups.items()
        asked = (
            entity(
                ApiKey.OFFSET_FETCH,
                version,
                "OffsetFetchRequestTopic",
                name=topic,
                partition_indexes=(0,),
            ),
        )
        return request(
            ApiKey.OFFSET_FETCH, version, group_id=group, topics=asked, require_stable=True
        )
    entries = tuple(
        entity(
            ApiKey.OFFSET_FETCH,
            version,
            "OffsetFetchRequestGroup",
            group_id=group,
            # v9: a classic group does not check them (Kafka checks consumer-protocol groups)
            member_id="not-a-member",
            member_epoch=7,
            topics=None
            if topic is None
            else (
                entity(
                    ApiKey.OFFSET_FETCH,
                    version,
                    "OffsetFetchRequestTopics",
                    name=topic,
                    partition_indexes=(0,),
                ),
            ),
        )
        for group, topic in groups.items()
    )
    return request(ApiKey.OFFSET_FETCH, version, groups=entries, require_stable=True)


@pytest.mark.parametrize("version", versions(ApiKey.OFFSET_FETCH))
def test_offset_fetch(shared_broker: BrokerProcess, version: int) -> None:
    group, topic = f"wire-fetch-{version}", f"wire-fetch-{version}"
    top = newest(ApiKey.OFFSET_COMMIT)
    with RawConnection(shared_broker.bootstrap) as conn:
        create_topic(conn, topic)
        assert commit(conn, top, group, topic, 7) == 0
        assert commit(conn, top, f"{group}-b", topic, 9) == 0
        if version < 8:
            answer = conn.call(fetch_request(version, {group: topic}))
            (partition,) = answer.topics[0].partitions
            assert (partition.committed_offset, partition.metadata) == (7, "meta")
            assert partition.error_code == 0
            return
        answer = conn.call(fetch_request(version, {group: topic, f"{group}-b": None}))
    first, second = answer.groups
    assert (first.group_id, first.error_code, second.group_id, second.error_code) == (
        group,
        0,
        f"{group}-b",
        0,
    )
    by_group = {
        g.group_id: [
            (t.name, p.partition_index, p.committed_offset) for t in g.topics for p in t.partitions
        ]
        for g in answer.groups
    }
    assert by_group == {group: [(topic, 0, 7)], f"{group}-b": [(topic, 0, 9)]}


# ---- JoinGroup -----------------------------------------------------------------------------


def join_at(
    conn: RawConnection, version: int, group: str, member_id: str = "", **extra: Any
) -> Any:
    protocols = (
        entity(
            ApiKey.JOIN_GROUP, version, "JoinGroupRequestProtocol", name=PROTOCOL, metadata=b"m"
        ),
    )
    fields: dict[str, Any] = {"group_instance_id": None, "reason": "wire test"} | extra
    return conn.call(
        request(
            ApiKey.JOIN_GROUP,
            version,
            group_id=group,
            session_timeout=SESSION,
            rebalance_timeout=SESSION,
            member_id=member_id,
            protocol_type="consumer",
            protocols=protocols,
            **fields,
        )
    )


@pytest.mark.parametrize("version", versions(ApiKey.JOIN_GROUP))
def test_join_group(shared_broker: BrokerProcess, version: int) -> None:
    group = f"wire-join-{version}"
    with RawConnection(shared_broker.bootstrap) as conn:
        answer = join_at(conn, version, group)
        if version >= 4:  # a dynamic member is first given its id
            assert answer.error_code == ErrorCode.member_id_required
            if version >= 7:  # "no protocol" is null from v7, as Kafka answers
                assert answer.protocol_name is None
            answer = join_at(conn, version, group, answer.member_id)
    assert (answer.error_code, answer.protocol_name, answer.leader) == (
        0,
        PROTOCOL,
        answer.member_id,
    )
    assert [m.member_id for m in answer.members] == [answer.member_id]
    if version >= 7:
        assert answer.protocol_type == "consumer"


@pytest.mark.parametrize("version", [v for v in versions(ApiKey.JOIN_GROUP) if v >= 5])
def test_static_leader_rejoining_a_stable_group(shared_broker: BrokerProcess, version: int) -> None:
    """KIP-814: from v9 the restarted static leader is told it leads, with the members, and
    to skip the assignment; before, it is given the old leader id and no members."""
    group = f"wire-static-{version}"
    with RawConnection(shared_broker.bootstrap) as conn:
        first = join_at(conn, version, group, group_instance_id="static-1")
        assert first.error_code == 0
        member = Member(first.member_id, first.generation_id)
        assert sync(conn, group, member, newest(ApiKey.SYNC_GROUP)).error_code == 0
        again = join_at(conn, version, group, group_instance_id="static-1")
    assert again.error_code == 0 and again.member_id != first.member_id
    assert again.generation_id == first.generation_id  # no rebalance
    if version >= 9:
        assert (again.leader, again.skip_assignment) == (again.member_id, True)
        assert [m.group_instance_id for m in again.members] == ["static-1"]
    else:
        assert (again.leader, again.members) == (first.member_id, ())
