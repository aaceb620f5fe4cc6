"""A copier from a share group to a topic, exactly once through transactional
acknowledgements, in its own process so a test can kill it at any step.

Run as `python -m tests.helpers.share_copier BOOTSTRAP GROUP SOURCE SINK KILL_AT KILL_TXN
[TRANSACTIONAL_ID]`: it copies in transactions of at most 5 records, aborting every third
on purpose, and SIGKILLs itself at step KILL_AT (poll, produce, flush, acknowledge, commit)
of its transaction number KILL_TXN (never, if KILL_AT is "none"). KILL_AT "pause" instead
prints PAUSED after that transaction's acknowledgement and waits PAUSE_S before it commits
(a test kills a broker meanwhile).
"""

from __future__ import annotations

import os
import signal
import sys
import time

from onceflow.client.participant import TwoPhaseProducer
from onceflow.client.share import TransactionalShareConsumer

STEPS = ("poll", "produce", "flush", "acknowledge", "commit")
PAUSE_S = 3.0


def copy(
    bootstrap: str,
    group: str,
    source: str,
    sink: str,
    kill_at: str,
    kill_txn: int,
    transactional_id: str = "share-copier",
) -> None:
    consumer = TransactionalShareConsumer(bootstrap, group, [source])
    producer = TwoPhaseProducer(bootstrap, transactional_id, two_phase=False)
    producer.init()  # fences the previous copier and aborts its open transaction
    txn = 0

    def step(name: str) -> None:
        if kill_at == "pause" and name == "acknowledge" and txn == kill_txn:
            print("PAUSED", flush=True)
            time.sleep(PAUSE_S)
        elif name == kill_at and txn == kill_txn:
            print("KILLED", name, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    while True:
        records = consumer.poll(1.0, max_records=5)
        if not records:
            continue
        txn += 1
        step("poll")
        producer.begin()
        for r in records:
            producer.produce(sink, r.value, key=r.key)
        step("produce")
        producer.flush()
        step("flush")
        consumer.acknowledge_in_transaction(producer, records)
        step("acknowledge")
        if txn % 3 == 0:
            producer.abort()  # on purpose: the records come back
            continue
        producer.commit()
        step("commit")
        print("COMMITTED", len(records), flush=True)


if __name__ == "__main__":
    b, g, src, dst, at, n = sys.argv[1:7]
    copy(b, g, src, dst, at, int(n), *sys.argv[7:8])
