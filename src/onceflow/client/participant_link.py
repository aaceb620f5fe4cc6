"""The participant client's way to a cluster, and its transaction coordinator's requests.

`Link` keeps one `Cluster` and opens it again after a lost connection (a cut socket is
never reused); it remembers the coordinator and the partition leaders until an answer says
they moved. The coordinator requests (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn)
are sent again through the client's retry helper while the answer is retriable or the
connection was lost; other errors are raised with Kafka's names.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from onceflow.client.blocking import Connection
from onceflow.client.cluster import KEY_TYPE_TRANSACTION, Cluster
from onceflow.client.cluster_pool import pool
from onceflow.client.errors import KafkaApiError, Unreachable, UnsupportedVersion
from onceflow.client.participant_state import ProducerSettings
from onceflow.client.retry import retrying
from onceflow.client.wire import api_name, request_entity
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, request_type
from onceflow.protocol.onceflow_apis import OWN_API_KEYS

__all__ = [
    "Identity",
    "Link",
    "add_offsets",
    "add_partitions",
    "complete_transactions",
    "coordinator_request",
    "end_txn",
    "init_producer_id",
    "offers_complete_transactions",
    "transaction_log_partitions",
    "version",
]

_MOVED = {ErrorCode.not_coordinator, ErrorCode.coordinator_not_available}


@dataclass(frozen=True, slots=True)
class Identity:
    """What InitProducerId v6 answered: this instance's producer id and epoch, and the open
    transaction it kept (-1, -1: none)."""

    producer_id: int
    epoch: int
    ongoing_producer_id: int
    ongoing_epoch: int


def version(connection: Connection, api_key: int, lo: int, hi: int) -> int:
    """The highest version of `api_key` in lo..hi that the broker speaks."""
    if api_key in OWN_API_KEYS:
        connection.learn_own_versions()
    theirs = connection.versions.get(api_key)
    if theirs is None or theirs[1] < lo or theirs[0] > hi:
        offered = "none" if theirs is None else f"v{theirs[0]}-{theirs[1]}"
        raise UnsupportedVersion(
            f"the broker at {connection.address} offers {api_name(api_key)} {offered}; "
            f"the participant client needs v{lo}-{hi}"
        )
    return min(hi, theirs[1])


class Link:
    """A cluster reached from the bootstrap servers, opened again when a connection is lost."""

    def __init__(self, bootstrap: str, settings: ProducerSettings) -> None:
        self.bootstrap = bootstrap
        self.timeout_s = settings.request_timeout_ms / 1000
        self.security = settings.security
        self.backoff_s = settings.retry_backoff_ms / 1000
        self._cluster: Cluster | None = None
        self.partitions: dict[str, dict[int, int]] = {}  # topic -> partition -> leader
        # A producer's topics are created on first use where the broker auto-creates.
        self.auto_create = True

    @property
    def wire(self) -> Cluster:
        if self._cluster is None:
            self._cluster = pool.take(self.bootstrap, self.timeout_s, self.security)
        return self._cluster

    def reset(self) -> None:
        """A connection was lost: every connection goes, and what they told us."""
        if self._cluster is not None:
            self._cluster.close()
        self._cluster = None
        self.partitions.clear()

    def close(self) -> None:
        """Done: the connections go to the next client of this process (`cluster_pool`)."""
        cluster, self._cluster = self._cluster, None
        self.reset()
        if cluster is not None:
            pool.give_back(cluster, self.bootstrap, self.timeout_s, self.security)

    def coordinator(self, transactional_id: str) -> Connection:
        """The coordinator of `transactional_id`, as this process last found it."""
        what = f"transactional id {transactional_id}"
        return self.wire.known_coordinator(transactional_id, KEY_TYPE_TRANSACTION, what)

    def coordinator_moved(self, transactional_id: str) -> None:
        self.forget_coordinator(transactional_id, KEY_TYPE_TRANSACTION)

    def forget_coordinator(self, key: str, key_type: int) -> None:
        """A coordinator moved: the next request asks FindCoordinator again."""
        if self._cluster is not None:  # else reset() dropped what it knew already
            self._cluster.forget_coordinator(key, key_type)

    def leaders(self, topic: str) -> dict[int, int]:
        """Partition -> leader of `topic`, from Metadata when not known yet."""
        known = self.partitions.get(topic)
        if known is None:

            def ask() -> tuple[int, dict[int, int]]:
                # A broker that auto-creates answers LEADER_NOT_AVAILABLE while it does.
                metadata = self.wire.metadata([topic], auto_create=self.auto_create)
                error = metadata.topic_errors.get(topic)
                if error is not None:
                    return error, {}
                return ErrorCode.none, metadata.leaders[topic]

            error, leaders = retrying(
                ask, lambda got: ErrorCode(got[0]).retriable, self.timeout_s, self.backoff_s
            )
            if error != ErrorCode.none:
                raise KafkaApiError(error, f"topic {topic}: {ErrorCode(error).name.upper()}")
            known = self.partitions[topic] = leaders
        return known

    def forget(self, topics: Iterable[str]) -> None:
        """Leaders moved (NOT_LEADER_OR_FOLLOWER and the like): ask Metadata again."""
        for topic in topics:
            self.partitions.pop(topic, None)


def _coordinator_call(
    link: Link,
    transactional_id: str,
    what: str,
    request: Callable[[Connection], tuple[int, int, Any]],
    error_of: Callable[[Any], int],
    timeout_s: float,
) -> Any:
    """One request to the coordinator of `transactional_id`, sent again while it fails
    retriably; its answer."""
    return coordinator_request(
        link,
        lambda: link.coordinator(transactional_id),
        lambda: link.coordinator_moved(transactional_id),
        f"{what} of transactional id {transactional_id}",
        request,
        error_of,
        timeout_s,
    )


def coordinator_request(
    link: Link,
    coordinator: Callable[[], Connection],
    moved: Callable[[], None],
    what: str,
    request: Callable[[Connection], tuple[int, int, Any]],
    error_of: Callable[[Any], int],
    timeout_s: float,
) -> Any:
    """One request to a coordinator (`coordinator()` finds it, `moved()` forgets it), sent
    again while it fails retriably or the connection was lost; its answer. Other errors are
    raised as KafkaApiError naming `what`."""

    def attempt() -> tuple[int, Any]:
        try:
            connection = coordinator()
            api_key, v, body = request(connection)
            answer = connection.call_at(api_key, v, body)
        except Unreachable:
            link.reset()
            moved()
            return int(ErrorCode.network_exception), None
        except KafkaApiError as exc:  # FindCoordinator's own refusal
            return exc.code, None
        code = error_of(answer)
        if code in _MOVED:
            moved()
        return code, answer

    code, answer = retrying(
        attempt, lambda result: ErrorCode(result[0]).retriable, timeout_s, link.backoff_s
    )
    if answer is None and code == ErrorCode.network_exception:
        raise Unreachable(f"{what}: no broker answered")
    if code != ErrorCode.none:
        raise KafkaApiError(code, f"{what}: {ErrorCode(code).name.upper()}")
    return answer


def init_producer_id(
    link: Link, transactional_id: str, settings: ProducerSettings, *, keep: bool
) -> Identity:
    """InitProducerId v6 with enable2Pc (if two-phase) and keepPreparedTxn as asked. An
    ordinary transactional producer takes the broker's highest version from v0, so it also
    works with brokers without KIP-939."""
    lowest = 6 if settings.two_phase or keep else 0

    def request(connection: Connection) -> tuple[int, int, Any]:
        v = version(connection, ApiKey.INIT_PRODUCER_ID, lowest, 6)
        body = build(
            request_type(ApiKey.INIT_PRODUCER_ID, v),
            transactional_id=transactional_id,
            transaction_timeout=datetime.timedelta(milliseconds=settings.transaction_timeout_ms),
            producer_id=-1,
            producer_epoch=-1,
            enable2_pc=settings.two_phase,
            keep_prepared_txn=keep,
        )
        return ApiKey.INIT_PRODUCER_ID, v, body

    timeout_s = settings.delivery_timeout_ms / 1000
    answer = _coordinator_call(
        link, transactional_id, "InitProducerId", request, lambda a: a.error_code, timeout_s
    )
    return Identity(
        int(answer.producer_id),
        int(answer.producer_epoch),
        int(getattr(answer, "ongoing_txn_producer_id", -1)),  # v6 and later
        int(getattr(answer, "ongoing_txn_producer_epoch", -1)),
    )


def add_offsets(
    link: Link, transactional_id: str, identity: tuple[int, int], group: str, timeout_s: float
) -> None:
    """AddOffsetsToTxn (v0-v3): the group's offsets partition joins the transaction, so the
    group's TxnOffsetCommit is decided by its end."""
    producer_id, epoch = identity

    def request(connection: Connection) -> tuple[int, int, Any]:
        v = version(connection, ApiKey.ADD_OFFSETS_TO_TXN, 0, 3)
        body = build(
            request_type(ApiKey.ADD_OFFSETS_TO_TXN, v),
            transactional_id=transactional_id,
            producer_id=producer_id,
            producer_epoch=epoch,
            group_id=group,
        )
        return ApiKey.ADD_OFFSETS_TO_TXN, v, body

    what = f"AddOffsetsToTxn (group {group})"
    _coordinator_call(link, transactional_id, what, request, lambda a: a.error_code, timeout_s)


