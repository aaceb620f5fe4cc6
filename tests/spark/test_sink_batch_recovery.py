"""Per-batch atomicity's driver, driven directly (no Spark) against a broker with two-phase
commit: the driver dies after the tasks prepared and before the decision, after the
decision, and between two completions; a new writer then does what Spark does on restart
(runs the batch's tasks again and commits). Each time: no row twice, none lost, nothing of
the batch visible before its completion starts (then whole tasks only), and nothing of an
aborted batch ever. Each test runs with the completion in one CompleteTransactions request
(the tasks' ids colocated, Onceflow's default) and one by one (a broker with only Kafka's
KIP-939)."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from onceflow.client.participant_group import transaction_log_partition_count
from onceflow.spark.batch_commit import DecisionTooLarge
from onceflow.spark.sink_config import (
    SinkColumns,
    SinkCommitMessage,
    SinkConfig,
    SinkTask,
    SinkWriteError,
)
from onceflow.spark.sink_tasks import write_task
from onceflow.spark.writer import abort_batch, commit_batch
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import create_topic
from tests.helpers.txn import end_offsets, read_records, wait_stable

TASKS = 2
ROWS = 40


@pytest.fixture(params=["together", "one-by-one"])
def colocated(request: pytest.FixtureRequest, two_pc_broker: BrokerProcess) -> int | None:
    """How the driver completes: the partition count the ids are colocated with, or None."""
    if request.param == "one-by-one":
        return None
    return transaction_log_partition_count(two_pc_broker.bootstrap)


class DriverDied(Exception):
    """Stands for the driver's death at one step of its commit."""


def rows(batch: int, task: int) -> list[bytes]:
    return [b"b%d-t%d-%03d" % (batch, task, i) for i in range(ROWS)]


def run_tasks(config: SinkConfig, batch: int, attempt: int) -> list[SinkCommitMessage]:
    assert config.sink_id is not None
    out = []
    for p in range(TASKS):
        rb = pa.RecordBatch.from_pydict({"value": pa.array(rows(batch, p), pa.binary())})
        out.append(write_task(config, SinkTask(config.sink_id, p, batch, attempt, "q"), [rb]))
    return out


def visible(bootstrap: str, topic: str) -> list[bytes]:
    """What a read_committed reader sees now (up to the last stable offset)."""
    lso = end_offsets(bootstrap, topic, range(3), committed=True)
    nonempty = {p: end for p, end in lso.items() if end}
    if not nonempty:
        return []
    recs = read_records("confluent", bootstrap, topic, nonempty, committed=True)
    return [r.value for r in recs if r.value is not None]


def batch_rows(batch: int) -> list[bytes]:
    return [v for p in range(TASKS) for v in rows(batch, p)]


def die_at(step: str, nth: int = 1) -> Callable[[str], None]:
    seen = Counter[str]()

    def on_step(name: str) -> None:
        seen[name] += 1
        if name == step and seen[name] == nth:
            raise DriverDied(step)

    return on_step


@pytest.mark.parametrize(
    "step",
    ["prepared", "decided", "completed"],
    ids=["before-decision", "after-decision", "between-completions"],
)
def test_driver_dies_and_the_replayed_batch_finishes_the_job(
    two_pc_broker: BrokerProcess, step: str, colocated: int | None
) -> None:
    bootstrap = two_pc_broker.bootstrap
    topic = create_topic(bootstrap, partitions=3)
    config = SinkConfig(
        client_config={"bootstrap.servers": bootstrap},
        columns=SinkColumns(value="value"),
        topic=topic,
        sink_id=f"sink-{uuid.uuid4().hex[:8]}",
        atomicity="batch",
        colocated=colocated,
    )
    commit_batch(config, run_tasks(config, 0, 0), 0)  # batch 0 commits normally

    messages = run_tasks(config, 1, 0)
    assert all(m.prepared for m in messages)
    if step != "prepared":
        with pytest.raises(DriverDied):
            commit_batch(config, messages, 1, die_at(step))
    seen = Counter(visible(bootstrap, topic))
    if step == "completed" and colocated is None:
        # One by one: the first task's transaction is committed (whole), the other is
        # still prepared, until the restart completes the rest (the README says so).
        assert seen == Counter(batch_rows(0) + rows(1, 0))
    elif step == "completed":
        # Together: the batch is whole, or its markers are not in yet; never in part.
        assert seen in (Counter(batch_rows(0)), Counter(batch_rows(0) + batch_rows(1)))
    else:
        assert seen == Counter(batch_rows(0))

    # Restart: Spark runs batch 1 again (new attempts), then commits it; then batch 2.
    replay = run_tasks(config, 1, 1)
    outcome = "written" if step == "prepared" else "skipped"
    assert {m.outcome for m in replay} == {outcome}
    commit_batch(config, replay, 1)
    commit_batch(config, run_tasks(config, 2, 0), 2)

    wait_stable(bootstrap, topic, range(3))
    got = visible(bootstrap, topic)
    assert Counter(got) == Counter(batch_rows(0) + batch_rows(1) + batch_rows(2))


