"""Which partition of a coordinator's log owns a key (a group id, a transactional id),
exactly as Kafka picks it: clients need it too (the participant client chooses
transactional ids that share a `__transaction_state` partition)."""

from __future__ import annotations


def java_string_hash(text: str) -> int:
    """Java's String.hashCode(): over UTF-16 code units, wrapping like a signed int32."""
    h = 0
    data = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def coordinator_partition(key: str, num_partitions: int) -> int:
    """abs(String.hashCode) modulo the partition count. Kafka's abs maps Integer.MIN_VALUE
    (whose negation overflows) to 0 rather than letting the modulo go negative."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions
