"""Blocking connections to a cluster's brokers, reached from the bootstrap servers, and
routing: a request goes to the broker that must answer it (a partition's leader, a key's
coordinator, or every broker)."""

from __future__ import annotations

from dataclasses import dataclass

from onceflow.client.blocking import DEFAULT_TIMEOUT_S, Connection, tls_context
from onceflow.client.core import format_address
from onceflow.client.errors import ClientError, ConfigError, KafkaApiError, Unreachable, error_name
from onceflow.client.retry import retrying
from onceflow.client.wire import request_entity
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, request_type
from onceflow.security.client_config import ClientSecurity

__all__ = ["KEY_TYPE_GROUP", "KEY_TYPE_TRANSACTION", "Cluster", "Metadata", "Node"]

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1


@dataclass(frozen=True, slots=True)
class Node:
    node_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return format_address(self.host, self.port)


@dataclass(frozen=True, slots=True)
class Metadata:
    brokers: dict[int, Node]
    # topic -> partition -> leader node id (-1: none); only topics without an error
    leaders: dict[str, dict[int, int]]
    topic_errors: dict[str, int]
    internal: frozenset[str]


def split_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    """HOST:PORT[,...] (a listener name before `://` is ignored) as (host, port) pairs."""
    servers = []
    for item in bootstrap.split(","):
        item = item.strip().split("://", 1)[-1]
        host, sep, port = item.rpartition(":")
        if not item or not sep or not port.isdigit():
            raise ConfigError(f"bad bootstrap server {item!r}: expected HOST:PORT")
        servers.append((host.removeprefix("[").removesuffix("]") or "localhost", int(port)))
    return servers


