"""Transaction coordinator keys: __transaction_state, transaction timeouts and expiry, and
the producer-id state partitions keep.
"""

from __future__ import annotations

from dataclasses import dataclass

from onceflow.config.kinds import (
    BOOL,
    INT,
    POSITIVE,
    between,
)
from onceflow.config.spec import key


@dataclass(frozen=True)
class TransactionKeys:
    """Part of `BrokerConfig`: the transaction coordinator's and producers' settings."""

    # fmt: off
    transaction_state_log_num_partitions: int = key(
        "transaction.state.log.num.partitions", INT, 50, POSITIVE,
        "Partitions of __transaction_state; fixed once the topic exists.",
    )
    transaction_state_log_segment_bytes: int = key(
        "transaction.state.log.segment.bytes", INT, 104_857_600, POSITIVE,
        "Segment size of __transaction_state.",
    )
    transaction_max_timeout_ms: int = key(
        "transaction.max.timeout.ms", INT, 900_000, POSITIVE,
        "Longest transaction.timeout.ms a producer may ask for in InitProducerId.",
    )
    transactional_id_expiration_ms: int = key(
        "transactional.id.expiration.ms", INT, 604_800_000, POSITIVE,
        "A transactional id with no transaction for this long is forgotten.",
    )
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = key(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms", INT, 10_000, POSITIVE,
        "How often the coordinator aborts transactions past their timeout.",
    )
    transaction_remove_expired_transaction_cleanup_interval_ms: int = key(
        "transaction.remove.expired.transaction.cleanup.interval.ms", INT, 3_600_000, POSITIVE,
        "How often expired transactional ids are removed.",
    )
    transaction_partition_verification_enable: bool = key(
        "transaction.partition.verification.enable", BOOL, True, None,
        "Check with the coordinator that a transactional write's partition was added to the "
        "transaction before appending it (KIP-890).",
    )
    transaction_two_phase_commit_enable: bool = key(
        "transaction.two.phase.commit.enable", BOOL, False, None,
        "Let producers take part in two-phase commit (KIP-939): an InitProducerId with "
        "enable2Pc starts transactions that no timeout aborts, which an external "
        "coordinator completes. Off: such a request gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED.",
    )
    onceflow_transaction_version: int = key(
        "onceflow.transaction.version", INT, 0, between(0, 2),
        "The finalized level of Kafka's transaction.version feature that ApiVersions "
        "advertises (Kafka sets it with kafka-features.sh). At 2, Java clients 4.x use "
        "transaction version 2 (KIP-890 part 2): Produce v12 adds its partition, EndTxn v5 "
        "bumps the producer epoch at every transaction end. Set it the same on every broker "
        "of a cluster.",
    )
    producer_id_expiration_ms: int = key(
        "producer.id.expiration.ms", INT, 86_400_000, POSITIVE,
        "A partition forgets an idle producer's sequence state after this long.",
    )
    producer_id_expiration_check_interval_ms: int = key(
        "producer.id.expiration.check.interval.ms", INT, 600_000, POSITIVE,
        "How often expired producer ids are removed.",
    )
    # fmt: on
