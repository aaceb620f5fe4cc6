"""A small synchronous Kafka protocol client, for the admin APIs confluent-kafka lacks.

confluent-kafka (librdkafka) has no DescribeProducers, ListTransactions,
DescribeTransactions or WriteTxnMarkers, yet `onceflow transactions` must work against any
Kafka cluster, not only Onceflow. So this module speaks the protocol itself: requests and
responses are kio's generated schemas, framed with header v1 (v2 for flexible versions) and
read back past response header v0 (v1 for flexible ones, except ApiVersions, which always
answers with v0 so any client can read it).

Nothing is negotiated beyond asking each broker for its ApiVersions once and choosing, per
API, the highest version both sides speak. `Cluster` routes a request to the broker that
must answer it: a partition's leader, a transactional id's coordinator, or every broker.

With a `ClientSecurity` (the `--command-config` properties), each socket is wrapped in TLS
(SSL, SASL_SSL) and, for SASL_*, authenticated right after ApiVersions: SaslHandshake v1,
then SaslAuthenticate rounds; a session the broker limits (KIP-368) is renewed on the same
connection before it expires, as Kafka's clients do.
"""

from __future__ import annotations

import dataclasses
import functools
import socket
import ssl
import time
import types
from dataclasses import dataclass
from typing import Any, get_args, get_origin

from kio.index import load_payload_module
from kio.static.constants import EntityType
from kio.static.primitive import i64

from onceflow.cli.common import CliError
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.client import SIZE, UnreadableResponse, decode_response, encode_request
from onceflow.protocol.codec import build, request_type, response_type
from onceflow.protocol.sasl_exchange import (
    SASL_AUTHENTICATE,
    SASL_AUTHENTICATE_MAX_VERSION,
    SASL_HANDSHAKE,
    SASL_HANDSHAKE_VERSION,
    SaslFailure,
    reauthenticate_after_s,
    sasl_exchange,
)
from onceflow.security.client_config import ClientSecurity

__all__ = [
    "WRITE_TXN_MARKERS",
    "Cluster",
    "Connection",
    "KafkaApiError",
    "Node",
    "error_name",
    "lenient_schema",
    "request_entity",
    "tls_context",
]

CLIENT_ID = "onceflow-cli"
DEFAULT_TIMEOUT_S = 30.0
MAX_RESPONSE_BYTES = 256 * 1024 * 1024
KEY_TYPE_TRANSACTION = 1
WRITE_TXN_MARKERS = 27  # Kafka's API key; not among the APIs the broker's ApiKey names
RETRY_BACKOFF_S = 0.2

# The version ranges this client can build and read. The minimums are the oldest versions
# that carry what we need (Metadata v1: null means all topics); the maximums are the newest
# whose fields we have looked at.
CLIENT_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.METADATA: (1, 12),
    ApiKey.FIND_COORDINATOR: (1, 6),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 2),
    ApiKey.DESCRIBE_LOG_DIRS: (1, 4),
    WRITE_TXN_MARKERS: (1, 2),
    SASL_HANDSHAKE: (SASL_HANDSHAKE_VERSION, SASL_HANDSHAKE_VERSION),
    SASL_AUTHENTICATE: (0, SASL_AUTHENTICATE_MAX_VERSION),
}
API_NAMES: dict[int, str] = {
    ApiKey.METADATA: "Metadata",
    ApiKey.FIND_COORDINATOR: "FindCoordinator",
    ApiKey.DESCRIBE_PRODUCERS: "DescribeProducers",
    ApiKey.DESCRIBE_TRANSACTIONS: "DescribeTransactions",
    ApiKey.LIST_TRANSACTIONS: "ListTransactions",
    ApiKey.DESCRIBE_LOG_DIRS: "DescribeLogDirs",
    WRITE_TXN_MARKERS: "WriteTxnMarkers",
    SASL_HANDSHAKE: "SaslHandshake",
    SASL_AUTHENTICATE: "SaslAuthenticate",
}


def error_name(code: int) -> str:
    """Kafka's name for an error code, as its tools print it (UNKNOWN_TOPIC_OR_PARTITION)."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"error code {code}"


class KafkaApiError(CliError):
    """A broker answered with an error code; `code` lets callers act on the specific one."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def request_entity(api_key: int, api_version: int, name: str, /, **fields: Any) -> Any:
    """A nested request entity of one API version (e.g. DescribeProducers' TopicRequest)."""
    module = load_payload_module(api_key, api_version, EntityType.request)
    return build(getattr(module, name), **fields)