def add_partitions(
    link: Link,
    transactional_id: str,
    identity: tuple[int, int],
    partitions: dict[str, list[int]],
    timeout_s: float,
) -> None:
    """AddPartitionsToTxn (v0-v3, a client's) for every partition in `partitions` at once."""
    producer_id, epoch = identity

    def request(connection: Connection) -> tuple[int, int, Any]:
        v = version(connection, ApiKey.ADD_PARTITIONS_TO_TXN, 0, 3)
        topics = tuple(
            request_entity(
                ApiKey.ADD_PARTITIONS_TO_TXN,
                v,
                "AddPartitionsToTxnTopic",
                name=topic,
                partitions=tuple(sorted(numbers)),
            )
            for topic, numbers in partitions.items()
        )
        body = build(
            request_type(ApiKey.ADD_PARTITIONS_TO_TXN, v),
            v3_and_below_transactional_id=transactional_id,
            v3_and_below_producer_id=producer_id,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=topics,
        )
        return ApiKey.ADD_PARTITIONS_TO_TXN, v, body

    def worst(answer: Any) -> int:
        codes = {
            int(r.partition_error_code)
            for t in answer.results_by_topic_v3_and_below
            for r in t.results_by_partition
        }
        codes.discard(ErrorCode.none)
        codes.discard(ErrorCode.operation_not_attempted)  # another partition's error says why
        return min(codes, key=lambda c: ErrorCode(c).retriable) if codes else ErrorCode.none

    _coordinator_call(link, transactional_id, "AddPartitionsToTxn", request, worst, timeout_s)


