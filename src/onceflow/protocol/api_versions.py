"""The API versions the broker advertises, and its feature levels.

Every advertised version is implemented completely. protocol/kafka_versions.py holds Kafka
4.1's ranges and says (GAPS) why any of these differs. Clients negotiate each API on its
own (librdkafka, the Java client, kafka-python 3, aiokafka, KafkaJS), so ranges of different
Kafka releases side by side are safe.
"""

from __future__ import annotations

from enum import IntEnum


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    DESCRIBE_TOPIC_PARTITIONS = 75
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    INITIALIZE_SHARE_GROUP_STATE = 83
    READ_SHARE_GROUP_STATE = 84
    WRITE_SHARE_GROUP_STATE = 85
    DELETE_SHARE_GROUP_STATE = 86
    READ_SHARE_GROUP_STATE_SUMMARY = 87
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92
    # Onceflow's own (protocol/onceflow_apis.py): far above Kafka's keys.
    COMPLETE_TRANSACTIONS = 32000
    # Acknowledgements inside a transaction (protocol/txn_share_acknowledge.py).
    TXN_SHARE_ACKNOWLEDGE = 32001
    # Its hop between brokers (protocol/txn_write_share_state.py).
    TXN_WRITE_SHARE_GROUP_STATE = 32002


# (min, max) per API key. An API appears here only once its handler implements every
# version in the range. The minimums are Kafka 4.0's (KIP-896 removed older versions, and
# kio's schemas start there too).
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 13),
    ApiKey.FETCH: (4, 18),
    ApiKey.LIST_OFFSETS: (1, 10),
    ApiKey.METADATA: (0, 13),
    ApiKey.OFFSET_COMMIT: (2, 9),
    ApiKey.OFFSET_FETCH: (1, 9),
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 6),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
    ApiKey.INIT_PRODUCER_ID: (0, 6),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 5),
    ApiKey.TXN_OFFSET_COMMIT: (0, 5),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.DESCRIBE_LOG_DIRS: (1, 4),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.DESCRIBE_CLUSTER: (0, 2),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 2),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (0, 0),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
    # Share groups (KIP-932) at Kafka 4.2's ranges.
    ApiKey.SHARE_GROUP_HEARTBEAT: (1, 1),
    ApiKey.SHARE_GROUP_DESCRIBE: (1, 1),
    ApiKey.SHARE_FETCH: (1, 2),
    ApiKey.SHARE_ACKNOWLEDGE: (1, 2),
    # The share coordinator's API (between brokers: the share persister), Kafka 4.2's.
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: (0, 0),
    ApiKey.READ_SHARE_GROUP_STATE: (0, 0),
    ApiKey.WRITE_SHARE_GROUP_STATE: (0, 1),
    ApiKey.DELETE_SHARE_GROUP_STATE: (0, 0),
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: (0, 1),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (0, 1),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: (0, 0),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: (0, 0),
    ApiKey.TXN_SHARE_ACKNOWLEDGE: (0, 0),
    ApiKey.TXN_WRITE_SHARE_GROUP_STATE: (0, 0),  # between brokers
    ApiKey.WRITE_TXN_MARKERS: (1, 2),
    ApiKey.SASL_HANDSHAKE: (1, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.COMPLETE_TRANSACTIONS: (0, 0),
}


# Feature levels (KIP-584) in ApiVersions v3+: (min, max) supported, per feature. Level 0 is
# the behaviour from before the feature. group.version 1 is KIP-848's consumer protocol
# (ConsumerGroupHeartbeat), finalized as Kafka 4.x finalizes it. transaction.version 1 is
# Kafka's flexible transaction-log records (nothing a client sees), 2 KIP-890 part 2 (an epoch
# bump at every transaction end, which the Java producer turns on when transaction.version
# >= 2 is finalized); every version of the APIs is served whatever the level, as in Kafka, so
# a client decides.
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {
    "group.version": (0, 1),
    "transaction.version": (0, 2),
}
GROUP_VERSION = 1
# The epoch of the levels with transaction.version 0. Clients keep the finalized levels of
# the highest epoch they have seen: raising `onceflow.transaction.version` raises the epoch
# (`finalized_features` adds the level to it), so clients take the new level. Lowering it
# lowers the epoch, so a running Java client keeps the higher level until it restarts; that
# is safe because every API version is served at every level.
FINALIZED_FEATURES_EPOCH = 1


def finalized_features(transaction_version: int) -> tuple[dict[str, int], int]:
    """The finalized levels (the broker's `onceflow.transaction.version`) and their epoch."""
    levels = {"group.version": GROUP_VERSION, "transaction.version": transaction_version}
    return levels, FINALIZED_FEATURES_EPOCH + transaction_version


#: What ApiVersions lists: the served ranges, but Produce from v0, as Kafka 4.x lists it
#: (KAFKA-18659): librdkafka before 2.x's fix sends gzip, snappy and lz4 batches
#: uncompressed unless it sees Produce v0-2. Those versions are still refused (the
#: connection is closed), as Kafka refuses them.
ADVERTISED_VERSIONS: dict[int, tuple[int, int]] = {
    **SUPPORTED_VERSIONS,
    ApiKey.PRODUCE: (0, SUPPORTED_VERSIONS[ApiKey.PRODUCE][1]),
}


def is_supported(api_key: int, api_version: int) -> bool:
    bounds = SUPPORTED_VERSIONS.get(api_key)
    return bounds is not None and bounds[0] <= api_version <= bounds[1]