def test_an_aborted_batch_shows_nothing_and_is_written_again(
    two_pc_broker: BrokerProcess, colocated: int | None
) -> None:
    bootstrap = two_pc_broker.bootstrap
    topic = create_topic(bootstrap, partitions=3)
    config = SinkConfig(
        client_config={"bootstrap.servers": bootstrap},
        columns=SinkColumns(value="value"),
        topic=topic,
        sink_id=f"sink-{uuid.uuid4().hex[:8]}",
        atomicity="batch",
        colocated=colocated,
    )
    abort_batch(config, run_tasks(config, 0, 0))
    wait_stable(bootstrap, topic, range(3))
    assert visible(bootstrap, topic) == []
    commit_batch(config, run_tasks(config, 0, 1), 0)
    wait_stable(bootstrap, topic, range(3))
    assert Counter(visible(bootstrap, topic)) == Counter(batch_rows(0))


def test_a_chosen_attempt_aborted_by_a_speculative_one_aborts_the_batch_whole(
    two_pc_broker: BrokerProcess, colocated: int | None
) -> None:
    """Spark chose attempt 0 of task 0, but a speculative attempt 1 inited after attempt 0
    prepared, which aborted it. The driver finds out before deciding: it aborts the batch
    and fails; nothing shows; the restart's replay writes the batch once."""
    bootstrap = two_pc_broker.bootstrap
    topic = create_topic(bootstrap, partitions=3)
    config = SinkConfig(
        client_config={"bootstrap.servers": bootstrap},
        columns=SinkColumns(value="value"),
        topic=topic,
        sink_id=f"sink-{uuid.uuid4().hex[:8]}",
        atomicity="batch",
        colocated=colocated,
    )
    chosen = run_tasks(config, 0, 0)
    assert config.sink_id is not None
    rb = pa.RecordBatch.from_pydict({"value": pa.array(rows(0, 0), pa.binary())})
    speculative = write_task(config, SinkTask(config.sink_id, 0, 0, 1, "q"), [rb])
    assert speculative.prepared and speculative.prepared != chosen[0].prepared
    with pytest.raises(SinkWriteError, match="speculative"):
        commit_batch(config, chosen, 0)
    # The speculative attempt's transaction is still prepared: the replay's init aborts it.
    assert visible(bootstrap, topic) == []

    commit_batch(config, run_tasks(config, 0, 2), 0)
    wait_stable(bootstrap, topic, range(3))
    assert Counter(visible(bootstrap, topic)) == Counter(batch_rows(0))


def test_spark_aborting_after_a_failed_commit_keeps_a_decided_batch(
    two_pc_broker: BrokerProcess, colocated: int | None
) -> None:
    """When the commit fails (here between two completions) Spark calls abort with the same
    messages; the batch was decided, so abort must not abort what is left of it."""
    bootstrap = two_pc_broker.bootstrap
    topic = create_topic(bootstrap, partitions=3)
    config = SinkConfig(
        client_config={"bootstrap.servers": bootstrap},
        columns=SinkColumns(value="value"),
        topic=topic,
        sink_id=f"sink-{uuid.uuid4().hex[:8]}",
        atomicity="batch",
        colocated=colocated,
    )
    messages = run_tasks(config, 0, 0)
    with pytest.raises(DriverDied):
        commit_batch(config, messages, 0, die_at("completed"))
    abort_batch(config, messages)
    commit_batch(config, run_tasks(config, 0, 1), 0)  # the replay
    wait_stable(bootstrap, topic, range(3))
    assert Counter(visible(bootstrap, topic)) == Counter(batch_rows(0))


def test_a_decision_longer_than_the_brokers_limit_decides_nothing(tmp_path: Path) -> None:
    """The decision is an offset's metadata, at most `offset.metadata.max.bytes`: beyond
    it the commit fails naming the setting, and Spark's abort then aborts the batch."""
    overrides = {"transaction.two.phase.commit.enable": "true", "offset.metadata.max.bytes": "40"}
    with BrokerProcess(tmp_path / "data", overrides) as broker:
        topic = create_topic(broker.bootstrap, partitions=3)
        config = SinkConfig(
            client_config={"bootstrap.servers": broker.bootstrap},
            columns=SinkColumns(value="value"),
            topic=topic,
            sink_id=f"sink-{uuid.uuid4().hex[:8]}",
            atomicity="batch",
            colocated=transaction_log_partition_count(broker.bootstrap),
        )
        messages = run_tasks(config, 0, 0)
        with pytest.raises(DecisionTooLarge, match=r"offset\.metadata\.max\.bytes"):
            commit_batch(config, messages, 0)
        abort_batch(config, messages)
        wait_stable(broker.bootstrap, topic, range(3))
        assert visible(broker.bootstrap, topic) == []
