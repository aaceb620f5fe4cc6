"""The CLI against a secured broker, as an operator uses it: `--command-config` files written
for Java clients (JAAS, PEM stores), users and ACLs managed with `onceflow users` and
`onceflow acls`, and what the users may then do with `produce`, `consume`, `topics`,
`transactions` and the console.

One broker (tests/helpers/secure.py) serves PLAINTEXT, SSL (client certificates required),
SASL_SSL and SASL_PLAINTEXT, with ACLs on and `User:admin` (PLAIN) a super user.
"""

from __future__ import annotations

import io
import json
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from onceflow.cli.main import main
from tests.console.console_process import ConsoleProcess
from tests.helpers.certs import KEY_PASSWORD
from tests.helpers.secure import ADMIN, SecureBroker, start_secure_broker

JAAS = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
Result = tuple[int, str, str]


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    broker = start_secure_broker(tmp_path_factory.mktemp("secure"))
    try:
        yield broker
    finally:
        broker.process.stop()


@pytest.fixture(scope="module")
def configs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("client-configs")


def java_config(
    broker: SecureBroker,
    directory: Path,
    listener: str,
    user: str | None = None,
    password: str | None = None,
    mechanism: str = "SCRAM-SHA-256",
    keystore: Path | None = None,
    key_password: str | None = None,
) -> str:
    """A client properties file as one is written for Kafka's Java tools."""
    lines = [f"security.protocol={listener}"]
    if listener in ("SSL", "SASL_SSL"):
        lines += ["ssl.truststore.type=PEM", f"ssl.truststore.location={broker.pki.ca}"]
    if keystore is not None:
        lines += ["ssl.keystore.type=PEM", f"ssl.keystore.location={keystore}"]
    if key_password is not None:
        lines.append(f"ssl.key.password={key_password}")
    if listener.startswith("SASL_"):
        lines += [
            f"sasl.mechanism={mechanism}",
            f"sasl.jaas.config={JAAS[mechanism]} required \\",
            f'    username="{user}" password="{password}";',
        ]
    path = directory / f"{uuid.uuid4().hex[:8]}.properties"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def admin_config(broker: SecureBroker, directory: Path) -> str:
    return java_config(broker, directory, "SASL_SSL", *ADMIN, mechanism="PLAIN")


def cli(
    capsys: pytest.CaptureFixture[str],
    broker: SecureBroker,
    listener: str,
    config: str,
    *argv: str,
    stdin: str = "",
) -> Result:
    capsys.readouterr()
    old_stdin = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode()))
    try:
        code = main(
            [
                *argv,
                "--bootstrap-server",
                broker.bootstrap(listener),
                "--command-config",
                config,
            ]
        )
    finally:
        sys.stdin = old_stdin
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def add_user(
    capsys: pytest.CaptureFixture[str], broker: SecureBroker, admin: str, user: str, password: str
) -> None:
    assert cli(
        capsys,
        broker,
        "SASL_SSL",
        admin,
        "users",
        "--alter",
        "--entity-type",
        "users",
        "--entity-name",
        user,
        "--add-config",
        f"SCRAM-SHA-256=[iterations=8192,password={password}]",
    ) == (0, f"Completed updating config for user {user}.\n", "")


# ---- users -------------------------------------------------------------------------------