_SCHEMA_CLASS_VARS = ("__type__", "__version__", "__flexible__", "__api_key__", "__header_schema__")


@functools.cache
def lenient_schema(cls: Any) -> Any:
    """`cls` with every datetime_i64 field read as plain int64 milliseconds.

    kio refuses to read a negative timestamp, yet Kafka sends -1 for "none" (e.g. the
    start time of a transactional id with no transaction running in DescribeTransactions).
    Returns `cls` itself when nothing in it (or nested in it) needs the change.
    """
    changed = False
    fields = []
    for f in dataclasses.fields(cls):
        kind, metadata = f.type, dict(f.metadata)
        if metadata.get("kafka_type") == "datetime_i64":
            kind, metadata["kafka_type"], changed = i64, "int64", True
        elif get_origin(kind) is tuple and dataclasses.is_dataclass(get_args(kind)[0]):
            inner = lenient_schema(get_args(kind)[0])
            if inner is not get_args(kind)[0]:
                kind, changed = types.GenericAlias(tuple, (inner, ...)), True
        elif isinstance(kind, type) and dataclasses.is_dataclass(kind):
            inner = lenient_schema(kind)
            if inner is not kind:
                kind, changed = inner, True
        extra: dict[str, Any] = {}
        if f.default is not dataclasses.MISSING:
            extra["default"] = f.default
        fields.append((f.name, kind, dataclasses.field(metadata=metadata, **extra)))
    if not changed:
        return cls
    namespace = {name: getattr(cls, name) for name in _SCHEMA_CLASS_VARS if hasattr(cls, name)}
    return dataclasses.make_dataclass(
        cls.__name__, fields, namespace=namespace, frozen=True, slots=True, kw_only=True
    )


@dataclass(frozen=True, slots=True)
class Node:
    node_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def tls_context(security: ClientSecurity | None) -> ssl.SSLContext | None:
    """The client TLS context of `security` (None without TLS); a bad setting is a CliError."""
    if security is None:
        return None
    try:
        return security.ssl_context()
    except ValueError as exc:  # TlsConfigError: names the key, never a password
        raise CliError(str(exc)) from None