class Cluster:
    """Connections to a cluster's brokers, one per broker, opened as they are needed."""

    def __init__(
        self,
        bootstrap: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        security: ClientSecurity | None = None,
    ) -> None:
        self.timeout_s = timeout_s
        self.security = security
        tls_context(security)  # a bad TLS setting is reported once, before any connection
        self._connections: dict[tuple[str, int], Connection] = {}
        # Coordinators found for `known_coordinator`'s callers (a pooled participant's).
        self._known_coordinators: dict[tuple[int, str], Connection] = {}
        failures = []
        for host, port in split_bootstrap(bootstrap):
            try:
                self.bootstrap = self._connect(host, port)
                break
            except KafkaApiError:
                raise  # refused credentials: every broker would refuse them
            except ClientError as exc:
                failures.append(str(exc).removeprefix("cannot connect to "))
        else:
            raise Unreachable(f"cannot connect to any bootstrap server: {', '.join(failures)}")
        self._metadata: Metadata | None = None

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()
        self._known_coordinators.clear()

    def reusable(self) -> bool:
        """Whether every connection may serve another client (`Connection.reusable`)."""
        return all(c.reusable() for c in self._connections.values())

    def _connect(self, host: str, port: int) -> Connection:
        key = (host, port)
        connection = self._connections.get(key)
        if connection is None:
            connection = Connection(host, port, self.timeout_s, self.security)
            self._connections[key] = connection
        return connection

    # ---- metadata --------------------------------------------------------------------

    def metadata(self, topics: list[str] | None = None, *, auto_create: bool = False) -> Metadata:
        """Brokers and partition leaders, of all topics (None) or of named ones.

        Named topics are asked for without auto-creation where the version allows, so a
        typo does not create a topic on a broker that auto-creates; a producer asks with
        `auto_create`, as Kafka's producers do (`allow.auto.create.topics`).
        """
        connection = self.bootstrap
        version = connection.version_for(ApiKey.METADATA)
        wanted = None
        if topics is not None:
            wanted = tuple(
                request_entity(
                    ApiKey.METADATA, version, "MetadataRequestTopic", topic_id=None, name=name
                )
                for name in topics
            )
        request = build(
            request_type(ApiKey.METADATA, version),
            topics=wanted,
            allow_auto_topic_creation=auto_create,
            include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )
        response = connection.call_at(ApiKey.METADATA, version, request)
        brokers = {b.node_id: Node(b.node_id, b.host, b.port) for b in response.brokers}
        leaders: dict[str, dict[int, int]] = {}
        errors: dict[str, int] = {}
        internal = set()
        for topic in response.topics:
            if topic.name is None:
                continue
            if topic.error_code != ErrorCode.none:
                errors[topic.name] = topic.error_code
                continue
            leaders[topic.name] = {p.partition_index: p.leader_id for p in topic.partitions}
            if getattr(topic, "is_internal", False):
                internal.add(topic.name)
        result = Metadata(brokers, leaders, errors, frozenset(internal))
        if topics is None:
            self._metadata = result
        return result

    def brokers(self) -> list[Node]:
        metadata = self._metadata or self.metadata()
        return [metadata.brokers[i] for i in sorted(metadata.brokers)]

    # ---- routing ---------------------------------------------------------------------

    def node(self, node_id: int) -> Connection:
        metadata = self._metadata or self.metadata()
        node = metadata.brokers.get(node_id)
        if node is None:
            metadata = self.metadata()
            node = metadata.brokers.get(node_id)
        if node is None:
            raise Unreachable(f"broker {node_id} is not in the cluster's metadata")
        return self._connect(node.host, node.port)

    def leader(self, topic: str, partition: int) -> tuple[int, Connection]:
        metadata = self.metadata([topic])
        error = metadata.topic_errors.get(topic)
        if error is not None:
            raise KafkaApiError(error, f"topic {topic}: {error_name(error)}")
        leader = metadata.leaders.get(topic, {}).get(partition)
        if leader is None:
            raise KafkaApiError(
                ErrorCode.unknown_topic_or_partition,
                f"{topic}-{partition}: {error_name(ErrorCode.unknown_topic_or_partition)}",
            )
        if leader < 0:
            raise KafkaApiError(
                ErrorCode.leader_not_available, f"{topic}-{partition} has no leader"
            )
        node = metadata.brokers.get(leader)
        if node is None:
            raise Unreachable(f"the leader {leader} of {topic}-{partition} is not in the metadata")
        return leader, self._connect(node.host, node.port)

    def transaction_coordinator(self, transactional_id: str) -> tuple[int, Connection]:
        """The broker coordinating a transactional id."""
        return self.coordinator(
            transactional_id, KEY_TYPE_TRANSACTION, f"transactional id {transactional_id}"
        )

    def group_coordinator(self, group: str) -> tuple[int, Connection]:
        """The broker coordinating a consumer group."""
        return self.coordinator(group, KEY_TYPE_GROUP, f"group {group}")

    def known_coordinator(self, key: str, key_type: int, what: str) -> Connection:
        """The coordinator of `key` as found before on this cluster, else found now. A
        caller told the coordinator moved (NOT_COORDINATOR) calls `forget_coordinator`."""
        found = self._known_coordinators.get((key_type, key))
        if found is None:
            _, found = self.coordinator(key, key_type, what)
            self._known_coordinators[(key_type, key)] = found
        return found

    def forget_coordinator(self, key: str, key_type: int) -> None:
        self._known_coordinators.pop((key_type, key), None)

    def coordinator(self, key: str, key_type: int, what: str) -> tuple[int, Connection]:
        """FindCoordinator for one key, asked again while the answer is retriable (the
        coordinator still loading or being elected) for up to the timeout."""
        connection = self.bootstrap

        def find() -> tuple[int, int, str, int]:
            version = connection.version_for(ApiKey.FIND_COORDINATOR)
            response = connection.call(
                ApiKey.FIND_COORDINATOR, key=key, key_type=key_type, coordinator_keys=(key,)
            )
            answer = response.coordinators[0] if version >= 4 else response
            return int(answer.error_code), answer.node_id, answer.host, answer.port

        error, node_id, host, port = retrying(
            find, lambda found: ErrorCode(found[0]).retriable, self.timeout_s
        )
        if error != ErrorCode.none:
            raise KafkaApiError(
                error, f"cannot find the coordinator of {what}: {error_name(error)}"
            )
        return node_id, self._connect(host, port)