def test_users_are_added_described_and_deleted_and_no_secret_is_shown(
    capsys: pytest.CaptureFixture[str], secure: SecureBroker, configs: Path, tmp_path: Path
) -> None:
    admin = admin_config(secure, configs)
    alice = name("alice")
    add_user(capsys, secure, admin, alice, "alice-secret")
    password_file = tmp_path / "password"
    password_file.write_text("alice-512-secret\n")
    code, out, _ = cli(
        capsys,
        secure,
        "SASL_SSL",
        admin,
        "users",
        "add",
        alice,
        "--mechanism",
        "SCRAM-SHA-512",
        "--password-file",
        str(password_file),
    )
    assert (code, out) == (0, f"Completed updating config for user {alice}.\n")

    code, out, err = cli(capsys, secure, "SASL_SSL", admin, "users", "list", alice)
    assert (code, err) == (0, "")
    assert out == (
        f"SCRAM credential configs for user-principal '{alice}' are "
        "SCRAM-SHA-256=iterations=8192, SCRAM-SHA-512=iterations=4096\n"
    )
    code, out, _ = cli(capsys, secure, "SASL_SSL", admin, "users", "--describe")
    assert code == 0 and f"'{alice}'" in out and "secret" not in out

    code, out, _ = cli(
        capsys,
        secure,
        "SASL_SSL",
        admin,
        "users",
        "--alter",
        "--entity-name",
        alice,
        "--delete-config",
        "SCRAM-SHA-256",
    )
    assert code == 0
    code, out, _ = cli(capsys, secure, "SASL_SSL", admin, "users", "list", alice)
    assert out.endswith("are SCRAM-SHA-512=iterations=4096\n")
    assert cli(capsys, secure, "SASL_SSL", admin, "users", "delete", alice)[0] == 0
    code, out, _ = cli(capsys, secure, "SASL_SSL", admin, "users", "list", alice)
    assert code == 1 and "RESOURCE_NOT_FOUND" in out


def test_the_new_users_password_works_and_a_wrong_one_is_refused(
    capsys: pytest.CaptureFixture[str], secure: SecureBroker, configs: Path
) -> None:
    user = name("carol")
    add_user(capsys, secure, admin_config(secure, configs), user, "carol-secret")
    good = java_config(secure, configs, "SASL_PLAINTEXT", user, "carol-secret")
    assert cli(capsys, secure, "SASL_PLAINTEXT", good, "transactions", "list")[0] == 0
    bad = java_config(secure, configs, "SASL_PLAINTEXT", user, "not-her-password")
    code, _out, err = cli(capsys, secure, "SASL_PLAINTEXT", bad, "transactions", "list")
    assert code == 1 and "SASL_AUTHENTICATION_FAILED" in err and "not-her-password" not in err
    # librdkafka's clients too name the cause, not only a "transport failure"
    listing = ["topics", "list", "--timeout-ms", "5000"]
    code, _out, err = cli(capsys, secure, "SASL_PLAINTEXT", bad, *listing)
    assert code == 1 and "SASL authentication error" in err and "not-her-password" not in err


def test_a_principal_that_may_not_describe_gets_kafkas_error_not_an_empty_answer(
    capsys: pytest.CaptureFixture[str], secure: SecureBroker, configs: Path
) -> None:
    """librdkafka would show no ACLs (DescribeAcls) or abort (DescribeUserScramCredentials):
    the CLI reads both with its own client and reports CLUSTER_AUTHORIZATION_FAILED."""
    user = name("dave")
    add_user(capsys, secure, admin_config(secure, configs), user, "dave-secret")
    config = java_config(secure, configs, "SASL_SSL", user, "dave-secret")
    for argv in (["acls", "--list"], ["users", "--describe"]):
        code, out, err = cli(capsys, secure, "SASL_SSL", config, *argv)
        assert (code, out) == (1, "")
        assert "CLUSTER_AUTHORIZATION_FAILED" in err, argv


# ---- ACLs and what they allow ------------------------------------------------------------


