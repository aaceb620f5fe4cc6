"""Prepared two-phase commit transactions (KIP-939) found and completed with the CLI, as an
operator resolves one its coordinator forgot: `transactions list --two-phase` shows it with
its age, `describe` says it has no timeout, and `complete` commits or aborts it only when
the producer id and epoch given are the prepared transaction's."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import TopicPartition

from onceflow.cli.main import main
from onceflow.client.participant import PreparedTransaction, TwoPhaseProducer
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import consumer, create_topic, drain, topic_name

TWO_PC = {"transaction.two.phase.commit.enable": "true"}


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["transactions", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def prepare(bootstrap: str, topic: str, txn_id: str, values: list[bytes]) -> PreparedTransaction:
    with TwoPhaseProducer(bootstrap, txn_id) as producer:
        producer.init()
        producer.begin()
        for value in values:
            producer.produce(topic, value, partition=0)
        return producer.prepare()


def committed_values(bootstrap: str, topic: str) -> list[bytes]:
    reader = consumer(bootstrap, **{"isolation.level": "read_committed"})
    try:
        reader.assign([TopicPartition(topic, 0, 0)])
        return [m.value() for m in drain(reader, 3.0)]
    finally:
        reader.close()


@pytest.mark.broker_overrides(TWO_PC)
def test_a_forgotten_prepared_transaction_is_listed_and_committed(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, topic_name("cli-2pc"), partitions=1)
    txn_id = f"forgotten-{uuid.uuid4().hex[:8]}"
    prepared = prepare(bootstrap, topic, txn_id, [b"a", b"b", b"c"])
    pid, epoch = str(prepared.producer_id), str(prepared.producer_epoch)

    code, out, _ = cli(capsys, "--bootstrap-server", bootstrap, "list", "--two-phase")
    assert code == 0
    rows = [line.split() for line in out.splitlines()]
    assert rows[0][:6] == [
        "TransactionalId",
        "Coordinator",
        "ProducerId",
        "ProducerEpoch",
        "TransactionState",
        "AgeMs",
    ]
    (row,) = [r for r in rows[1:] if r[0] == txn_id]
    assert row[2] == pid and row[4] == "Ongoing" and int(row[5]) >= 0
    assert row[6] == f"{topic}-0"

    code, out, err = cli(
        capsys, "--bootstrap-server", bootstrap, "describe", "--transactional-id", txn_id
    )
    assert code == 0 and "2147483647" in out and "two-phase commit" in err

    base = ["--bootstrap-server", bootstrap, "complete", "--transactional-id", txn_id]
    # Another producer id: refused before anything is touched.
    code, _, err = cli(
        capsys, *base, "--producer-id", "999999", "--producer-epoch", epoch, "--commit"
    )
    assert code == 1 and "nothing done" in err and len(err.strip().splitlines()) == 1
    # The right producer id at another epoch: not the prepared transaction, not committed.
    wrong_epoch = str(prepared.producer_epoch + 5)
    code, _, err = cli(
        capsys, *base, "--producer-id", pid, "--producer-epoch", wrong_epoch, "--commit"
    )
    assert code == 1 and "cannot commit" in err
    assert committed_values(bootstrap, topic) == []

    code, out, _ = cli(capsys, *base, "--producer-id", pid, "--producer-epoch", epoch, "--commit")
    assert code == 0 and "Committed" in out
    assert committed_values(bootstrap, topic) == [b"a", b"b", b"c"]
    code, out, _ = cli(capsys, "--bootstrap-server", bootstrap, "list", "--two-phase")
    assert txn_id not in out


@pytest.mark.broker_overrides(TWO_PC)
def test_a_prepared_transaction_aborted_with_the_cli_leaves_nothing(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, topic_name("cli-2pc-abort"), partitions=1)
    txn_id = f"abandoned-{uuid.uuid4().hex[:8]}"
    prepared = prepare(bootstrap, topic, txn_id, [b"x", b"y"])
    base = [
        "--bootstrap-server",
        bootstrap,
        "complete",
        "--transactional-id",
        txn_id,
        "--producer-id",
        str(prepared.producer_id),
    ]
    wrong = str(prepared.producer_epoch + 5)
    code, _, err = cli(capsys, *base, "--producer-epoch", wrong, "--abort")
    assert code == 1 and "nothing aborted" in err
    code, out, _ = cli(capsys, *base, "--producer-epoch", str(prepared.producer_epoch), "--abort")
    assert code == 0 and "Aborted" in out
    assert committed_values(bootstrap, topic) == []
    # Once ended there is nothing left to complete.
    code, _, err = cli(capsys, *base, "--producer-epoch", str(prepared.producer_epoch), "--abort")
    assert code == 1 and "nothing done" in err
