"""A consume-transform-produce copier in a KIP-848 consumer group, run as a subprocess.

Run as `python -m tests.helpers.group_copier BOOTSTRAP INPUT OUTPUT GROUP TXN_ID`. Its
consumer (`group.protocol=consumer`, read_committed) subscribes to INPUT; each batch it polls
is copied to OUTPUT (value upper-cased, same partition) in one transaction together with
the consumer's positions (`send_offsets_to_transaction` with `consumer_group_metadata()`).
An abortable error (a stale member epoch after the group moved on, say) aborts the
transaction and rewinds to the batch's first offsets. It prints `ASSIGNED p,...` when its
assignment changes and `COMMITTED n` after each commit, flushed; SIGTERM closes it cleanly
(it leaves the group), SIGKILL leaves its open transaction for the coordinator to abort.
"""

from __future__ import annotations

import logging
import signal
import sys
from typing import Any

TXN_TIMEOUT_MS = 5_000
CALL_TIMEOUT_S = 10.0


def say(line: str) -> None:
    print(line, flush=True)


def main(bootstrap: str, input_topic: str, output_topic: str, group: str, txn_id: str) -> None:
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    quiet = logging.getLogger("group-copier")
    quiet.setLevel(logging.CRITICAL + 1)
    common: dict[str, Any] = {"bootstrap.servers": bootstrap, "logger": quiet}
    producer = Producer(
        {**common, "transactional.id": txn_id, "transaction.timeout.ms": TXN_TIMEOUT_MS}
    )
    consumer = Consumer(
        {
            **common,
            "group.id": group,
            "group.protocol": "consumer",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    producer.init_transactions(CALL_TIMEOUT_S)
    consumer.subscribe([input_topic])
    last: list[int] | None = None
    while not stopping:
        batch = [m for m in consumer.consume(200, 0.2) if m.error() is None]
        parts = sorted(tp.partition for tp in consumer.assignment())
        if parts != last:
            say("ASSIGNED " + ",".join(map(str, parts)))
            last = parts
        if not batch:
            continue
        producer.begin_transaction()
        try:
            for msg in batch:
                value = msg.value() or b""
                producer.produce(
                    output_topic, key=msg.key(), value=value.upper(), partition=msg.partition()
                )
            positions = consumer.position(
                [TopicPartition(input_topic, p) for p in sorted({m.partition() for m in batch})]
            )
            producer.send_offsets_to_transaction(
                positions, consumer.consumer_group_metadata(), CALL_TIMEOUT_S
            )
            producer.commit_transaction(CALL_TIMEOUT_S)
            say(f"COMMITTED {len(batch)}")
        except KafkaException as exc:
            error = exc.args[0]
            if not error.txn_requires_abort():
                raise
            say(f"ABORTED {error.name()}")
            producer.abort_transaction(CALL_TIMEOUT_S)
            first: dict[int, int] = {}
            for msg in batch:
                first.setdefault(msg.partition(), msg.offset())
            owned = {tp.partition for tp in consumer.assignment()}
            for partition, offset in first.items():
                if partition in owned:
                    consumer.seek(TopicPartition(input_topic, partition, offset))
    consumer.close()
    say("CLOSED")


if __name__ == "__main__":
    main(*sys.argv[1:6])
