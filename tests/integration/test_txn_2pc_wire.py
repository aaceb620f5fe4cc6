"""Two-phase commit (KIP-939) over the wire: InitProducerId v6 against a real broker.

No installed client sends InitProducerId v6, so the requests are raw. A 2PC transaction is
begun under enable2Pc, its records produced, and its producer goes away; a new instance
inits with keepPreparedTxn, learns the open transaction's producer id and epoch, and
completes it, at transaction version 0 (AddPartitionsToTxn, EndTxn v4) and 2 (Produce v12,
EndTxn v5). Nothing is visible to read_committed readers before the commit, and the
transaction outlives its timeout, its id's expiration and a kill -9 of the broker.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, TopicPartition

from onceflow.cli.main import main
from onceflow.errors import ErrorCode
from onceflow.protocol.api_versions import ApiKey
from onceflow.protocol.codec import build, request_type
from onceflow.protocol.onceflow_apis import CompleteTransactionsRequest
from onceflow.protocol.onceflow_apis import PreparedTransaction as PreparedTransactionEntry
from tests.helpers.broker import BrokerProcess
from tests.helpers.clients import consumer
from tests.helpers.secure import SecureBroker, start_secure_broker
from tests.helpers.txn_wire import (
    Producer,
    add_partitions,
    end_txn,
    find_coordinator,
    init,
    init_2pc,
    produce,
    txn_batch,
)
from tests.helpers.wire import RawConnection, fetch_request
from tests.integration.test_cli_security import admin_config
from tests.integration.test_fetch_versions_wire import create_or_describe
from tests.integration.test_txn_v2_wire import Marker, log_of

TWO_PC = {"transaction.two.phase.commit.enable": "true"}
RETRIABLE = {ErrorCode.concurrent_transactions, ErrorCode.coordinator_load_in_progress}
# (Produce version, EndTxn version): transaction version 0 adds partitions with
# AddPartitionsToTxn, version 2 adds them with the write and bumps the epoch at the end.
TV0, TV2 = (11, 4), (12, 5)


def begin_2pc(conn: RawConnection, txn_id: str) -> Producer:
    find_coordinator(conn, txn_id)
    answer = init_2pc(conn, txn_id)
    assert answer.error_code == ErrorCode.none, ErrorCode(answer.error_code)
    assert (answer.ongoing_txn_producer_id, answer.ongoing_txn_producer_epoch) == (-1, -1)
    return Producer(txn_id, int(answer.producer_id), int(answer.producer_epoch))


def write_2pc(
    conn: RawConnection, p: Producer, topic: str, values: list[bytes], versions: tuple[int, int]
) -> None:
    """The transaction's records, one batch per value, as the producer of that version."""
    if versions == TV0:
        assert add_partitions(conn, p, topic, (0,)) == {ErrorCode.none}
    for seq, value in enumerate(values):
        answer = produce(conn, p, topic, txn_batch(p, seq, value), versions[0])
        assert answer.error_code == ErrorCode.none, ErrorCode(answer.error_code)


def keep(conn: RawConnection, txn_id: str) -> tuple[Producer, tuple[int, int]]:
    """A new instance's keepPreparedTxn init, retried while the coordinator loads: its
    identity and the kept transaction's (producer id, epoch)."""
    find_coordinator(conn, txn_id)
    answer = init_2pc(conn, txn_id, keep=True)
    for _ in range(100):
        if answer.error_code not in RETRIABLE:
            break
        time.sleep(0.1)
        answer = init_2pc(conn, txn_id, keep=True)
    assert answer.error_code == ErrorCode.none, ErrorCode(answer.error_code)
    ongoing = (int(answer.ongoing_txn_producer_id), int(answer.ongoing_txn_producer_epoch))
    return Producer(txn_id, int(answer.producer_id), int(answer.producer_epoch)), ongoing


def complete(conn: RawConnection, p: Producer, commit: bool, end_version: int) -> None:
    answer = end_txn(conn, p, commit, version=end_version)
    assert answer.error_code == ErrorCode.none, ErrorCode(answer.error_code)


def stable_offset(conn: RawConnection, topic: str) -> tuple[int, int, bytes]:
    """(last stable offset, high watermark, records) of a read_committed fetch of partition 0,
    asked again while a restarted broker loads it."""
    for _ in range(100):
        fetched = conn.call(fetch_request(topic, isolation_level=1))
        (part,) = fetched.responses[0].partitions
        if part.error_code == ErrorCode.none:
            return (
                int(part.last_stable_offset),
                int(part.high_watermark),
                bytes(part.records or b""),
            )
        time.sleep(0.1)
    raise AssertionError(f"partition 0 of {topic} not served: {ErrorCode(part.error_code)}")


