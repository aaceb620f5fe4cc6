"""The ZooKeeper layout of a cluster, in Kafka's own paths and JSON (its ZooKeeper era,
`KafkaZkClient` and `ZkData` in apache/kafka 3.x), so tools that read Kafka's znodes read ours.

Pure: paths, and values to bytes and back. `zk_store.py` does the I/O.

    /brokers/ids/<id>                          ephemeral: a live broker and its endpoints
    /cluster/id                                the cluster id, made by the first broker
    /controller                                ephemeral: the elected controller's id
    /controller_epoch                          the controller epoch, bumped by each election
    /brokers/topics/<topic>                    replica assignment of every partition
    /brokers/topics/<topic>/partitions/<p>/state
                                               leader, leader epoch, ISR, controller epoch
    /config/topics/<topic>                     the topic's config overrides
    /config/brokers/<default>, /config/brokers/<id>
                                               dynamic broker configs: cluster-wide, per broker
    /latest_producer_id_block                  the last producer-id block handed out
    /onceflow/shutting_down/<id>               ephemeral: a broker in controlled shutdown
    /onceflow/security/acls                    every ACL binding (JSON), changed by CAS
    /onceflow/security/scram_credentials       SCRAM salts and derived keys, never passwords
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CLUSTER_ID = "/cluster/id"
CONTROLLER_EPOCH = "/controller_epoch"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
TOPIC_CONFIGS = "/config/topics"
BROKER_CONFIGS = "/config/brokers"
#: Kafka's name of the cluster-wide default entity (the resource name "" in AlterConfigs).
DEFAULT_BROKER_ENTITY = "<default>"
SHUTTING_DOWN = "/onceflow/shutting_down"
SECURITY_ACLS = "/onceflow/security/acls"
SECURITY_CREDENTIALS = "/onceflow/security/scram_credentials"
# ElectLeaders requests for the controller: ephemeral sequential children (Kafka's ZooKeeper
# era had /admin/preferred_replica_election, for preferred elections only and one at a time).
ELECT_LEADERS = "/onceflow/elect_leaders"
#: Kafka's config change notifications (client quotas use them).
CONFIG_CHANGES = "/config/changes"
PERSISTENT_PATHS = (BROKER_IDS, TOPICS, TOPIC_CONFIGS, SHUTTING_DOWN, ELECT_LEADERS, CONFIG_CHANGES)
#: Kafka's "no leader" in partition state: the partition is offline.
NO_LEADER = -1


class CorruptZnode(ValueError):
    """A znode whose value is not what Kafka writes there."""


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def topic_config_path(topic: str) -> str:
    return f"{TOPIC_CONFIGS}/{topic}"


def broker_config_path(entity: str) -> str:
    return f"{BROKER_CONFIGS}/{entity}"


def shutting_down_path(broker_id: int) -> str:
    return f"{SHUTTING_DOWN}/{broker_id}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def _load(raw: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptZnode(f"{what}: not JSON: {raw[:80]!r}") from exc
    if not isinstance(value, dict):
        raise CorruptZnode(f"{what}: not a JSON object: {raw[:80]!r}")
    return value


def _dump(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A live broker as registered in /brokers/ids/<id>, in Kafka's format: `host` and
    `port` are where brokers reach it (its inter-broker listener), `endpoints` every
    listener's advertised address, so each client is told the address of the listener it
    came in on."""

    broker_id: int
    host: str
    port: int
    timestamp_ms: int
    #: (listener name, security protocol, host, port) of every advertised listener.
    endpoints: tuple[tuple[str, str, str, int], ...] = ()
    rack: str | None = None  # broker.rack, Kafka's "rack" field

    def endpoint(self, listener: str) -> tuple[str, int]:
        """The advertised address of a listener, or the inter-broker one."""
        for name, _, host, port in self.endpoints:
            if name == listener:
                return host, port
        return self.host, self.port

    def encode(self) -> bytes:
        endpoints = self.endpoints or (("PLAINTEXT", "PLAINTEXT", self.host, self.port),)
        return _dump(
            {
                "version": 5,
                "host": self.host,
                "port": self.port,
                "jmx_port": -1,
                "timestamp": str(self.timestamp_ms),
                "endpoints": [f"{name}://{_bracket(h)}:{p}" for name, _, h, p in endpoints],
                "listener_security_protocol_map": {name: sp for name, sp, _, _ in endpoints},
                "features": {},
                **({} if self.rack is None else {"rack": self.rack}),
            }
        )

    @classmethod
    def decode(cls, broker_id: int, raw: bytes) -> BrokerRegistration:
        value = _load(raw, broker_path(broker_id))
        try:
            protocols = dict(value.get("listener_security_protocol_map", {}))
            endpoints = []
            for text in value.get("endpoints", []):
                name, _, address = str(text).partition("://")
                host, _, port = address.rpartition(":")
                host = host.removeprefix("[").removesuffix("]")
                endpoints.append((name, str(protocols.get(name, name)), host, int(port)))
            return cls(
                broker_id,
                str(value["host"]),
                int(value["port"]),
                int(value["timestamp"]),
                tuple(endpoints),
                None if value.get("rack") is None else str(value["rack"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptZnode(f"{broker_path(broker_id)}: {exc!r}") from exc


def left_by_earlier_run(held: bytes, mine: BrokerRegistration) -> bool:
    """Whether the registration `held` under this broker's id is this broker's own, from a
    run that died (kill -9, a crash) before ZooKeeper expired its session.

    It is when it carries this broker's (advertised) inter-broker host and port: the broker
    binds its listeners before it registers, so no other live broker can be serving that
    address, and a misconfigured one that somehow is still makes the wait end, bounded, in
    a refusal. A registration of another host or port, or one that cannot be read, may be
    a live broker with the same id: refused at once."""
    try:
        holder = BrokerRegistration.decode(mine.broker_id, held)
    except CorruptZnode:
        return False
    return (holder.host, holder.port) == (mine.host, mine.port)


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dump({"version": "1", "id": cluster_id})


def decode_cluster_id(raw: bytes) -> str:
    value = _load(raw, CLUSTER_ID)
    try:
        return str(value["id"])
    except KeyError as exc:
        raise CorruptZnode(f"{CLUSTER_ID}: {exc!r}") from exc


def encode_controller(broker_id: int, timestamp_ms: int) -> bytes:
    return _dump({"version": 1, "brokerid": broker_id, "timestamp": str(timestamp_ms)})


def decode_controller(raw: bytes) -> int:
    value = _load(raw, CONTROLLER)
    try:
        return int(value["brokerid"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptZnode(f"{CONTROLLER}: {exc!r}") from exc


def decode_epoch(raw: bytes) -> int:
    try:
        return int(raw.decode())
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptZnode(f"{CONTROLLER_EPOCH}: {raw[:40]!r}") from exc


def encode_assignment(topic_id: str, assignment: dict[int, list[int]]) -> bytes:
    return _dump(
        {
            "version": 3,
            "topic_id": topic_id,
            "partitions": {str(p): replicas for p, replicas in sorted(assignment.items())},
            "adding_replicas": {},
            "removing_replicas": {},
        }
    )


def decode_assignment(topic: str, raw: bytes) -> tuple[str, dict[int, list[int]]]:
    value = _load(raw, topic_path(topic))
    try:
        partitions = {int(p): [int(b) for b in r] for p, r in value["partitions"].items()}
        return str(value.get("topic_id", "")), partitions
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CorruptZnode(f"{topic_path(topic)}: {exc!r}") from exc


def encode_topic_config(configs: dict[str, str]) -> bytes:
    return _dump({"version": 1, "config": dict(sorted(configs.items()))})


def decode_topic_config(topic: str, raw: bytes) -> dict[str, str]:
    return decode_config(topic_config_path(topic), raw)


def decode_config(path: str, raw: bytes) -> dict[str, str]:
    """A config entity's znode (a topic's or a broker's): {"version": 1, "config": {...}}."""
    value = _load(raw, path)
    config = value.get("config", {})
    if not isinstance(config, dict):
        raise CorruptZnode(f"{path}: config is not an object")
    return {str(k): str(v) for k, v in config.items()}


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Kafka's LeaderIsrAndControllerEpoch: who leads, since which epoch, who is in sync,
    and which controller wrote it."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int

    def encode(self) -> bytes:
        return _dump(
            {
                "version": 1,
                "leader": self.leader,
                "leader_epoch": self.leader_epoch,
                "isr": list(self.isr),
                "controller_epoch": self.controller_epoch,
            }
        )

    @classmethod
    def decode(cls, path: str, raw: bytes) -> PartitionState:
        value = _load(raw, path)
        try:
            return cls(
                int(value["leader"]),
                int(value["leader_epoch"]),
                tuple(int(b) for b in value["isr"]),
                int(value["controller_epoch"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptZnode(f"{path}: {exc!r}") from exc


@dataclass(frozen=True, slots=True)
class ProducerIdBlock:
    """Ids [start, end] handed to one broker (Kafka writes both ends inclusive)."""

    broker_id: int
    start: int
    end: int

    def encode(self) -> bytes:
        return _dump(
            {
                "version": 1,
                "broker": self.broker_id,
                "block_start": str(self.start),
                "block_end": str(self.end),
            }
        )

    @classmethod
    def decode(cls, raw: bytes) -> ProducerIdBlock:
        value = _load(raw, PRODUCER_ID_BLOCK)
        try:
            return cls(int(value["broker"]), int(value["block_start"]), int(value["block_end"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptZnode(f"{PRODUCER_ID_BLOCK}: {exc!r}") from exc


@dataclass(frozen=True, slots=True)
class ElectionRequest:
    """An ElectLeaders request handed to the controller: its election type (Kafka's code,
    0 preferred, 1 unclean) and partitions, in /onceflow/elect_leaders/request-<seq>."""

    election_type: int
    partitions: tuple[tuple[str, int], ...]

    def encode(self) -> bytes:
        return _dump(
            {
                "version": 1,
                "election_type": self.election_type,
                "partitions": [{"topic": t, "partition": p} for t, p in self.partitions],
            }
        )

    @classmethod
    def decode(cls, path: str, raw: bytes) -> ElectionRequest:
        value = _load(raw, path)
        try:
            return cls(
                int(value["election_type"]),
                tuple((str(e["topic"]), int(e["partition"])) for e in value["partitions"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptZnode(f"{path}: {exc!r}") from exc
