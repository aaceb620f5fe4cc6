"""Kafka 4.1's advertised API versions, and every way Onceflow's differ, each with its reason.

`KAFKA_4_1` is what a Kafka 4.1 broker listener answers to ApiVersions with default settings,
read from the `validVersions` of `clients/src/main/resources/common/message/*Request.json` at
the 4.1.0 release (4.1.2 has the same ranges), as `ApiKeys.toApiVersionForApiResponse` turns
them into ranges:
- a version marked `latestVersionUnstable` is advertised only with
  `unstable.api.versions.enable`: OffsetCommit v10, OffsetFetch v10 and InitProducerId v6 are
  left out, and StreamsGroupHeartbeat (88) and StreamsGroupDescribe (89), whose only version
  is unstable, are not advertised at all;
- Produce is advertised from v0 although v0-2 are refused (the connection is closed):
  older librdkafka needs v0 listed to compress with gzip, snappy or lz4 (its issue 4956,
  KAFKA-18659);
- GetTelemetrySubscriptions (71) and PushTelemetry (72) are advertised only when a client
  telemetry receiver is configured, so not by default;
- controller-only APIs (KRaft's Vote, BrokerRegistration, ...) are not on a broker listener.

`GAPS` names each API whose range differs from Kafka 4.1's, missing on either side included,
and why. tests/unit/test_api_versions_table.py holds it exact, and the README's compatibility
table is generated from it (tools/compatibility_table.py).
"""

from __future__ import annotations

from typing import NamedTuple


class KafkaApi(NamedTuple):
    name: str
    min_version: int
    max_version: int


KAFKA_4_1: dict[int, KafkaApi] = {
    0: KafkaApi("Produce", 0, 13),
    1: KafkaApi("Fetch", 4, 18),
    2: KafkaApi("ListOffsets", 1, 10),
    3: KafkaApi("Metadata", 0, 13),
    8: KafkaApi("OffsetCommit", 2, 9),
    9: KafkaApi("OffsetFetch", 1, 9),
    10: KafkaApi("FindCoordinator", 0, 6),
    11: KafkaApi("JoinGroup", 0, 9),
    12: KafkaApi("Heartbeat", 0, 4),
    13: KafkaApi("LeaveGroup", 0, 5),
    14: KafkaApi("SyncGroup", 0, 5),
    15: KafkaApi("DescribeGroups", 0, 6),
    16: KafkaApi("ListGroups", 0, 5),
    17: KafkaApi("SaslHandshake", 0, 1),
    18: KafkaApi("ApiVersions", 0, 4),
    19: KafkaApi("CreateTopics", 2, 7),
    20: KafkaApi("DeleteTopics", 1, 6),
    21: KafkaApi("DeleteRecords", 0, 2),
    22: KafkaApi("InitProducerId", 0, 5),
    23: KafkaApi("OffsetForLeaderEpoch", 2, 4),
    24: KafkaApi("AddPartitionsToTxn", 0, 5),
    25: KafkaApi("AddOffsetsToTxn", 0, 4),
    26: KafkaApi("EndTxn", 0, 5),
    27: KafkaApi("WriteTxnMarkers", 1, 1),
    28: KafkaApi("TxnOffsetCommit", 0, 5),
    29: KafkaApi("DescribeAcls", 1, 3),
    30: KafkaApi("CreateAcls", 1, 3),
    31: KafkaApi("DeleteAcls", 1, 3),
    32: KafkaApi("DescribeConfigs", 1, 4),
    33: KafkaApi("AlterConfigs", 0, 2),
    34: KafkaApi("AlterReplicaLogDirs", 1, 2),
    35: KafkaApi("DescribeLogDirs", 1, 4),
    36: KafkaApi("SaslAuthenticate", 0, 2),
    37: KafkaApi("CreatePartitions", 0, 3),
    38: KafkaApi("CreateDelegationToken", 1, 3),
    39: KafkaApi("RenewDelegationToken", 1, 2),
    40: KafkaApi("ExpireDelegationToken", 1, 2),
    41: KafkaApi("DescribeDelegationToken", 1, 3),
    42: KafkaApi("DeleteGroups", 0, 2),
    43: KafkaApi("ElectLeaders", 0, 2),
    44: KafkaApi("IncrementalAlterConfigs", 0, 1),
    45: KafkaApi("AlterPartitionReassignments", 0, 1),
    46: KafkaApi("ListPartitionReassignments", 0, 0),
    47: KafkaApi("OffsetDelete", 0, 0),
    48: KafkaApi("DescribeClientQuotas", 0, 1),
    49: KafkaApi("AlterClientQuotas", 0, 1),
    50: KafkaApi("DescribeUserScramCredentials", 0, 0),
    51: KafkaApi("AlterUserScramCredentials", 0, 0),
    55: KafkaApi("DescribeQuorum", 0, 2),
    57: KafkaApi("UpdateFeatures", 0, 2),
    60: KafkaApi("DescribeCluster", 0, 2),
    61: KafkaApi("DescribeProducers", 0, 0),
    64: KafkaApi("UnregisterBroker", 0, 0),
    65: KafkaApi("DescribeTransactions", 0, 0),
    66: KafkaApi("ListTransactions", 0, 2),
    68: KafkaApi("ConsumerGroupHeartbeat", 0, 1),
    69: KafkaApi("ConsumerGroupDescribe", 0, 1),
    74: KafkaApi("ListConfigResources", 0, 1),
    75: KafkaApi("DescribeTopicPartitions", 0, 0),
    76: KafkaApi("ShareGroupHeartbeat", 1, 1),
    77: KafkaApi("ShareGroupDescribe", 1, 1),
    78: KafkaApi("ShareFetch", 1, 1),
    79: KafkaApi("ShareAcknowledge", 1, 1),
    80: KafkaApi("AddRaftVoter", 0, 0),
    81: KafkaApi("RemoveRaftVoter", 0, 0),
    83: KafkaApi("InitializeShareGroupState", 0, 0),
    84: KafkaApi("ReadShareGroupState", 0, 0),
    85: KafkaApi("WriteShareGroupState", 0, 0),
    86: KafkaApi("DeleteShareGroupState", 0, 0),
    87: KafkaApi("ReadShareGroupStateSummary", 0, 0),
    90: KafkaApi("DescribeShareGroupOffsets", 0, 0),
    91: KafkaApi("AlterShareGroupOffsets", 0, 0),
    92: KafkaApi("DeleteShareGroupOffsets", 0, 0),
}