def read_committed(bootstrap: str, topic: str) -> list[bytes]:
    """Everything a read_committed consumer sees on partition 0, up to its end."""
    c = consumer(bootstrap, **{"isolation.level": "read_committed", "enable.partition.eof": True})
    got: list[bytes] = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            message = c.poll(1)
            if message is None:
                continue
            error = message.error()
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                return got
            assert error is None, error
            got.append(message.value())
    finally:
        c.close()
    raise AssertionError(f"no end of partition reached; read {got}")


def test_api_versions_advertise_init_producer_id_v6(broker: BrokerProcess) -> None:
    with RawConnection(broker.bootstrap) as conn:
        answer = conn.call(
            build(
                request_type(ApiKey.API_VERSIONS, 3),
                client_software_name="raw",
                client_software_version="1",
            )
        )
    ranges = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    assert ranges[ApiKey.INIT_PRODUCER_ID] == (0, 6)


def test_enable2pc_is_refused_while_the_broker_switch_is_off(broker: BrokerProcess) -> None:
    with RawConnection(broker.bootstrap) as conn:
        find_coordinator(conn, "off-2pc")
        refused = init_2pc(conn, "off-2pc")
        assert refused.error_code == ErrorCode.transactional_id_authorization_failed
        assert (refused.producer_id, refused.producer_epoch) == (-1, -1)
        # keepPreparedTxn alone (the KIP allows it) and an ordinary v6 init are served.
        kept = init_2pc(conn, "off-2pc", enable=False, keep=True)
        assert kept.error_code == ErrorCode.none
        assert (kept.ongoing_txn_producer_id, kept.ongoing_txn_producer_epoch) == (-1, -1)
        plain = init_2pc(conn, "off-2pc", enable=False)
        assert (plain.error_code, plain.producer_epoch) == (ErrorCode.none, 1)
        # A transaction timeout above transaction.max.timeout.ms is still refused without
        # enable2Pc, and ignored with it once the switch is on (next test).
        too_long = init_2pc(conn, "off-2pc", enable=False, timeout_s=10_000)
        assert too_long.error_code == ErrorCode.invalid_transaction_timeout


@pytest.mark.broker_overrides(TWO_PC)
def test_the_flags_need_a_transactional_id_and_enable2pc_ignores_the_timeout(
    broker: BrokerProcess,
) -> None:
    with RawConnection(broker.bootstrap) as conn:
        for enable, keep_txn in ((True, False), (False, True)):
            answer = init_2pc(conn, None, enable=enable, keep=keep_txn)
            assert answer.error_code == ErrorCode.invalid_request
        # Without the flags an idempotent producer's v6 init is as before.
        assert init_2pc(conn, None, enable=False).error_code == ErrorCode.none
        find_coordinator(conn, "long-2pc")
        accepted = init_2pc(conn, "long-2pc", timeout_s=10_000)
        assert accepted.error_code == ErrorCode.none
        # Older versions of InitProducerId are answered as before.
        assert init(conn, "old-version", version=5).epoch == 0


@pytest.mark.broker_overrides(TWO_PC)
@pytest.mark.parametrize("versions", [TV0, TV2], ids=["tv0", "tv2"])
@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_a_new_instance_keeps_the_prepared_transaction_and_completes_it(
    broker: BrokerProcess, versions: tuple[int, int], commit: bool
) -> None:
    topic, txn_id = f"2pc-keep-{versions[1]}-{commit}", f"2pc-keep-{versions[1]}-{commit}"
    with RawConnection(broker.bootstrap) as conn:
        create_or_describe(conn, topic)
        first = begin_2pc(conn, txn_id)
        write_2pc(conn, first, topic, [b"one", b"two"], versions)
        assert stable_offset(conn, topic)[0] == 0  # prepared: nothing visible yet
    # The first instance is gone (its connection closed); a new one keeps its transaction.
    with RawConnection(broker.bootstrap) as conn:
        second, ongoing = keep(conn, txn_id)
        assert ongoing == (first.producer_id, first.epoch)
        assert (second.producer_id, second.epoch) == (first.producer_id, first.epoch + 1)
        lso, hw, records = stable_offset(conn, topic)
        assert (lso, hw, records) == (0, 2, b"")
        # The old instance is fenced: it can neither write nor end the transaction.
        late = produce(conn, first, topic, txn_batch(first, 2, b"zombie"), versions[0])
        assert late.error_code == ErrorCode.invalid_producer_epoch
        fenced = end_txn(conn, first, not commit, version=versions[1])
        assert fenced.error_code == ErrorCode.producer_fenced
        complete(conn, second, commit, versions[1])
        committed, markers = log_of(conn, topic)
    assert committed == ([b"one", b"two"] if commit else [])
    marker_epoch = second.epoch + (1 if versions == TV2 else 0)
    assert markers == [Marker(first.producer_id, marker_epoch, commit)]
    assert read_committed(broker.bootstrap, topic) == ([b"one", b"two"] if commit else [])


