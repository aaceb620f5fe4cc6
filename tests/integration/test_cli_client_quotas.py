"""`onceflow configs` for client quotas against a broker process, with kafka-configs.sh's
options and output: users, clients, both together and the defaults; describe by name, by
default and for every entity of a type; deleting a key; the broker's refusals as one line;
`users --describe` showing a user's quotas beside its SCRAM credentials."""

from __future__ import annotations

import pytest

from onceflow.cli.main import main
from onceflow.client.cluster import Cluster
from onceflow.client.quota_admin import describe_client_quotas
from tests.helpers.broker import BrokerProcess

Result = tuple[int, str, str]


def cli(capsys: pytest.CaptureFixture[str], bootstrap: str, *argv: str) -> Result:
    capsys.readouterr()
    code = main(["configs", *argv, "--bootstrap-server", bootstrap])
    out, err = capsys.readouterr()
    return code, out, err


def test_alter_and_describe_like_kafka_configs(
    capsys: pytest.CaptureFixture[str], broker: BrokerProcess
) -> None:
    b = broker.bootstrap
    alter = ("--alter", "--add-config")
    code, out, _ = cli(
        capsys, b, *alter, "producer_byte_rate=1048576,request_percentage=50.5",
        "--entity-type", "users", "--entity-name", "alice",
        "--entity-type", "clients", "--entity-name", "app",
    )  # fmt: skip
    assert code == 0
    assert out == "Completed updating config for user-principal 'alice', client-id 'app'.\n"
    assert cli(capsys, b, *alter, "consumer_byte_rate=2048", "--client-defaults")[1] == (
        "Completed updating default config for clients in the cluster.\n"
    )
    cli(capsys, b, *alter, "producer_byte_rate=4096", "--entity-type", "users", "--entity-default")
    cli(capsys, b, *alter, "producer_byte_rate=100", "--user", "bob")

    assert cli(capsys, b, "--describe", "--entity-type", "users", "--entity-name", "alice",
               "--entity-type", "clients", "--entity-name", "app")[1] == (
        "Quota configs for user-principal 'alice', client-id 'app' are "
        "producer_byte_rate=1048576.0, request_percentage=50.5\n"
    )  # fmt: skip
    assert cli(capsys, b, "--describe", "--entity-type", "clients", "--entity-default")[1] == (
        "Quota configs for the default client-id are consumer_byte_rate=2048.0\n"
    )
    # Every user entity (strict: user and client together is another entity).
    assert cli(capsys, b, "--describe", "--entity-type", "users")[1] == (
        "Quota configs for the default user-principal are producer_byte_rate=4096.0\n"
        "Quota configs for user-principal 'bob' are producer_byte_rate=100.0\n"
    )

    code, out, _ = cli(
        capsys, b, "--alter", "--delete-config", "request_percentage",
        "--user", "alice", "--client", "app",
    )  # fmt: skip
    assert code == 0
    with Cluster(b, 10.0) as cluster:
        found = describe_client_quotas(cluster.bootstrap, [])
    assert found[(("user", "alice"), ("client-id", "app"))] == {"producer_byte_rate": 1048576.0}

    # users --describe (where kafka-configs.sh --entity-type users --entity-name goes) shows
    # the user's quotas too.
    capsys.readouterr()
    assert main(["users", "--describe", "--entity-name", "bob", "--bootstrap-server", b]) == 1
    out = capsys.readouterr().out
    assert out.startswith("Quota configs for user-principal 'bob' are producer_byte_rate=100.0\n")


def test_refusals_are_one_line(capsys: pytest.CaptureFixture[str], broker: BrokerProcess) -> None:
    b = broker.bootstrap
    code, _, err = cli(capsys, b, "--alter", "--add-config", "bogus=1", "--client", "app")
    assert code != 0
    assert "cannot alter quotas of client-id 'app': INVALID_REQUEST" in err
    code, _, err = cli(
        capsys, b, "--alter", "--add-config", "producer_byte_rate=1.5", "--client", "app"
    )
    assert code != 0 and "must be a Long value" in err
    code, _, err = cli(
        capsys, b, "--alter", "--add-config", "producer_byte_rate=1", "--entity-type", "users"
    )
    assert code != 0 and "--alter needs --entity-name (or --entity-default)" in err
    with Cluster(b, 10.0) as cluster:
        assert describe_client_quotas(cluster.bootstrap, []) == {}
