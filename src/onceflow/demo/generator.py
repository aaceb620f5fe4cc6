"""The payment stream: a transactional producer, some of whose transactions abort on purpose.

Each payment is a JSON object with an id, an account, an amount in cents, a currency and a
flag saying whether the payment is well-formed. A small share is invalid on purpose (negative
amounts, unknown currencies) so the job's validation has something to drop. Every tenth
transaction or so is aborted after its records were sent: those payments must never appear
downstream. The generator writes what it committed and aborted to a ledger file, so the
checks compare against what really happened, not against what was intended.
"""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException, Producer

CURRENCIES = {"EUR": 100, "USD": 92, "GBP": 117}  # cents of EUR per 100 units
ACCOUNTS = 40
FINISH_ATTEMPTS = 5  # of a commit or abort that fails with a retriable error


@dataclass
class Payment:
    id: str
    account: str
    amount_cents: int
    currency: str

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "id": self.id,
                "account": self.account,
                "amount_cents": self.amount_cents,
                "currency": self.currency,
            },
            separators=(",", ":"),
        ).encode()


def make_payment(rng: random.Random, number: int) -> Payment:
    account = f"acct-{rng.randrange(ACCOUNTS):03d}"
    roll = rng.random()
    if roll < 0.03:
        return Payment(f"p{number:07d}", account, -rng.randrange(1, 5000), "EUR")
    if roll < 0.05:
        return Payment(f"p{number:07d}", account, rng.randrange(1, 5000), "XXX")
    return Payment(
        f"p{number:07d}", account, rng.randrange(1, 50_000), rng.choice(list(CURRENCIES))
    )


def generate(
    bootstrap: str,
    topic: str,
    total: int,
    ledger: Path,
    *,
    per_transaction: int = 50,
    abort_every: int = 9,
    pause_s: float = 0.05,
    seed: int = 7,
    reserve: int = 0,
    release: threading.Event | None = None,
    trickle_s: float = 0.5,
) -> tuple[int, int]:
    """Produce `total` payments in transactions; return (committed, aborted) counts.

    The last `reserve` payments wait for `release`: until it is set they trickle out one per
    transaction every `trickle_s`, so a job that has caught up (a slow machine, a restart)
    still gets new micro-batches for the crashes the demo plans, then the rest go at once."""
    rng = random.Random(seed)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"payments-generator-{seed}",
            "linger.ms": 5,
            "log_level": 0,
        }
    )
    producer.init_transactions(30)
    committed = aborted = 0
    number = 0
    txn = 0
    with ledger.open("a") as out:
        while number < total:
            held = release is not None and not release.is_set() and total - number <= reserve
            size = 1 if held else min(per_transaction, total - number)
            batch = [make_payment(rng, number + i) for i in range(size)]
            number += len(batch)
            txn += 1
            producer.begin_transaction()
            for p in batch:
                producer.produce(topic, key=p.account.encode(), value=p.to_json())
            abort = txn % abort_every == 0
            if abort:
                producer.flush(30)  # the aborted records really reach the log first
            abort = not finish_transaction(producer, commit=not abort)
            if abort:
                aborted += len(batch)
            else:
                committed += len(batch)
            outcome = "aborted" if abort else "committed"
            for p in batch:
                out.write(json.dumps({"outcome": outcome, **json.loads(p.to_json())}) + "\n")
            out.flush()
            if held:
                assert release is not None
                release.wait(trickle_s)
            else:
                time.sleep(pause_s)
    return committed, aborted


def finish_transaction(producer: Producer, commit: bool) -> bool:
    """Commit or abort the open transaction; True if it committed.

    On a cluster the transaction coordinator may die meanwhile: librdkafka finds the new
    one, and a retriable error means calling again; a commit that can no longer succeed
    (the error requires an abort) is aborted, and counted so in the ledger."""
    for attempt in range(FINISH_ATTEMPTS):
        try:
            if commit:
                producer.commit_transaction(30)
            else:
                producer.abort_transaction(30)
            return commit
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if not isinstance(err, KafkaError) or attempt == FINISH_ATTEMPTS - 1:
                raise
            if commit and err.txn_requires_abort():
                commit = False
            elif not err.retriable():
                raise
    raise AssertionError("unreachable")