@pytest.mark.broker_overrides(
    {
        **TWO_PC,
        "transactional.id.expiration.ms": "1000",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "100",
        "transaction.remove.expired.transaction.cleanup.interval.ms": "100",
    }
)
def test_a_prepared_transaction_outlives_its_timeout_and_the_id_expiration(
    broker: BrokerProcess,
) -> None:
    topic = "2pc-left-alone"
    with RawConnection(broker.bootstrap) as conn:
        create_or_describe(conn, topic)
        prepared = begin_2pc(conn, "2pc-left-alone")
        write_2pc(conn, prepared, topic, [b"kept"], TV0)
        # An ordinary transaction beside it, with a 1 s timeout, is aborted meanwhile.
        find_coordinator(conn, "plain-left-alone")
        plain_answer = init_2pc(conn, "plain-left-alone", enable=False, timeout_s=1)
        plain = Producer("plain-left-alone", int(plain_answer.producer_id), 0)
        assert add_partitions(conn, plain, topic, (0,)) == {ErrorCode.none}
        time.sleep(3)  # past the 1 s timeout and the 1 s transactional.id.expiration.ms
        # Aborted and fenced, or by now expired as well (an idle id is forgotten).
        assert ErrorCode(end_txn(conn, plain, True).error_code) in {
            ErrorCode.producer_fenced,
            ErrorCode.invalid_producer_id_mapping,
        }
        assert stable_offset(conn, topic)[0] == 0
        recovered, ongoing = keep(conn, "2pc-left-alone")
        assert ongoing == (prepared.producer_id, prepared.epoch)
        complete(conn, recovered, True, 4)
        committed, _ = log_of(conn, topic)
    assert committed == [b"kept"]
    assert read_committed(broker.bootstrap, topic) == [b"kept"]


@pytest.mark.parametrize("versions", [TV0, TV2], ids=["tv0", "tv2"])
@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_kill_9_between_produce_and_completion(
    tmp_path: Path, versions: tuple[int, int], commit: bool
) -> None:
    """The open 2PC transaction comes back from __transaction_state alone (the unit tests
    check its flag is rebuilt), still hidden from read_committed readers until the kept
    instance completes it."""
    topic, txn_id = "2pc-crash", "2pc-crash"
    with BrokerProcess(tmp_path / "data", TWO_PC) as b:
        with RawConnection(b.bootstrap) as conn:
            create_or_describe(conn, topic)
            first = begin_2pc(conn, txn_id)
            write_2pc(conn, first, topic, [b"a", b"b", b"c"], versions)
        b.restart(kill=True)
        with RawConnection(b.bootstrap) as conn:
            lso, hw, records = stable_offset(conn, topic)
            assert (lso, hw, records) == (0, 3, b"")
            second, ongoing = keep(conn, txn_id)
            assert ongoing == (first.producer_id, first.epoch)
            complete(conn, second, commit, versions[1])
            committed, _ = log_of(conn, topic)
        assert committed == ([b"a", b"b", b"c"] if commit else [])
        assert read_committed(b.bootstrap, topic) == ([b"a", b"b", b"c"] if commit else [])


# ---- the TWO_PHASE_COMMIT ACL ---------------------------------------------------------

ALICE = "User:CN=alice,OU=eng,O=Onceflow"
BOB = "User:CN=bob,OU=ops,O=Onceflow"


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    broker = start_secure_broker(tmp_path_factory.mktemp("secure-2pc"), TWO_PC)
    try:
        yield broker
    finally:
        broker.process.stop()
        errors = broker.process.internal_errors()
        assert not errors, "\n".join(errors[:3])


def acls(
    capsys: pytest.CaptureFixture[str], secure: SecureBroker, tmp_path: Path, *argv: str
) -> str:
    """`onceflow acls ...` as the admin; its output."""
    config = admin_config(secure, tmp_path)
    capsys.readouterr()
    bootstrap = ["--bootstrap-server", secure.bootstrap("SASL_SSL"), "--command-config", config]
    assert main(["acls", *argv, *bootstrap]) == 0
    return capsys.readouterr().out


def as_user(secure: SecureBroker, name: str) -> RawConnection:
    """A raw connection on the mutual-TLS listener, as the principal of `name`'s certificate."""
    tls = ssl.create_default_context(cafile=str(secure.pki.ca))
    identity = secure.pki.clients[name]
    tls.load_cert_chain(str(identity.cert), str(identity.key), identity.key_password)
    return RawConnection(secure.bootstrap("SSL"), tls=tls)