def test_producer_and_consumer_acls_let_a_scram_user_produce_and_consume(
    capsys: pytest.CaptureFixture[str], secure: SecureBroker, configs: Path
) -> None:
    admin = admin_config(secure, configs)
    user, topic, group = name("bob"), name("orders"), name("billing")
    add_user(capsys, secure, admin, user, "bob-secret")
    bob = java_config(secure, configs, "SASL_SSL", user, "bob-secret")
    assert cli(capsys, secure, "SASL_SSL", admin, "topics", "create", topic)[0] == 0

    code, _, err = cli(capsys, secure, "SASL_SSL", bob, "produce", topic, stdin="a\n")
    assert code == 1 and "authorization failed" in err.lower()

    principal = f"User:{user}"
    code, out, err = cli(
        capsys,
        secure,
        "SASL_SSL",
        admin,
        "acls",
        "--add",
        "--producer",
        "--consumer",
        "--allow-principal",
        principal,
        "--topic",
        topic,
        "--group",
        group,
    )
    assert (code, err) == (0, "")
    assert f"Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name={topic}, " in out
    assert cli(capsys, secure, "SASL_SSL", bob, "produce", topic, stdin="a\nb\n")[0] == 0
    code, out, err = cli(
        capsys,
        secure,
        "SASL_SSL",
        bob,
        "consume",
        topic,
        "--group",
        group,
        "--from-beginning",
        "--max-messages",
        "2",
        "--timeout-ms",
        "20000",
    )
    assert (code, out) == (0, "a\nb\n")

    code, out, _ = cli(capsys, secure, "SASL_SSL", admin, "acls", "--list", "--topic", topic)
    assert out == (
        f"Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name={topic}, "
        "patternType=LITERAL)`:\n"
        + "".join(
            f"\t(principal={principal}, host=*, operation={op}, permissionType=ALLOW)\n"
            for op in ("READ", "WRITE", "CREATE", "DESCRIBE")
        )
        + "\n"
    )
    mine = ["acls", "--list", "--principal", principal, "--group", group]
    assert cli(capsys, secure, "SASL_SSL", admin, *mine)[1] == (
        f"ACLs for principal `{principal}`\n"
        f"Current ACLs for resource `ResourcePattern(resourceType=GROUP, name={group}, "
        f"patternType=LITERAL)`:\n\t(principal={principal}, host=*, operation=READ, "
        "permissionType=ALLOW)\n\n"
    )


def test_remove_asks_first_and_a_no_keeps_the_acls(
    capsys: pytest.CaptureFixture[str], secure: SecureBroker, configs: Path
) -> None:
    admin = admin_config(secure, configs)
    topic = name("audit")
    add = ["acls", "--add", "--allow-principal", "User:eve", "--operation", "Read"]
    assert cli(capsys, secure, "SASL_SSL", admin, *add, "--topic", topic)[0] == 0
    remove = ["acls", "--remove", "--topic", topic]
    code, out, _ = cli(capsys, secure, "SASL_SSL", admin, *remove, stdin="n\n")
    assert code == 0 and "Are you sure you want to delete all ACLs" in out
    listing = ["acls", "--list", "--topic", topic]
    assert "User:eve" in cli(capsys, secure, "SASL_SSL", admin, *listing)[1]
    code, out, _ = cli(capsys, secure, "SASL_SSL", admin, *remove, "--force")
    assert (code, out.splitlines()[-1]) == (
        0,
        f"Removed 1 ACL matching resource filter "
        f"`ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)`.",
    )
    assert cli(capsys, secure, "SASL_SSL", admin, *listing)[1] == ""


def test_prefixed_acls_and_a_deny_for_one_user(
    capsys: pytest.CaptureFixture[str], secure: SecureBroker, configs: Path
) -> None:
    admin = admin_config(secure, configs)
    prefix, ok_user, denied_user = name("pay"), name("frank"), name("grace")
    for user in (ok_user, denied_user):
        add_user(capsys, secure, admin, user, "pw-" + user)
    topic = f"{prefix}-eu"
    assert cli(capsys, secure, "SASL_SSL", admin, "topics", "create", topic)[0] == 0
    code, _, err = cli(
        capsys,
        secure,
        "SASL_SSL",
        admin,
        "acls",
        "--add",
        "--allow-principal",
        "User:*",
        "--deny-principal",
        f"User:{denied_user}",
        "--operation",
        "Describe",
        "--topic",
        prefix,
        "--resource-pattern-type",
        "prefixed",
    )
    assert (code, err) == (0, "")
    for user, visible in ((ok_user, True), (denied_user, False)):
        config = java_config(secure, configs, "SASL_SSL", user, "pw-" + user)
        code, out, _ = cli(capsys, secure, "SASL_SSL", config, "topics", "list")
        assert code == 0 and (topic in out.split()) == visible, user
    match = ["acls", "--list", "--topic", topic, "--resource-pattern-type", "match"]
    out = cli(capsys, secure, "SASL_SSL", admin, *match)[1]
    assert f"name={prefix}, patternType=PREFIXED" in out and "permissionType=DENY" in out


