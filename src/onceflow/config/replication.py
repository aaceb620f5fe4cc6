"""Cluster keys: ZooKeeper, replica fetching and the ISR, leadership, and the replication of
the internal topics.
"""

from __future__ import annotations

from dataclasses import dataclass

from onceflow.config.kinds import (
    BOOL,
    INT,
    LONG,
    LONG_MAX,
    NON_NEGATIVE,
    POSITIVE,
    STRING,
    between,
)
from onceflow.config.spec import invalid, key


@dataclass(frozen=True)
class ReplicationKeys:
    """Part of `BrokerConfig`: how brokers of a cluster find and follow each other."""

    # fmt: off
    zookeeper_connect: str = key(
        "zookeeper.connect", STRING, "", None,
        "ZooKeeper servers (HOST:PORT,...[/chroot]) holding the cluster's metadata. Unset: the "
        "broker runs alone, as a cluster of one, with no ZooKeeper.",
    )
    broker_rack: str = key(
        "broker.rack", STRING, "", None,
        "This broker's rack, registered in ZooKeeper and given in Metadata. When every broker "
        "has one, replicas of new partitions are spread over racks; some with and some "
        "without is refused when a topic is created.",
    )
    zookeeper_session_timeout_ms: int = key(
        "zookeeper.session.timeout.ms", INT, 18_000, POSITIVE,
        "ZooKeeper session timeout: a broker silent this long is taken for dead and its "
        "partitions get new leaders.",
    )
    zookeeper_connection_timeout_ms: int = key(
        "zookeeper.connection.timeout.ms", INT, 18_000, POSITIVE,
        "How long startup waits to connect to ZooKeeper before it gives up with an error.",
    )
    replica_lag_time_max_ms: int = key(
        "replica.lag.time.max.ms", LONG, 30_000, POSITIVE,
        "A follower that has not caught up with the leader's log end for this long leaves the "
        "ISR; it rejoins once caught up.",
    )
    replica_fetch_max_bytes: int = key(
        "replica.fetch.max.bytes", INT, 1_048_576, POSITIVE,
        "Bytes a follower asks for per partition in one fetch (at least one batch comes back).",
    )
    replica_fetch_response_max_bytes: int = key(
        "replica.fetch.response.max.bytes", INT, 10_485_760, POSITIVE,
        "Bytes a follower asks for in one whole fetch response.",
    )
    replica_fetch_wait_max_ms: int = key(
        "replica.fetch.wait.max.ms", INT, 500, POSITIVE,
        "How long a leader may hold a follower's fetch while it has nothing new.",
    )
    replica_fetch_backoff_ms: int = key(
        "replica.fetch.backoff.ms", INT, 1000, NON_NEGATIVE,
        "Pause of a follower after a fetch that failed.",
    )
    replica_socket_timeout_ms: int = key(
        "replica.socket.timeout.ms", INT, 30_000, POSITIVE,
        "A follower's fetch that gets no answer this long is retried on a new connection.",
    )
    leader_replication_throttled_rate: int = key(
        "leader.replication.throttled.rate", LONG, LONG_MAX, NON_NEGATIVE,
        "Bytes per second this broker, as leader, sends to followers outside the ISR of the "
        "replicas listed in leader.replication.throttled.replicas (dynamic; set by "
        "reassign-partitions --throttle).",
    )
    follower_replication_throttled_rate: int = key(
        "follower.replication.throttled.rate", LONG, LONG_MAX, NON_NEGATIVE,
        "Bytes per second this broker, as a follower outside the ISR, copies for the replicas "
        "listed in follower.replication.throttled.replicas (dynamic).",
    )
    replication_quota_window_num: int = key(
        "replication.quota.window.num", INT, 11, POSITIVE,
        "Samples the replication throttles measure their rate over.",
    )
    replication_quota_window_size_seconds: int = key(
        "replication.quota.window.size.seconds", INT, 1, POSITIVE,
        "Length of each replication throttle sample.",
    )
    unclean_leader_election_enable: bool = key(
        "unclean.leader.election.enable", BOOL, False, None,
        "Let a replica outside the ISR lead when no ISR member is alive, at the cost of "
        "acknowledged records. Off, as in Kafka: the partition waits for an ISR member.",
    )
    controlled_shutdown_enable: bool = key(
        "controlled.shutdown.enable", BOOL, True, None,
        "On SIGTERM, ask the controller to move leadership away before exiting.",
    )
    controlled_shutdown_max_retries: int = key(
        "controlled.shutdown.max.retries", INT, 3, NON_NEGATIVE,
        "Attempts of a controlled shutdown before the broker exits anyway.",
    )
    controlled_shutdown_retry_backoff_ms: int = key(
        "controlled.shutdown.retry.backoff.ms", LONG, 5000, NON_NEGATIVE,
        "Pause between attempts of a controlled shutdown.",
    )
    auto_leader_rebalance_enable: bool = key(
        "auto.leader.rebalance.enable", BOOL, True, None,
        "Move leadership back to each partition's preferred (first) replica when it is in sync.",
    )
    leader_imbalance_check_interval_seconds: int = key(
        "leader.imbalance.check.interval.seconds", LONG, 300, POSITIVE,
        "How often the controller looks for partitions led by other than their preferred replica.",
    )
    leader_imbalance_per_broker_percentage: int = key(
        "leader.imbalance.per.broker.percentage", INT, 10, between(0, 100),
        "A broker's share of partitions led by others above which leadership is moved back.",
    )
    offsets_topic_replication_factor: int = key(
        "offsets.topic.replication.factor", INT, 3, POSITIVE,
        "Replicas of __consumer_offsets. It is created once this many brokers are alive; until "
        "then FindCoordinator answers COORDINATOR_NOT_AVAILABLE. Alone, 1.",
    )
    transaction_state_log_replication_factor: int = key(
        "transaction.state.log.replication.factor", INT, 3, POSITIVE,
        "Replicas of __transaction_state, created once this many brokers are alive. Alone, 1.",
    )
    transaction_state_log_min_isr: int = key(
        "transaction.state.log.min.isr", INT, 2, POSITIVE,
        "min.insync.replicas of __transaction_state.",
    )
    # fmt: on


def check_replica_fetch_wait(cfg: ReplicationKeys) -> None:
    """Kafka's bounds of a follower's parked fetch: a leader holds it no longer than the
    follower's socket timeout (else the follower times out for nothing) nor than the lag
    time (a quiet partition's follower is noted caught up at each of its fetches; parked
    longer, it would leave the ISR)."""
    wait = cfg.replica_fetch_wait_max_ms
    for name, bound in (
        ("replica.socket.timeout.ms", cfg.replica_socket_timeout_ms),
        ("replica.lag.time.max.ms", cfg.replica_lag_time_max_ms),
    ):
        if wait > bound:
            raise invalid("replica.fetch.wait.max.ms", str(wait), f"at most {name} ({bound})")