def test_enable2pc_needs_two_phase_commit_besides_write_on_the_transactional_id(
    capsys: pytest.CaptureFixture[str], secure: SecureBroker, tmp_path: Path
) -> None:
    grant = ["--add", "--allow-principal", ALICE, "--transactional-id", "acl-2pc"]
    acls(capsys, secure, tmp_path, *grant, "--operation", "Write")
    with as_user(secure, "alice") as conn:
        denied = init_2pc(conn, "acl-2pc")
        assert denied.error_code == ErrorCode.transactional_id_authorization_failed
        # WRITE alone still serves an ordinary InitProducerId v6, keepPreparedTxn included.
        assert init_2pc(conn, "acl-2pc", enable=False, keep=True).error_code == ErrorCode.none
    acls(capsys, secure, tmp_path, *grant, "--operation", "TwoPhaseCommit")
    listed = acls(capsys, secure, tmp_path, "--list", "--transactional-id", "acl-2pc")
    assert "operation=TWO_PHASE_COMMIT, permissionType=ALLOW" in listed
    with as_user(secure, "alice") as conn:
        assert init_2pc(conn, "acl-2pc").error_code == ErrorCode.none
    # TWO_PHASE_COMMIT alone is not enough: WRITE is asked first.
    bob = ["--add", "--allow-principal", BOB, "--transactional-id", "bob-2pc"]
    acls(capsys, secure, tmp_path, *bob, "--operation", "TwoPhaseCommit")
    # ALL implies TWO_PHASE_COMMIT, as in Kafka.
    bob_all = ["--add", "--allow-principal", BOB, "--transactional-id", "bob-all"]
    acls(capsys, secure, tmp_path, *bob_all, "--operation", "All")
    with as_user(secure, "bob") as conn:
        alone = init_2pc(conn, "bob-2pc")
        assert alone.error_code == ErrorCode.transactional_id_authorization_failed
        assert init_2pc(conn, "bob-all").error_code == ErrorCode.none
    # A DENY of TWO_PHASE_COMMIT wins over ALL.
    deny = ["--add", "--deny-principal", BOB, "--transactional-id", "bob-all"]
    acls(capsys, secure, tmp_path, *deny, "--operation", "TwoPhaseCommit")
    with as_user(secure, "bob") as conn:
        assert init_2pc(conn, "bob-all").error_code == (
            ErrorCode.transactional_id_authorization_failed
        )
        assert init_2pc(conn, "bob-all", enable=False).error_code == ErrorCode.none
    # Removing the DENY (DeleteAcls through onceflow acls) lets ALL grant it again.
    remove = ["--remove", "--force", "--deny-principal", BOB, "--transactional-id", "bob-all"]
    removed = acls(capsys, secure, tmp_path, *remove, "--operation", "TwoPhaseCommit")
    assert "Removed 1 ACL matching" in removed
    with as_user(secure, "bob") as conn:
        assert init_2pc(conn, "bob-all").error_code == ErrorCode.none


def complete_transactions(conn: RawConnection, txn_ids: list[str]) -> dict[str, ErrorCode]:
    """CompleteTransactions (Onceflow's own API) commit of `txn_ids` (producer 0 epoch 0)."""
    request = CompleteTransactionsRequest(
        committed=True,
        transactions=tuple(
            PreparedTransactionEntry(transactional_id=t, producer_id=0, producer_epoch=0)
            for t in txn_ids
        ),
    )
    answer = conn.call(request)
    assert answer.error_code == ErrorCode.none, ErrorCode(answer.error_code)
    return {t.transactional_id: ErrorCode(t.error_code) for t in answer.transactions}


def test_complete_transactions_needs_both_operations_on_every_id(
    capsys: pytest.CaptureFixture[str], secure: SecureBroker, tmp_path: Path
) -> None:
    """One id without TWO_PHASE_COMMIT refuses the whole decision, naming it; the others
    are not attempted."""
    for txn_id, operations in (("ct-write", ["Write"]), ("ct-both", ["Write", "TwoPhaseCommit"])):
        for operation in operations:
            grant = ["--add", "--allow-principal", ALICE, "--transactional-id", txn_id]
            acls(capsys, secure, tmp_path, *grant, "--operation", operation)
    with as_user(secure, "alice") as conn:
        answers = complete_transactions(conn, ["ct-write", "ct-both"])
        assert answers == {
            "ct-write": ErrorCode.transactional_id_authorization_failed,
            "ct-both": ErrorCode.operation_not_attempted,
        }
        # With both operations the request reaches the coordinator, which finds no
        # prepared transaction of that producer: refused as not open, nothing done.
        alone = complete_transactions(conn, ["ct-both"])
        assert alone == {"ct-both": ErrorCode.invalid_txn_state}
