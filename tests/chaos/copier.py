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
It exits 0 once its committed position reaches `--input-end`, 3 on a fatal error, 5 on a
client call hung past its timeout (see HungCallWatchdog; only with `--hung-call-grace`), 6 on
records that would not settle before an abort (see settle_before_abort; only with
`--flush-before-abort`).

Run: python -m tests.chaos.copier --bootstrap HOST:PORT --input-topic T --input-partition P
       --input-end N --output-topic O --output-partitions K --txn-id ID --group G
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import logging
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

CALL_TIMEOUT_S = 30.0
TXN_TIMEOUT_MS = 30_000
# Records stuck in the client give up well before the coordinator's transaction timeout, so
# the copier ends a stalled transaction itself (an abort, then an epoch bump of its own).
# librdkafka (2.x) makes the two equal by default, and then the two timeouts race: a produce
# refused with a retriable error just as abort_transaction() begins is never sent again
# (the retry is not sent while aborting), the abort waits for it until message.timeout.ms,
# and if the coordinator's timeout abort has bumped the epoch first, the copier's EndTxn is
# answered INVALID_PRODUCER_EPOCH, which librdkafka makes fatal (_FENCED). Seen under load
# in the disk-full test, a produce refused for low space in flight at an abort.
MESSAGE_TIMEOUT_MS = TXN_TIMEOUT_MS - 10_000


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


class HungCallWatchdog:
    """librdkafka (up to 2.16 at least) can block in send_offsets_to_transaction() for ever,
    past its timeout, when the group coordinator it cached is a broker it decommissioned
    because the broker left the cluster's metadata (killed, or paused until its ZooKeeper
    session expired): nothing wakes the request up again (librdkafka issues #5511, fix
    pending in #5512, and #5456). With `--hung-call-grace G`, a call still blocked G seconds
    after its own timeout ends the process (`FATAL ... hung`, exit 5): the test starts a new
    copier, which fences this one's open transaction. Off (None) by default."""

    def __init__(self, grace_s: float | None) -> None:
        self.grace_s = grace_s
        self._call: tuple[str, float, float] | None = None  # (what, started, timeout)
        if grace_s is not None:
            threading.Thread(target=self._run, name="hung-call-watchdog", daemon=True).start()

    @contextlib.contextmanager
    def watch(self, what: str, timeout_s: float) -> Iterator[None]:
        self._call = (what, time.monotonic(), timeout_s)
        try:
            yield
        finally:
            self._call = None

    def _run(self) -> None:
        assert self.grace_s is not None
        while True:
            time.sleep(0.2)
            call = self._call
            if call is None:
                continue
            what, started, timeout_s = call
            blocked = time.monotonic() - started
            if blocked > timeout_s + self.grace_s:
                say(f"FATAL {what} hung: blocked {blocked:.0f} s, its timeout is {timeout_s:.0f} s")
                os._exit(5)


class Copier:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.call_timeout = args.call_timeout
        self.watchdog = HungCallWatchdog(args.hung_call_grace)
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
                "message.timeout.ms": MESSAGE_TIMEOUT_MS,
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
        retrying("init", lambda: self.producer.init_transactions(self.call_timeout))
        [tp] = retrying(
            "committed", lambda: self.consumer.committed([self.tp], timeout=self.call_timeout)
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
        with self.watchdog.watch("send_offsets_to_transaction", self.call_timeout):
            self.producer.send_offsets_to_transaction(
                offsets, self.consumer.consumer_group_metadata(), self.call_timeout
            )
        if self.rng.random() < self.args.abort_ratio:
            self.settle_before_abort()
            retrying("abort", lambda: self.producer.abort_transaction(self.call_timeout))
            self.rewind()
            say(f"ABORTED {next_offset}")
        else:
            retrying("commit", lambda: self.producer.commit_transaction(self.call_timeout))
            self.position = next_offset
            say(f"COMMITTED {self.position}")

    def settle_before_abort(self) -> None:
        """With `--flush-before-abort`: before aborting, wait until every record produced is
        acknowledged or has failed. librdkafka (2.16) purges the records still waiting for a
        retry when a transaction is aborted and gives their sequence numbers to the next
        transaction, even when the failed request may have written them (a leader killed
        right after appending). Kafka then takes the next transaction's batch for a retry of
        the aborted one and acknowledges it without writing it, so a committed transaction
        loses it; Onceflow refuses it as out of order, which librdkafka makes a fatal error
        (the copier exits 3 and is started again). Flushed first, nothing is purged. Records
        that will not settle: exit 6, and a new producer (a new epoch) takes over. Off by
        default: the chaos tests leave the brokers to defend the output."""
        if not self.args.flush_before_abort:
            return
        left = self.producer.flush(self.call_timeout)
        if left:
            say(f"FATAL {left} records unacknowledged before an abort")
            os._exit(6)

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
                self.settle_before_abort()
                retrying("abort", lambda: self.producer.abort_transaction(self.call_timeout))
                self.rewind()
                say(f"RECOVERED {err.name()}")
        self.consumer.close()
        self.producer.flush(self.call_timeout)
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
    ap.add_argument("--call-timeout", type=float, default=CALL_TIMEOUT_S)
    ap.add_argument("--hung-call-grace", type=float, default=None)
    ap.add_argument("--flush-before-abort", action="store_true")
    args = ap.parse_args(argv)
    faulthandler.register(signal.SIGUSR1)  # a stuck copier's stack, on its stderr
    try:
        return Copier(args).run()
    except KafkaException as exc:
        say(f"FATAL {_error(exc)}")
        return 3


if __name__ == "__main__":
    sys.exit(main())