def end_txn(
    link: Link,
    transactional_id: str,
    identity: tuple[int, int],
    commit: bool,
    timeout_s: float,
) -> None:
    """EndTxn at transaction version 0 (v0-v4: the epoch is not bumped by the end)."""
    producer_id, epoch = identity

    def request(connection: Connection) -> tuple[int, int, Any]:
        v = version(connection, ApiKey.END_TXN, 0, 4)
        body = build(
            request_type(ApiKey.END_TXN, v),
            transactional_id=transactional_id,
            producer_id=producer_id,
            producer_epoch=epoch,
            committed=commit,
        )
        return ApiKey.END_TXN, v, body

    what = "EndTxn commit" if commit else "EndTxn abort"
    _coordinator_call(link, transactional_id, what, request, lambda a: a.error_code, timeout_s)


def complete_transactions(
    link: Link,
    prepared: Sequence[tuple[str, int, int]],
    commit: bool,
    timeout_s: float,
) -> dict[str, ErrorCode]:
    """CompleteTransactions (Onceflow's own API) for transactions that share a coordinator:
    (transactional id, producer id, prepared epoch) each. Sent again while it or a member
    fails retriably; the answer of each member (NONE, or why it was not ended)."""
    first = prepared[0][0]

    def request(connection: Connection) -> tuple[int, int, Any]:
        version(connection, ApiKey.COMPLETE_TRANSACTIONS, 0, 0)
        members = tuple(
            request_entity(
                ApiKey.COMPLETE_TRANSACTIONS,
                0,
                "PreparedTransaction",
                transactional_id=txn_id,
                producer_id=producer_id,
                producer_epoch=epoch,
            )
            for txn_id, producer_id, epoch in prepared
        )
        body = build(
            request_type(ApiKey.COMPLETE_TRANSACTIONS, 0), committed=commit, transactions=members
        )
        return ApiKey.COMPLETE_TRANSACTIONS, 0, body

    def error_of(answer: Any) -> int:
        if answer.error_code != ErrorCode.none:
            return int(answer.error_code)
        busy = any(ErrorCode(t.error_code).retriable for t in answer.transactions)
        return int(ErrorCode.concurrent_transactions) if busy else int(ErrorCode.none)

    what = "CompleteTransactions commit" if commit else "CompleteTransactions abort"
    answer = _coordinator_call(link, first, what, request, error_of, timeout_s)
    return {t.transactional_id: ErrorCode(t.error_code) for t in answer.transactions}


def offers_complete_transactions(link: Link, transactional_id: str) -> bool:
    """Whether the coordinator of `transactional_id` serves CompleteTransactions."""
    connection = link.coordinator(transactional_id)
    connection.learn_own_versions()
    return ApiKey.COMPLETE_TRANSACTIONS in connection.versions


def transaction_log_partitions(link: Link) -> int:
    """How many partitions `__transaction_state` has (Kafka's
    transaction.state.log.num.partitions), from Metadata."""
    return len(link.leaders("__transaction_state"))
