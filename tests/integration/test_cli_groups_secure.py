"""`onceflow groups`, `topics alter` and `delete-records` on a secured broker through
`--command-config` files written as for Kafka's Java tools: the admin (a super user) over
SASL_SSL, and a SCRAM user with a consumer's ACLs, who may describe and reset the group's
offsets (READ on the group and the topic, as Kafka asks) but gets Kafka's authorization
errors for deleting the group or its offsets, deleting records and altering the topic."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from onceflow.cli.main import main
from tests.helpers.clients import QUIET_LOGGER
from tests.helpers.secure import ADMIN, SecureBroker, add_scram_user, allow, start_secure_broker

READER = ("reader", "reader-secret")
Result = tuple[int, str, str]


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    broker = start_secure_broker(tmp_path_factory.mktemp("secure-groups"))
    try:
        add_scram_user(broker, *READER)
        yield broker
    finally:
        broker.process.stop()


def command_config(broker: SecureBroker, directory: Path, user: str, password: str) -> str:
    """A Java client's properties: the admin logs in with PLAIN, other users with SCRAM."""
    mechanism, module = ("PLAIN", "plain.PlainLoginModule")
    if user != ADMIN[0]:
        mechanism, module = ("SCRAM-SHA-256", "scram.ScramLoginModule")
    path = directory / f"{user}.properties"
    path.write_text(
        "security.protocol=SASL_SSL\n"
        f"ssl.truststore.type=PEM\nssl.truststore.location={broker.pki.ca}\n"
        f"sasl.mechanism={mechanism}\n"
        f"sasl.jaas.config=org.apache.kafka.common.security.{module} required "
        f'username="{user}" password="{password}";\n'
    )
    return str(path)


def run(capsys: pytest.CaptureFixture[str], broker: SecureBroker, config: str, line: str) -> Result:
    """`onceflow <line>` (split on blanks) through the given --command-config."""
    argv = line.split()
    capsys.readouterr()
    common = ["--bootstrap-server", broker.bootstrap("SASL_SSL"), "--command-config", config]
    code = main([*argv, *common])
    out, err = capsys.readouterr()
    return code, out, err


def test_admin_and_consumer_acls(
    capsys: pytest.CaptureFixture[str], secure: SecureBroker, tmp_path: Path
) -> None:
    admin = command_config(secure, tmp_path, *ADMIN)
    reader = command_config(secure, tmp_path, *READER)
    topic, group = f"sec-{uuid.uuid4().hex[:8]}", f"sec-g-{uuid.uuid4().hex[:8]}"
    code, _, err = run(capsys, secure, admin, f"topics create {topic} --partitions 1")
    assert code == 0, err
    p = Producer(
        {**secure.confluent("SASL_SSL", *ADMIN, mechanism="PLAIN"), "logger": QUIET_LOGGER}
    )
    for i in range(8):
        p.produce(topic, f"{i}".encode(), partition=0)
    assert p.flush(30) == 0

    reset = f"groups --reset-offsets --group {group}"
    code, out, err = run(capsys, secure, admin, f"{reset} --all-topics --to-offset 3 --execute")
    assert (code, out) == (0, ""), err  # no committed offsets yet: nothing to reset
    code, out, err = run(capsys, secure, admin, f"{reset} --topic {topic} --to-offset 3 --execute")
    assert code == 0 and out.split()[-4:] == [group, topic, "0", "3"], err
    code, out, err = run(capsys, secure, admin, f"delete-records --topic {topic} --offset 2")
    assert code == 0 and out.endswith(f"partition: {topic}-0\tlow_watermark: 2\n"), err
    code, out, err = run(capsys, secure, admin, f"topics alter {topic} --partitions 2")
    assert code == 0, err

    # A consumer's ACLs: READ and DESCRIBE on the topic and the group.
    principal = f"User:{READER[0]}"
    allow(secure, principal, "TOPIC", topic, ("READ", "DESCRIBE"))
    allow(secure, principal, "GROUP", group, ("READ", "DESCRIBE"))
    code, out, err = run(capsys, secure, reader, f"groups --describe --group {group}")
    assert code == 0, err
    described = [line.split()[:6] for line in out.splitlines()[2:]]
    assert described == [[group, topic, "0", "3", "8", "5"]]
    code, out, err = run(capsys, secure, reader, f"{reset} --topic {topic}:0 --to-latest --execute")
    assert code == 0 and out.split()[-1] == "8", err

    code, _, err = run(capsys, secure, reader, f"groups --delete --group {group}")
    assert code == 1 and "GROUP_AUTHORIZATION_FAILED" in err
    code, out, _ = run(capsys, secure, reader, f"delete-records --topic {topic} --offset 4")
    assert code == 1 and f"{topic}-0\terror: TOPIC_AUTHORIZATION_FAILED" in out
    for change in ("--partitions 3", "--config retention.ms=1000"):
        code, _, err = run(capsys, secure, reader, f"topics alter {topic} {change}")
        assert code == 1 and "TOPIC_AUTHORIZATION_FAILED" in err, change

    # OffsetDelete goes through Onceflow's own client (onceflow.client), with the same file.
    delete_offsets = f"groups --delete-offsets --group {group} --topic {topic}"
    code, _, err = run(capsys, secure, reader, delete_offsets)
    assert (code, err) == (1, f"Error: Access to '{group}' is not authorized.\n")
    code, out, err = run(capsys, secure, admin, delete_offsets)
    assert code == 0 and out.startswith("Request succeed for deleting offsets"), err
