"""The check that no micro-batch of the clean query was ever seen in part.

A watcher asks, as often as the broker answers, for the last stable offsets of every
partition of the clean topic: what a read_committed reader can read at that moment.
librdkafka asks each partition leader in one ListOffsets request, which a broker answers
at one moment, so a look covers the partitions of one leader at one moment.

At the end every record of the clean topic is mapped to its micro-batch: its payment id
gives its input offset, and Spark's offset log (checkpoint/clean/offsets/N) gives the input
offsets each micro-batch read. A look showed a micro-batch in part when, on the partitions
of one leader, some but not all of that batch's records were below the stable offsets.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from pathlib import Path

from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, no __all__
    AdminClient,
    OffsetSpec,
)

from onceflow.demo.checks import read_committed_at

Look = dict[int, tuple[int, int]]  # partition -> (leader, last stable offset)
Place = tuple[int, int]  # (partition, offset)


class StableOffsetWatcher(threading.Thread):
    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(name="stable-offset-watcher", daemon=True)
        self.topic = topic
        self.looks: list[Look] = []
        self.stop = threading.Event()
        self._admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                look = self._look()
            except Exception:  # a broker restarting: look again
                self.stop.wait(0.2)
                continue
            if not self.looks or look != self.looks[-1]:
                self.looks.append(look)
            self.stop.wait(0.01)

    def _look(self) -> Look:
        topic = self._admin.list_topics(self.topic, timeout=5).topics[self.topic]
        leaders = {p: meta.leader for p, meta in topic.partitions.items()}
        answers = self._admin.list_offsets(
            {TopicPartition(self.topic, p): OffsetSpec.latest() for p in leaders},  # type: ignore[no-untyped-call]
            isolation_level=IsolationLevel.READ_COMMITTED,
            request_timeout=5,
        )
        return {
            tp.partition: (leaders[tp.partition], f.result(5).offset) for tp, f in answers.items()
        }


def batch_ranges(checkpoint: Path, source_topic: str) -> list[tuple[int, dict[int, int]]]:
    """(batch id, the input end offset per partition), in batch order, from Spark's
    offset log: batch N read from batch N-1's ends (the start for batch 0) to its own."""
    out = []
    folder = checkpoint / "clean" / "offsets"
    for name in sorted((p.name for p in folder.iterdir() if p.name.isdigit()), key=int):
        lines = (folder / name).read_text().splitlines()
        offsets = json.loads(lines[-1]).get(source_topic, {})
        out.append((int(name), {int(p): int(o) for p, o in offsets.items()}))
    return out


def batch_of_output(
    bootstrap: str, checkpoint: Path, source_topic: str, output_topic: str
) -> dict[Place, int]:
    """Each output record's micro-batch, by its place in the output topic."""
    ranges = batch_ranges(checkpoint, source_topic)
    batch_of_id: dict[str, int] = {}
    for partition, offset, _, value in read_committed_at(bootstrap, source_topic):
        batch = next((b for b, ends in ranges if offset < ends.get(partition, -1)), -1)
        batch_of_id.setdefault(json.loads(value)["id"], batch)
    return {
        (partition, offset): batch_of_id.get(json.loads(value)["id"], -1)
        for partition, offset, _, value in read_committed_at(bootstrap, output_topic)
    }


def batches_seen_in_part(looks: list[Look], batch_of: dict[Place, int]) -> list[str]:
    """Each look that showed part of a micro-batch on one leader's partitions, described."""
    places_of: dict[int, list[Place]] = defaultdict(list)
    for place, batch in batch_of.items():
        places_of[batch].append(place)
    found = []
    for look in looks:
        by_leader: dict[int, dict[int, int]] = defaultdict(dict)
        for partition, (leader, lso) in look.items():
            by_leader[leader][partition] = lso
        for batch, places in places_of.items():
            for leader, ends in by_leader.items():
                mine = [(p, o) for p, o in places if p in ends]
                shown = sum(1 for p, o in mine if o < ends[p])
                if 0 < shown < len(mine):
                    found.append(
                        f"batch {batch}: {shown} of {len(mine)} records on broker {leader}"
                    )
    return found
