"""The AdminClient calls of `onceflow groups`: ListGroups, DescribeGroups, DeleteGroups,
OffsetFetch, OffsetCommit and ListOffsets through confluent-kafka, failures named as Kafka
names them. `GroupAdmin` is also the reset plan's `OffsetSource`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import OffsetSpec as _OffsetSpec  # type: ignore[attr-defined]

from onceflow.cli.admin_errors import error_code, error_text
from onceflow.cli.common import CliError
from onceflow.cli.group_reset import Tp
from onceflow.cli.group_views import Group, Offsets

__all__ = ["GroupAdmin"]

OffsetSpec: Any = _OffsetSpec  # its constructors are untyped


class GroupAdmin:
    """One AdminClient and the timeout of each call."""

    def __init__(self, admin: Any, timeout_s: float) -> None:
        self.admin = admin
        self.timeout_s = timeout_s

    def _fail(self, what: str, exc: BaseException) -> CliError:
        return CliError(f"cannot {what}: {error_text(exc, self.admin)}")

    def listings(self) -> list[Any]:
        try:
            result = self.admin.list_consumer_groups(request_timeout=self.timeout_s).result()
        except KafkaException as exc:
            raise self._fail("list consumer groups", exc) from None
        if result.errors:
            raise self._fail("list consumer groups", KafkaException(result.errors[0]))
        return sorted(result.valid, key=lambda listing: listing.group_id)

    def group_ids(self) -> list[str]:
        return [listing.group_id for listing in self.listings()]

    def describe(self, groups: list[str]) -> list[Group]:
        """Each group's description, or the text of the error that kept it from us; a group
        the broker does not know is Dead, as DescribeGroups answers."""
        if not groups:
            return []
        futures = self.admin.describe_consumer_groups(groups, request_timeout=self.timeout_s)
        out = []
        for group in groups:
            try:
                out.append(Group(group, futures[group].result()))
            except KafkaException as exc:
                if error_code(exc) == KafkaError.GROUP_ID_NOT_FOUND:
                    out.append(Group(group, None, state=ConsumerGroupState.DEAD))
                else:
                    out.append(Group(group, None, error=error_text(exc, self.admin)))
        return out

    def delete(self, groups: list[str]) -> dict[str, str | None]:
        futures = self.admin.delete_consumer_groups(groups, request_timeout=self.timeout_s)
        out: dict[str, str | None] = {}
        for group in groups:
            try:
                futures[group].result()
                out[group] = None
            except KafkaException as exc:
                out[group] = error_text(exc, self.admin)
        return out

    def partitions(self, topics: list[str]) -> dict[str, list[int]]:
        """Each topic's partition ids (Metadata without auto-creation)."""
        if not topics:
            return {}
        futures = self.admin.describe_topics(
            TopicCollection(topics), request_timeout=self.timeout_s
        )
        out = {}
        for topic in topics:
            try:
                description = futures[topic].result()
            except KafkaException as exc:
                raise self._fail(f"describe topic {topic}", exc) from None
            out[topic] = sorted(p.id for p in description.partitions)
        return out

    def log_offsets(self, partitions: Iterable[Tp], spec: Any) -> Offsets:
        """ListOffsets for each partition: its offset, or the text of its error."""
        wanted = {TopicPartition(t, p): spec for t, p in partitions}
        if not wanted:
            return {}
        futures = self.admin.list_offsets(wanted, request_timeout=self.timeout_s)
        out: Offsets = {}
        for tp, future in futures.items():
            try:
                out[(tp.topic, tp.partition)] = int(future.result().offset)
            except KafkaException as exc:
                out[(tp.topic, tp.partition)] = error_text(exc, self.admin)
        return out

    def log_end_offsets(self, partitions: Iterable[Tp]) -> Offsets:
        """The high watermarks (ListOffsets LATEST, read_uncommitted as Kafka's tool)."""
        return self.log_offsets(partitions, OffsetSpec.latest())

    def _offsets(self, partitions: Iterable[Tp], spec: Any, what: str) -> dict[Tp, int]:
        out = {}
        for (topic, partition), offset in self.log_offsets(partitions, spec).items():
            if isinstance(offset, str):
                raise CliError(
                    f"Error getting {what} of topic partition {topic}-{partition}: {offset}"
                )
            out[(topic, partition)] = offset
        return out

    def earliest(self, partitions: Iterable[Tp]) -> dict[Tp, int]:
        return self._offsets(partitions, OffsetSpec.earliest(), "starting offset")

    def latest(self, partitions: Iterable[Tp]) -> dict[Tp, int]:
        return self._offsets(partitions, OffsetSpec.latest(), "ending offset")

    def for_time(self, partitions: Iterable[Tp], timestamp_ms: int) -> dict[Tp, int]:
        spec = OffsetSpec.for_timestamp(timestamp_ms)
        return self._offsets(partitions, spec, "offset by timestamp")

    def committed(self, group: str) -> dict[Tp, int]:
        """The group's committed offsets (OffsetFetch for every partition)."""
        request = [ConsumerGroupTopicPartitions(group)]
        try:
            futures = self.admin.list_consumer_group_offsets(
                request, request_timeout=self.timeout_s
            )
            result = futures[group].result()
        except KafkaException as exc:
            raise self._fail(f"fetch the offsets of group {group}", exc) from None
        return {
            (tp.topic, tp.partition): int(tp.offset)
            for tp in result.topic_partitions
            if tp.error is None and tp.offset >= 0
        }

    def commit(self, group: str, offsets: dict[Tp, int]) -> None:
        """OffsetCommit of the new offsets, outside any generation (the group is empty)."""
        tps = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
        request = [ConsumerGroupTopicPartitions(group, tps)]
        try:
            futures = self.admin.alter_consumer_group_offsets(
                request, request_timeout=self.timeout_s
            )
            result = futures[group].result()
        except KafkaException as exc:
            raise self._fail(f"reset the offsets of group {group}", exc) from None
        failed = [tp for tp in result.topic_partitions if tp.error is not None]
        if failed:
            tp = failed[0]
            reason = error_text(KafkaException(tp.error), self.admin)
            raise CliError(
                f"cannot reset the offset of group {group} on {tp.topic}-{tp.partition}: {reason}"
            )