def test_mutual_tls_with_an_encrypted_pem_keystore(
    capsys: pytest.CaptureFixture[str], secure: SecureBroker, configs: Path
) -> None:
    """The principal is the certificate's subject, for librdkafka (topics) and for the CLI's
    own client (transactions) alike."""
    identity = secure.pki.issue(
        name("henry"), "CN=henry,OU=eng,O=Onceflow", key_password=KEY_PASSWORD
    )
    config = java_config(
        secure, configs, "SSL", keystore=identity.keystore, key_password=KEY_PASSWORD
    )
    admin = admin_config(secure, configs)
    topic = name("ledger")
    assert cli(capsys, secure, "SASL_SSL", admin, "topics", "create", topic)[0] == 0
    assert topic not in cli(capsys, secure, "SSL", config, "topics", "list")[1].split()
    grant = ["acls", "--add", "--allow-principal", "User:CN=henry,OU=eng,O=Onceflow"]
    assert (
        cli(capsys, secure, "SASL_SSL", admin, *grant, "--operation", "Describe", "--topic", topic)[
            0
        ]
        == 0
    )
    code, out, _ = cli(capsys, secure, "SSL", config, "topics", "list")
    assert code == 0 and topic in out.split()
    assert cli(capsys, secure, "SSL", config, "transactions", "list")[0] == 0


def test_a_client_the_broker_does_not_trust_fails_cleanly(
    capsys: pytest.CaptureFixture[str], secure: SecureBroker, configs: Path
) -> None:
    stranger = secure.pki.issue(name("mallory"), "CN=mallory", trusted=False)
    config = java_config(secure, configs, "SSL", keystore=stranger.keystore)
    code, out, err = cli(capsys, secure, "SSL", config, "transactions", "list")
    assert (code, out) == (1, "") and err.startswith("onceflow: error: ") and err[-1] == "\n"


def test_topics_describe_shows_log_dirs_over_sasl_ssl(
    capsys: pytest.CaptureFixture[str], secure: SecureBroker, configs: Path
) -> None:
    admin = admin_config(secure, configs)
    topic = name("described")
    assert cli(capsys, secure, "SASL_SSL", admin, "topics", "create", topic)[0] == 0
    code, out, _ = cli(capsys, secure, "SASL_SSL", admin, "topics", "describe", topic)
    assert code == 0 and "LogDir: " in out and "unavailable" not in out


def test_bench_measures_over_sasl_ssl(
    capsys: pytest.CaptureFixture[str], secure: SecureBroker, configs: Path
) -> None:
    tiny = ["--only", "produce,consume", "--messages", "200", "--repeat", "1"]
    code, out, err = cli(capsys, secure, "SASL_SSL", admin_config(secure, configs), "bench", *tiny)
    assert code == 0, err
    assert "produce_1024B_MBps" in out and "consume_read_committed_MBps" in out


# ---- the console ---------------------------------------------------------------------------


def _get(console: ConsoleProcess, path: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(console.url(path), timeout=30) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def test_the_console_uses_the_command_config_for_every_page(
    secure: SecureBroker, configs: Path, tmp_path: Path
) -> None:
    admin = admin_config(secure, configs)
    console = ConsoleProcess(
        secure.bootstrap("SASL_SSL"), tmp_path / "console.log", ["--command-config", admin]
    )
    console.start()
    try:
        for page in ("api/overview", "api/groups", "api/transactions", "api/hanging"):
            status, body = _get(console, page)
            assert (status, body.get("error")) == (200, None), (page, console.log())
    finally:
        console.stop()