class Connection:
    """One blocking socket to one broker, requests answered one at a time, in order."""

    def __init__(
        self,
        host: str,
        port: int,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        security: ClientSecurity | None = None,
    ) -> None:
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.security = security
        context = tls_context(security)
        try:
            sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as exc:
            raise CliError(f"cannot connect to {self.address}: {_reason(exc)}") from None
        if context is not None:
            sock = self._tls_handshake(sock, context, host)
        self._sock = sock
        self._correlation = 0
        self._answered = False  # no response yet: a TLS refusal would show up now
        self._versions: dict[int, tuple[int, int]] | None = None
        self._reauthenticate_at: float | None = None  # monotonic; None: the session lasts
        if security is not None and security.uses_sasl:
            try:
                self._authenticate()
            except CliError:
                self.close()
                raise

    def _tls_hint(self, exc: OSError) -> str:
        """With TLS 1.3 a broker refuses a client certificate (or its absence) after the
        handshake; the client may see only the closed connection, not the alert saying why."""
        if self._answered or self.security is None or self.security.tls is None:
            return ""
        if isinstance(exc, ssl.SSLError) and exc.reason in _TLS_ALERTS:
            return ""  # the alert arrived: _reason already said it
        if _no_certificate(self.security):
            return f"; perhaps {_TLS_ALERTS['TLSV13_ALERT_CERTIFICATE_REQUIRED']}"
        return f"; perhaps {_TLS_ALERTS['TLSV1_ALERT_UNKNOWN_CA']}"

    def close(self) -> None:
        self._sock.close()

    # ---- security --------------------------------------------------------------------

    def _tls_handshake(
        self, sock: socket.socket, context: ssl.SSLContext, host: str
    ) -> ssl.SSLSocket:
        try:
            return context.wrap_socket(sock, server_hostname=host)
        except TimeoutError:
            problem = "no answer in time"
        except ssl.SSLCertVerificationError as exc:
            problem = f"certificate verify failed: {exc.verify_message or exc.reason}"
        except ssl.SSLError as exc:
            problem = _reason(exc)
            if exc.reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE"):
                problem += " (is it a TLS listener?)"
        except OSError as exc:
            problem = f"{_reason(exc)} (is it a TLS listener, and does it accept this client?)"
        sock.close()
        raise CliError(f"TLS handshake with {self.address} failed: {problem}")

    def _authenticate(self) -> None:
        """SaslHandshake and SaslAuthenticate rounds (after ApiVersions, as Kafka's clients
        do); again on the same connection when a session the broker limits runs out."""
        assert self.security is not None
        client = self.security.sasl_client()
        assert client is not None  # uses_sasl: ClientSecurity holds a mechanism and user
        self.version_for(SASL_HANDSHAKE)
        exchange = sasl_exchange(client, self.version_for(SASL_AUTHENTICATE))
        try:
            request = next(exchange)
            while True:
                response = self._round_trip(request.api_key, request.version, request.body)
                request = exchange.send(response)
        except StopIteration as done:
            lifetime_ms: int = done.value
        except SaslFailure as exc:
            raise KafkaApiError(
                exc.code,
                f"SASL authentication of {client.mechanism} user {self.security.username!r} "
                f"with {self.address} failed: {exc}",
            ) from None
        after = reauthenticate_after_s(lifetime_ms)
        self._reauthenticate_at = None if after is None else time.monotonic() + after

    def _renew_session(self) -> None:
        if self._reauthenticate_at is not None and time.monotonic() >= self._reauthenticate_at:
            self._authenticate()

    # ---- versions --------------------------------------------------------------------

    @property
    def versions(self) -> dict[int, tuple[int, int]]:
        """The broker's ApiVersions, asked once (v0: every broker since 0.10 answers it)."""
        if self._versions is None:
            response = self._round_trip(ApiKey.API_VERSIONS, 0, build(request_type(18, 0)))
            if response.error_code != ErrorCode.none:
                raise KafkaApiError(
                    response.error_code,
                    f"{self.address} refused ApiVersions: {error_name(response.error_code)}",
                )
            self._versions = {
                int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys
            }
        return self._versions

    def version_for(self, api_key: int) -> int:
        """The highest version of an API both this client and the broker speak."""
        lo, hi = CLIENT_VERSIONS[api_key]
        name = API_NAMES.get(api_key, f"API {api_key}")
        theirs = self.versions.get(api_key)
        if theirs is None:
            raise CliError(f"the broker at {self.address} does not support {name}")
        best = min(hi, theirs[1])
        if best < max(lo, theirs[0]):
            raise CliError(
                f"the broker at {self.address} supports {name} v{theirs[0]}-{theirs[1]}, "
                f"this tool v{lo}-{hi}"
            )
        return best

    # ---- requests --------------------------------------------------------------------

    def call(self, api_key: int, /, **fields: Any) -> Any:
        """Send one request at the best common version; return the decoded response.

        Fields the chosen version lacks are dropped, so one call serves every version.
        """
        version = self.version_for(api_key)
        self._renew_session()
        return self._round_trip(api_key, version, build(request_type(api_key, version), **fields))

    def call_at(self, api_key: int, version: int, request: Any) -> Any:
        """Send a request already built for `version` (nested entities are per version)."""
        self._renew_session()
        return self._round_trip(api_key, version, request)

    def _round_trip(self, api_key: int, version: int, request: Any) -> Any:
        self._correlation += 1
        name = API_NAMES.get(api_key, f"API {api_key}")
        try:
            self._sock.sendall(
                encode_request(api_key, version, self._correlation, CLIENT_ID, request)
            )
            (size,) = SIZE.unpack(self._recv_exact(SIZE.size))
            if not 0 <= size <= MAX_RESPONSE_BYTES:
                raise CliError(f"{self.address} sent a {size}-byte frame: is it a Kafka broker?")
            frame = self._recv_exact(size)
        except TimeoutError:
            raise CliError(f"{self.address} did not answer {name} in time") from None
        except OSError as exc:
            raise CliError(
                f"lost the connection to {self.address}: {_reason(exc)}{self._tls_hint(exc)}"
            ) from None
        self._answered = True
        cls = lenient_schema(response_type(api_key, version))
        try:
            return decode_response(api_key, cls, frame, self._correlation)
        except UnreadableResponse as exc:
            raise CliError(
                f"unreadable {name} v{version} response from {self.address}: {exc}"
            ) from None

    def _recv_exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self._sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed by the broker")
            out += chunk
        return bytes(out)


