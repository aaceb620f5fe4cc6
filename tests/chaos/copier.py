"""A transactional copier, run as a subprocess by the copier chaos test (like the
TransactionalMessageCopier of Kafka's transactions_test.py).

It copies one input partition to an output topic, exactly once: a read_committed consumer
reads up to `--batch` records, a transactional producer writes them to the output (input
offset modulo the output partition count picks the partition) and puts the consumer's next
offset into the same transaction. About `--abort-ratio` of the transactions are aborted on
purpose; the consumer then goes back to the last committed position. The transactional id is
fixed per input partition, so a restarted copier fences its predecessor, whose open
transaction the coordinator aborts.

Output on stdout, one flushed line each: `START <offset>`, `COMMITTED <next offset>`,
`ABORTED <next offset>`, `RECOVERED <reason>` (an abortable error), `FATAL <error>`, `DONE`.
It exits 0 once its committed position reaches `--input-end`, 3 on a fatal error.

Run: python -m tests.chaos.copier --bootstrap HOST:PORT --input-topic T --input-partition P
       --input-end N --output-topic O --output-partitions K --txn-id ID --group G
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import random
import signal
import sys
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

CALL_TIMEOUT_S = 30.0
TXN_TIMEOUT_MS = 30_000


def say(line: str) -> None:
    print(line, flush=True)


def _error(exc: KafkaException) -> KafkaError:
    err = exc.args[0] if exc.args else None
    if isinstance(err, KafkaError):
        return err
    return KafkaError(KafkaError._FAIL, str(exc))


def retrying(what: str, call: Any, deadline_s: float = 120.0) -> Any:
    """Call again while the error is retriable (the broker may be restarting)."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return call()
        except KafkaException as exc:
            err = _error(exc)
            if err.fatal() or not err.retriable() or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class Copier:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        quiet = logging.getLogger("copier")
        quiet.setLevel(logging.CRITICAL + 1)
        logs: dict[str, Any] = {"logger": quiet, "log_level": 0}
        if os.environ.get("COPIER_DEBUG"):  # librdkafka debug contexts, printed on stderr
            logs = {"debug": os.environ["COPIER_DEBUG"], "log_level": 7}
        common = {
            **logs,
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 500,
            # With one broker, every broker restart leaves "all brokers down", and librdkafka
            # (2.10+) then re-bootstraps, decommissioning the broker it knew. A decommissioned
            # group coordinator makes send_offsets_to_transaction() hang forever, past its
            # timeout (librdkafka issue #5511, fix pending in #5512). Reconnect instead.
            "metadata.recovery.strategy": "none",
        }
        self.tp = TopicPartition(args.input_topic, args.input_partition)
        self.rng = random.Random(f"{args.seed}-{os.getpid()}")
        self.producer = Producer(
            {
                "bootstrap.servers": args.bootstrap,
                "transactional.id": args.txn_id,
                "transaction.timeout.ms": TXN_TIMEOUT_MS,
                "message.timeout.ms": TXN_TIMEOUT_MS,
                "linger.ms": 5,
                **common,
            }
        )
        self.consumer = Consumer(
            {
                "bootstrap.servers": args.bootstrap,
                "group.id": args.group,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": False,
                **common,
            }
        )
        self.position = 0

    def start(self) -> None:
        # First fence any predecessor (its open transaction is aborted, its offsets with it),
        # then read the committed position, which is stable from then on.
        retrying("init", lambda: self.producer.init_transactions(CALL_TIMEOUT_S))
        [tp] = retrying(
            "committed", lambda: self.consumer.committed([self.tp], timeout=CALL_TIMEOUT_S)
        )
        if tp.error is not None:
            raise KafkaException(tp.error)
        self.position = max(tp.offset, 0)
        say(f"START {self.position}")
        self.rewind()

    def rewind(self) -> None:
        """Fetch from the committed position again (drops anything prefetched)."""
        self.consumer.assign(
            [TopicPartition(self.args.input_topic, self.args.input_partition, self.position)]
        )

    def consume_batch(self) -> list[Message]:
        want = min(self.args.batch, self.args.input_end - self.position)
        got: list[Message] = []
        while len(got) < want:
            for msg in self.consumer.consume(want - len(got), 0.5):
                err = msg.error()
                if err is not None:
                    if err.fatal():
                        raise KafkaException(err)
                    continue  # informational (a broker went away); the consumer retries
                got.append(msg)
        expected = self.position + len(got) - 1
        if got[-1].offset() != expected or got[0].offset() != self.position:
            # The input has no gaps (written without transactions), so this is a bug.
            say(f"FATAL input offsets {got[0].offset()}..{got[-1].offset()} from {self.position}")
            sys.exit(4)
        return got

    def produce(self, msg: Message) -> None:
        part = msg.offset() % self.args.output_partitions
        while True:
            try:
                self.producer.produce(
                    self.args.output_topic, key=msg.key(), value=msg.value(), partition=part
                )
                return
            except BufferError:
                self.producer.poll(0.05)

    def one_transaction(self) -> None:
        self.producer.begin_transaction()
        batch = self.consume_batch()
        for msg in batch:
            self.produce(msg)
        next_offset = batch[-1].offset() + 1
        offsets = [TopicPartition(self.args.input_topic, self.args.input_partition, next_offset)]
        self.producer.send_offsets_to_transaction(
            offsets, self.consumer.consumer_group_metadata(), CALL_TIMEOUT_S
        )
        if self.rng.random() < self.args.abort_ratio:
            retrying("abort", lambda: self.producer.abort_transaction(CALL_TIMEOUT_S))
            self.rewind()
            say(f"ABORTED {next_offset}")
        else:
            retrying("commit", lambda: self.producer.commit_transaction(CALL_TIMEOUT_S))
            self.position = next_offset
            say(f"COMMITTED {self.position}")

    def run(self) -> int:
        self.start()
        while self.position < self.args.input_end:
            try:
                self.one_transaction()
            except KafkaException as exc:
                err = _error(exc)
                if err.fatal() or not (err.txn_requires_abort() or err.retriable()):
                    say(f"FATAL {err}")
                    return 3
                # Abortable (or a retriable error outside commit/abort): start over from the
                # committed position in a new transaction.
                retrying("abort", lambda: self.producer.abort_transaction(CALL_TIMEOUT_S))
                self.rewind()
                say(f"RECOVERED {err.name()}")
        self.consumer.close()
        self.producer.flush(CALL_TIMEOUT_S)
        say("DONE")
        return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--input-topic", required=True)
    ap.add_argument("--input-partition", type=int, required=True)
    ap.add_argument("--input-end", type=int, required=True)
    ap.add_argument("--output-topic", required=True)
    ap.add_argument("--output-partitions", type=int, required=True)
    ap.add_argument("--txn-id", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--batch", type=int, default=750)
    ap.add_argument("--abort-ratio", type=float, default=1 / 3)
    ap.add_argument("--seed", default="copier")
    args = ap.parse_args(argv)
    faulthandler.register(signal.SIGUSR1)  # a stuck copier's stack, on its stderr
    try:
        return Copier(args).run()
    except KafkaException as exc:
        say(f"FATAL {_error(exc)}")
        return 3


if __name__ == "__main__":
    sys.exit(main())
