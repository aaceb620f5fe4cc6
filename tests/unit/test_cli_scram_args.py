"""kafka-configs.sh's `--add-config` syntax for SCRAM credentials, and `onceflow users` refusing
bad arguments (a password never in argv) before it connects."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from onceflow.cli import scram_args, users
from onceflow.cli.common import UsageError
from onceflow.cli.main import build_parser, main
from onceflow.cli.scram_args import ScramUpsertion


def test_brackets_group_values_with_commas_and_are_dropped() -> None:
    configs = scram_args.parse_add_config(
        "SCRAM-SHA-256=[iterations=8192,password=alice-secret],SCRAM-SHA-512=[password=a,b]"
    )
    assert configs == {
        "SCRAM-SHA-256": "iterations=8192,password=alice-secret",
        "SCRAM-SHA-512": "password=a,b",
    }


def test_credential_with_and_without_iterations() -> None:
    assert scram_args.scram_credential(
        "SCRAM-SHA-256", "iterations=8192,password=alice-secret"
    ) == ScramUpsertion("SCRAM-SHA-256", 8192, b"alice-secret")
    default = scram_args.scram_credential("scram-sha-512", "password=p=w,d")
    assert default == ScramUpsertion("SCRAM-SHA-512", 4096, b"p=w,d")
    assert scram_args.scram_credential("SCRAM-SHA-512", "iterations=-1,password=x").iterations == (
        4096
    )


def test_the_password_stays_out_of_repr_and_errors() -> None:
    assert "alice-secret" not in repr(ScramUpsertion("SCRAM-SHA-256", 4096, b"alice-secret"))
    with pytest.raises(UsageError) as caught:
        scram_args.scram_credential("SCRAM-SHA-256", "pasword=alice-secret")
    assert "alice-secret" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SCRAM-SHA-256", "key=val"),
        ("SCRAM-SHA-256=[password=a]=b", "key=val"),
        ("SCRAM SHA=[password=a]", "invalid character"),
    ],
)
def test_malformed_add_config(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        scram_args.parse_add_config(text)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("SCRAM-SHA-256", "iterations=4095,password=x", "less than the minimum 4096"),
        ("SCRAM-SHA-256", "password=", "empty"),
        ("SCRAM-SHA-1", "password=x", "unknown SCRAM mechanism"),
        ("SCRAM-SHA-256", "password=x,iterations=8192", None),  # the password is the rest
    ],
)
def test_credential_checks(name: str, value: str, message: str | None) -> None:
    if message is None:
        assert scram_args.scram_credential(name, value).password == b"x,iterations=8192"
        return
    with pytest.raises(UsageError, match=message):
        scram_args.scram_credential(name, value)


def test_delete_config_is_repeatable_and_comma_separated() -> None:
    assert scram_args.parse_delete_config(["SCRAM-SHA-256, SCRAM-SHA-512", "x"]) == [
        "SCRAM-SHA-256",
        "SCRAM-SHA-512",
        "x",
    ]


# ---- `onceflow users` refuses bad combinations before connecting ---------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["users"], "give an action"),
        (["users", "--alter", "--add-config", "SCRAM-SHA-256=[password=x]"], "--entity-name"),
        (["users", "--alter", "--entity-name", "a"], "--add-config"),
        (["users", "--describe", "alice"], "--entity-name"),
        (["users", "add", "a", "b", "--mechanism", "SCRAM-SHA-256"], "one user name"),
        (["users", "add", "a"], "one --mechanism"),
        (["users", "add", "a", "--mechanism", "SCRAM-SHA-256", "--iterations", "10"], "4096"),
        (["users", "list", "--password-file", "f"], "only for add"),
        (["users", "add", "a", "--entity-name", "a"], "does not mix"),
        (
            ["users", "--alter", "--entity-name", "a", "--add-config", "consumer_byte_rate=1"],
            "SCRAM",
        ),
        (["users", "add", "a", "--mechanism", "SCRAM-SHA-1"], "unknown SCRAM mechanism"),
    ],
)
def test_users_usage_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main([*argv, "--bootstrap-server", "127.0.0.1:1"]) == 2
    assert message in capsys.readouterr().err


def test_add_without_a_password_file_needs_a_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    argv = ["users", "add", "a", "--mechanism", "SCRAM-SHA-256", "--bootstrap-server", "h:1"]
    assert main(argv) == 1
    assert "give --password-file" in capsys.readouterr().err


def test_the_password_file_gives_its_first_line(tmp_path: Path) -> None:
    path = tmp_path / "pw"
    path.write_text("s3cret, with spaces \r\nsecond line\n")
    args = build_parser().parse_args(
        ["users", "add", "a", "--mechanism", "SCRAM-SHA-512", "--password-file", str(path)]
    )
    assert users._friendly_add(args) == ScramUpsertion(
        "SCRAM-SHA-512", 4096, b"s3cret, with spaces "
    )