_SHARE_V2 = "v2 (Kafka 4.2: acquire modes, record limits, renew acknowledgements) is served too"
_SHARE_STATE_V1 = "v1 (Kafka 4.2: the delivery complete count) is served too"
_DELEGATION_TOKENS = "delegation tokens are not supported"
_KRAFT = "KRaft only: Onceflow's cluster metadata lives in ZooKeeper"

# Why Onceflow's advertised range differs from Kafka 4.1's, per API key. One line per API:
# delete it when the ranges meet, add one when Onceflow goes past Kafka 4.1.
GAPS: dict[int, str] = {
    17: "v0 (SASL tokens without SaslAuthenticate framing) is not served",
    22: (
        "v6 (KIP-939, two-phase commit: enable2Pc, keepPreparedTxn) is served; Kafka lists "
        "it as unstable, and its trunk answers keepPreparedTxn UNSUPPORTED_VERSION "
        "(KAFKA-20739) where Onceflow keeps the open transaction as the KIP specifies"
    ),
    27: (
        "v2 (Kafka 4.2, KIP-1228: the marker's transaction version) is advertised too, "
        "a superset: Onceflow's brokers send v1"
    ),
    34: "not implemented: replicas do not move between a broker's log dirs",
    38: _DELEGATION_TOKENS,
    39: _DELEGATION_TOKENS,
    40: _DELEGATION_TOKENS,
    41: _DELEGATION_TOKENS,
    55: _KRAFT,
    57: "not implemented: feature levels cannot be changed",
    64: _KRAFT,
    74: "not implemented: listing config resources (client metrics are not supported)",
    78: _SHARE_V2,
    79: _SHARE_V2,
    80: _KRAFT,
    81: _KRAFT,
    85: _SHARE_STATE_V1,
    87: _SHARE_STATE_V1,
    90: "v1 (Kafka 4.2: the lag) is served too",
    32000: (
        "Onceflow's own CompleteTransactions: several prepared two-phase-commit "
        "transactions ended as one decision (protocol/onceflow_apis.py); no Kafka API. "
        "Listed only to Onceflow's own clients (ApiVersions v3+ from onceflow-python)"
    ),
    32001: (
        "Onceflow's own TxnShareAcknowledge: share acknowledgements inside a transaction "
        "(protocol/txn_share_acknowledge.py); no Kafka API. Listed only to Onceflow's own "
        "clients"
    ),
    32002: (
        "Onceflow's own TxnWriteShareGroupState: a transactional acknowledgement carried "
        "from a share-partition's leader to its share coordinator (protocol/"
        "txn_write_share_state.py); between brokers only (CLUSTER_ACTION)"
    ),
}
