"""The demo's checks, made with read_committed consumers against the generator's ledger."""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, IsolationLevel, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, no __all__
    AdminClient,
    OffsetSpec,
)

from onceflow.demo.generator import CURRENCIES
from onceflow.demo.job import BALANCES_TOPIC, CLEAN_TOPIC, PAYMENTS_TOPIC


def read_committed(bootstrap: str, topic: str, timeout_s: float = 60) -> list[tuple[bytes, bytes]]:
    """Every committed (key, value) of a topic, up to its last stable offsets."""
    return [(key, value) for _, _, key, value in read_committed_at(bootstrap, topic, timeout_s)]


def read_committed_at(
    bootstrap: str, topic: str, timeout_s: float = 60
) -> list[tuple[int, int, bytes, bytes]]:
    """Every committed (partition, offset, key, value) of a topic, up to its last stable
    offsets."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
    tps = [TopicPartition(topic, p) for p in partitions]
    ends = {
        tp.partition: info.offset
        for tp, info in admin.list_offsets(
            {tp: OffsetSpec.latest() for tp in tps},  # type: ignore[no-untyped-call]
            isolation_level=IsolationLevel.READ_COMMITTED,
        ).items()
        for info in [info.result(30)]
    }
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "onceflow-demo-checks",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    out: list[tuple[int, int, bytes, bytes]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            positions = {tp.partition: tp.offset for tp in consumer.position(tps)}
            if all(positions.get(p, -1) >= end for p, end in ends.items()):
                break
            for message in consumer.consume(1000, 0.5):
                offset, partition = message.offset(), message.partition()
                if (
                    message.error() is None
                    and offset is not None
                    and partition is not None
                    and offset < ends[partition]
                ):
                    out.append((partition, offset, message.key() or b"", message.value() or b""))
        else:
            raise TimeoutError(f"could not read {topic} to its end")
    finally:
        consumer.close()
    return out


@dataclass
class Report:
    rows: list[tuple[str, str, str, bool]] = field(default_factory=list)
    caught_up: bool = False
    progress: str = ""
    # What was done to the pipeline during the run (a broker's kill), printed above the checks.
    events: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.rows) and all(ok for *_, ok in self.rows)

    def add(self, name: str, expected: object, actual: object, ok: bool | None = None) -> None:
        self.rows.append(
            (name, str(expected), str(actual), expected == actual if ok is None else ok)
        )

    def table(self) -> str:
        width = max(len(r[0]) for r in self.rows) if self.rows else 10
        lines = [f"event: {event}" for event in self.events]
        lines += [f"{'check':<{width}}  {'expected':>12}  {'actual':>12}  result"]
        for name, expected, actual, ok in self.rows:
            lines.append(f"{name:<{width}}  {expected:>12}  {actual:>12}  {'ok' if ok else 'FAIL'}")
        lines.append(
            f"{'overall':<{width}}  {'':>12}  {'':>12}  {'PASS' if self.passed else 'FAIL'}"
        )
        return "\n".join(lines)


def _valid(p: dict[str, object]) -> bool:
    amount = p["amount_cents"]
    return isinstance(amount, int) and amount > 0 and p["currency"] in CURRENCIES


def check_pipeline(bootstrap: str, ledger: Path) -> Report:
    generated = [json.loads(line) for line in ledger.read_text().splitlines() if line]
    committed = {p["id"]: p for p in generated if p["outcome"] == "committed"}
    aborted = {p["id"] for p in generated if p["outcome"] == "aborted"}
    expected_clean = {i for i, p in committed.items() if _valid(p)}
    expected_balances: dict[str, int] = defaultdict(int)
    for i in expected_clean:
        p = committed[i]
        expected_balances[p["account"]] += p["amount_cents"] * CURRENCIES[p["currency"]] // 100

    input_ids = Counter(json.loads(v)["id"] for _, v in read_committed(bootstrap, PAYMENTS_TOPIC))
    clean = Counter(json.loads(v)["id"] for _, v in read_committed(bootstrap, CLEAN_TOPIC))
    balances: dict[str, int] = {}
    for _, value in read_committed(bootstrap, BALANCES_TOPIC):
        record = json.loads(value)
        balances[record["account"]] = record["balance_eur_cents"]  # the latest per key wins

    report = Report()
    report.add("committed payments in the input", len(committed), sum(input_ids.values()))
    report.add("aborted payments readable in the input", 0, len(aborted & set(input_ids)))
    report.add("valid committed payments in the output", len(expected_clean), len(set(clean)))
    report.add("payments written more than once", 0, sum(1 for n in clean.values() if n > 1))
    report.add("aborted payments in the output", 0, len(aborted & set(clean)))
    report.add("invalid payments in the output", 0, len(set(clean) - expected_clean - aborted))
    wrong = [a for a, total in expected_balances.items() if balances.get(a) != total]
    report.add("accounts whose balance is wrong", 0, len(wrong))
    report.add(
        "total balance (EUR cents)",
        sum(expected_balances.values()),
        sum(balances.values()),
    )
    report.caught_up = set(clean) >= expected_clean and not wrong
    report.progress = f"{len(set(clean) & expected_clean)}/{len(expected_clean)} payments out"
    return report
