"""Which Kafka tool each command stands for, and the tools' options Onceflow does not take.

A user with Kafka's tools in their fingers types their options; one Onceflow lacks should
say so (and what to type instead, where there is something), not look like a typo.
"""

from __future__ import annotations

__all__ = ["KAFKA_TOOLS", "TOOL_COMMANDS", "UNSUPPORTED"]

# command -> the Kafka script it answers for
KAFKA_TOOLS = {
    "topics": "kafka-topics.sh",
    "produce": "kafka-console-producer.sh",
    "consume": "kafka-console-consumer.sh",
    "groups": "kafka-consumer-groups.sh",
    "delete-records": "kafka-delete-records.sh",
    "dump-log": "kafka-dump-log.sh",
    "transactions": "kafka-transactions.sh",
    "acls": "kafka-acls.sh",
    "users": "kafka-configs.sh",
    "configs": "kafka-configs.sh",
    "serve": "kafka-server-start.sh",
}

# `onceflow kafka-topics.sh ...`: the script's name, with or without .sh, for the command
TOOL_COMMANDS = {
    **{script: command for command, script in KAFKA_TOOLS.items()},
    **{script.removesuffix(".sh"): command for command, script in KAFKA_TOOLS.items()},
}

_ZOOKEEPER = "give --bootstrap-server"
_DESERIALIZER = "records are printed as their bytes"

# command -> {Kafka option: what to do instead ("" when there is nothing)}
UNSUPPORTED: dict[str, dict[str, str]] = {
    "topics": {
        "--zookeeper": _ZOOKEEPER,
        "--replica-assignment": "the broker places replicas; give --replication-factor",
        "--topic-id": "give --topic",
        "--partition-size-limit-per-response": "",
    },
    "produce": {
        "--line-reader": "the line reader's --property keys are supported",
        "--reader-config": "give --property KEY=VALUE",
        "--sync": "give --producer-property linger.ms=0",
        "--max-block-ms": "give --producer-property KEY=VALUE (librdkafka's names)",
        "--max-memory-bytes": "give --producer-property queue.buffering.max.kbytes=N",
        "--max-partition-memory-bytes": "give --producer-property KEY=VALUE",
        "--metadata-expiry-ms": "give --producer-property topic.metadata.refresh.interval.ms=N",
        "--socket-buffer-size": "give --producer-property socket.send.buffer.bytes=N",
        "--command-property": "give --producer-property KEY=VALUE",
    },
    "consume": {
        "--formatter": "the default formatter's --property print.* keys are supported",
        "--formatter-config": "give --property KEY=VALUE",
        "--key-deserializer": _DESERIALIZER,
        "--value-deserializer": _DESERIALIZER,
        "--skip-message-on-error": "",
        "--enable-systest-events": "",
        "--command-property": "give --consumer-property KEY=VALUE",
    },
    "groups": {
        "--zookeeper": _ZOOKEEPER,
        "--validate-regex": "",
    },
    "dump-log": {
        "--verify-index-only": "",
        "--index-sanity-check": "",
        "--deep-iteration": "give --print-data-log",
        "--max-message-size": "",
        "--key-decoder-class": _DESERIALIZER,
        "--value-decoder-class": _DESERIALIZER,
        "--offsets-decoder": "",
        "--transaction-log-decoder": "",
        "--cluster-metadata-decoder": "",
        "--remote-log-metadata-decoder": "",
        "--share-group-state-decoder": "",
        "--skip-record-metadata": "",
    },
    "acls": {
        "--authorizer-properties": _ZOOKEEPER,
        "--authorizer": _ZOOKEEPER,
        "--zk-tls-config-file": _ZOOKEEPER,
        "--delegation-token": "",
        "--user-principal": "",
    },
    "users": {
        "--zookeeper": _ZOOKEEPER,
        "--all": "",
        "--entity-default": "",
        "--client": "",
        "--broker": "",
        "--broker-logger": "",
        "--ip": "",
        "--client-metrics": "",
        "--group": "",
    },
    "configs": {
        "--zookeeper": _ZOOKEEPER,
        "--bootstrap-controller": _ZOOKEEPER,
        "--ip": "",
        "--ip-defaults": "",
        "--client-metrics": "",
        "--group": "",
        "--broker-logger": "",
        "--force": "",
    },
    "transactions": {
        "force-terminate": "give abort",
    },
}
