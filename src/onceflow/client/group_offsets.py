"""One partition's committed offset in a group without members, read (OffsetFetch with
`require_stable`) and written (OffsetCommit outside any generation, as an admin commits to
an empty group, or TxnOffsetCommit inside a transaction). The Spark sink keeps its ledger
and its per-batch decisions this way.

Requests go to the group's coordinator and are sent again while the answer is retriable: the
coordinator loading or moved, a connection lost, or (reading) an offset still pending in an
open transaction. Other errors are raised with Kafka's names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from onceflow.client.blocking import Connection
from onceflow.client.cluster import KEY_TYPE_GROUP
from onceflow.client.participant_link import Link, coordinator_request, version
from onceflow.client.wire import request_entity
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, request_type

__all__ = ["CommittedOffset", "GroupOffsets"]

# v8 is the first with a list of groups (and Kafka 3.0's); require_stable exists since v7.
OFFSET_FETCH_VERSIONS = (8, 9)
# v2 to v9 share the shape used here (v2-v4's retention time defaults to the broker's).
OFFSET_COMMIT_VERSIONS = (2, 9)
# v0-v3 are a transaction version 0 client's (librdkafka's too); v3 adds the generation.
TXN_OFFSET_COMMIT_VERSIONS = (0, 3)


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    metadata: str


class GroupOffsets:
    """The committed offsets of `group`, reached through `link`."""

    def __init__(self, link: Link, group: str, timeout_s: float) -> None:
        self.link = link
        self.group = group
        self.timeout_s = timeout_s

    def committed(self, topic: str, partition: int) -> CommittedOffset | None:
        """The committed offset of topic-partition, None when there is none; an offset
        still pending in a transaction is waited out (UNSTABLE_OFFSET_COMMIT is retried)."""

        def request(connection: Connection) -> tuple[int, int, Any]:
            v = version(connection, ApiKey.OFFSET_FETCH, *OFFSET_FETCH_VERSIONS)
            wanted = request_entity(
                ApiKey.OFFSET_FETCH,
                v,
                "OffsetFetchRequestTopics",
                name=topic,
                partition_indexes=(partition,),
            )
            group = request_entity(
                ApiKey.OFFSET_FETCH,
                v,
                "OffsetFetchRequestGroup",
                group_id=self.group,
                topics=(wanted,),
            )
            body = build(request_type(ApiKey.OFFSET_FETCH, v), groups=(group,), require_stable=True)
            return ApiKey.OFFSET_FETCH, v, body

        def error_of(answer: Any) -> int:
            (group,) = answer.groups
            if group.error_code != ErrorCode.none:
                return int(group.error_code)
            return max((int(p.error_code) for t in group.topics for p in t.partitions), default=0)

        answer = self._call("OffsetFetch", request, error_of)
        for t in answer.groups[0].topics:
            for p in t.partitions:
                if t.name == topic and p.partition_index == partition and p.committed_offset >= 0:
                    return CommittedOffset(int(p.committed_offset), p.metadata or "")
        return None

    def commit(self, topic: str, partition: int, offset: int, metadata: str) -> None:
        """Commit `offset` with `metadata`, acknowledged once the coordinator made it durable;
        the same value committed twice is one commit."""

        def request(connection: Connection) -> tuple[int, int, Any]:
            v = version(connection, ApiKey.OFFSET_COMMIT, *OFFSET_COMMIT_VERSIONS)
            entry = request_entity(
                ApiKey.OFFSET_COMMIT,
                v,
                "OffsetCommitRequestPartition",
                partition_index=partition,
                committed_offset=offset,
                committed_leader_epoch=-1,
                commit_timestamp=-1,
                committed_metadata=metadata,
            )
            topics = request_entity(
                ApiKey.OFFSET_COMMIT, v, "OffsetCommitRequestTopic", name=topic, partitions=(entry,)
            )
            body = build(
                request_type(ApiKey.OFFSET_COMMIT, v),
                group_id=self.group,
                generation_id_or_member_epoch=-1,
                member_id="",
                group_instance_id=None,
                topics=(topics,),
            )
            return ApiKey.OFFSET_COMMIT, v, body

        def error_of(answer: Any) -> int:
            return max((int(p.error_code) for t in answer.topics for p in t.partitions), default=0)

        self._call("OffsetCommit", request, error_of)

    def commit_in_transaction(
        self,
        transactional_id: str,
        identity: tuple[int, int],
        offsets: Mapping[tuple[str, int], tuple[int, str]],
    ) -> None:
        """TxnOffsetCommit of `offsets` ((topic, partition) -> (offset, metadata)) in the
        open transaction of `transactional_id` at producer (id, epoch) `identity`, outside
        any generation (as a consumer that never joined): pending until the transaction's
        end, which the group's AddOffsetsToTxn tied it to."""
        producer_id, epoch = identity
        by_topic: dict[str, list[tuple[int, int, str]]] = {}
        for (topic, partition), (offset, metadata) in offsets.items():
            by_topic.setdefault(topic, []).append((partition, offset, metadata))

        def request(connection: Connection) -> tuple[int, int, Any]:
            v = version(connection, ApiKey.TXN_OFFSET_COMMIT, *TXN_OFFSET_COMMIT_VERSIONS)
            topics = tuple(
                request_entity(
                    ApiKey.TXN_OFFSET_COMMIT,
                    v,
                    "TxnOffsetCommitRequestTopic",
                    name=topic,
                    partitions=tuple(
                        request_entity(
                            ApiKey.TXN_OFFSET_COMMIT,
                            v,
                            "TxnOffsetCommitRequestPartition",
                            partition_index=partition,
                            committed_offset=offset,
                            committed_leader_epoch=-1,
                            committed_metadata=metadata,
                        )
                        for partition, offset, metadata in entries
                    ),
                )
                for topic, entries in by_topic.items()
            )
            body = build(
                request_type(ApiKey.TXN_OFFSET_COMMIT, v),
                transactional_id=transactional_id,
                group_id=self.group,
                producer_id=producer_id,
                producer_epoch=epoch,
                generation_id=-1,
                member_id="",
                group_instance_id=None,
                topics=topics,
            )
            return ApiKey.TXN_OFFSET_COMMIT, v, body

        def error_of(answer: Any) -> int:
            codes = {int(p.error_code) for t in answer.topics for p in t.partitions}
            codes.discard(ErrorCode.none)
            return min(codes, key=lambda c: ErrorCode(c).retriable) if codes else ErrorCode.none

        self._call("TxnOffsetCommit", request, error_of)

    def _call(
        self,
        what: str,
        request: Callable[[Connection], tuple[int, int, Any]],
        error_of: Callable[[Any], int],
    ) -> Any:
        return coordinator_request(
            self.link,
            self._find,
            self._moved,
            f"{what} of group {self.group}",
            request,
            error_of,
            self.timeout_s,
        )

    def _find(self) -> Connection:
        # Asked of the link's cluster each time (a dict lookup once found): a connection
        # kept here would outlive the link's close, and the pool hands it on.
        return self.link.wire.known_coordinator(self.group, KEY_TYPE_GROUP, f"group {self.group}")

    def _moved(self) -> None:
        self.link.forget_coordinator(self.group, KEY_TYPE_GROUP)