# TLS alerts a broker sends when it refuses this client's certificate. With TLS 1.3 they
# arrive after the handshake, at the first read, so they can surface on any request.
_TLS_ALERTS = {
    "TLSV13_ALERT_CERTIFICATE_REQUIRED": "the broker requires a client certificate "
    "(ssl.keystore.location, or ssl.certificate.location and ssl.key.location)",
    "TLSV1_ALERT_UNKNOWN_CA": "the broker does not trust this client's certificate",
    "SSLV3_ALERT_BAD_CERTIFICATE": "the broker refused this client's certificate",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN": "the broker refused this client's certificate",
}


def _no_certificate(security: ClientSecurity | None) -> bool:
    tls = security.tls if security is not None else None
    return tls is not None and not (tls.has_keystore or tls.certificate_location)


def _reason(exc: OSError) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return _TLS_ALERTS.get(exc.reason, f"TLS error {exc.reason}")
    return exc.strerror or str(exc) or type(exc).__name__


def _split_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    servers = []
    for item in bootstrap.split(","):
        item = item.strip().split("://", 1)[-1]
        host, sep, port = item.rpartition(":")
        if not item or not sep or not port.isdigit():
            raise CliError(f"bad bootstrap server {item!r}: expected HOST:PORT")
        servers.append((host.removeprefix("[").removesuffix("]") or "localhost", int(port)))
    return servers


@dataclass(frozen=True, slots=True)
class Metadata:
    brokers: dict[int, Node]
    # topic -> partition -> leader node id (-1: none); only topics without an error
    leaders: dict[str, dict[int, int]]
    topic_errors: dict[str, int]
    internal: frozenset[str]


class Cluster:
    """Connections to a cluster's brokers, reached from the bootstrap servers."""

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
        failures = []
        for host, port in _split_bootstrap(bootstrap):
            try:
                self.bootstrap = self._connect(host, port)
                break
            except KafkaApiError:
                raise  # refused credentials: every broker would refuse them
            except CliError as exc:
                failures.append(str(exc).removeprefix("cannot connect to "))
        else:
            raise CliError(f"cannot connect to any bootstrap server: {', '.join(failures)}")
        self._metadata: Metadata | None = None

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    def _connect(self, host: str, port: int) -> Connection:
        key = (host, port)
        connection = self._connections.get(key)
        if connection is None:
            connection = Connection(host, port, self.timeout_s, self.security)
            self._connections[key] = connection
        return connection

    # ---- metadata and routing --------------------------------------------------------

    def metadata(self, topics: list[str] | None = None) -> Metadata:
        """Brokers and partition leaders, of all topics (None) or of named ones.

        Named topics are asked for without auto-creation where the version allows, so a
        typo does not create a topic on a broker that auto-creates.
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
            allow_auto_topic_creation=False,
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

    def node(self, node_id: int) -> Connection:
        metadata = self._metadata or self.metadata()
        node = metadata.brokers.get(node_id)
        if node is None:
            metadata = self.metadata()
            node = metadata.brokers.get(node_id)
        if node is None:
            raise CliError(f"broker {node_id} is not in the cluster's metadata")
        return self._connect(node.host, node.port)

    def brokers(self) -> list[Node]:
        metadata = self._metadata or self.metadata()
        return [metadata.brokers[i] for i in sorted(metadata.brokers)]

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
            raise CliError(f"the leader {leader} of {topic}-{partition} is not in the metadata")
        return leader, self._connect(node.host, node.port)

    def transaction_coordinator(self, transactional_id: str) -> tuple[int, Connection]:
        """The broker coordinating a transactional id (FindCoordinator, key type 1),
        retrying while the coordinator is still loading or being elected."""
        connection = self.bootstrap
        deadline = time.monotonic() + self.timeout_s
        while True:
            version = connection.version_for(ApiKey.FIND_COORDINATOR)
            response = connection.call(
                ApiKey.FIND_COORDINATOR,
                key=transactional_id,
                key_type=KEY_TYPE_TRANSACTION,
                coordinator_keys=(transactional_id,),
            )
            answer = response.coordinators[0] if version >= 4 else response
            error = int(answer.error_code)
            if error == ErrorCode.none:
                return answer.node_id, self._connect(answer.host, answer.port)
            if not ErrorCode(error).retriable or time.monotonic() >= deadline:
                raise KafkaApiError(
                    error,
                    f"cannot find the coordinator of transactional id {transactional_id}: "
                    f"{error_name(error)}",
                )
            time.sleep(RETRY_BACKOFF_S)
