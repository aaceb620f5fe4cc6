"""`onceflow serve` as an operator runs it: `python -m onceflow serve ...` in a subprocess.

Startup line, clear one-line errors with exit code 1 (taken port, locked or unusable data
dir, bad config values), warnings for unknown keys, `--config` with options on top, and
clean shutdown on SIGTERM and SIGINT: exit 0 and a clean-shutdown marker that spares the next
start its recovery scans, which a start after kill -9 does run.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers.broker import die_with_parent, free_port
from tests.helpers.clients import produce_and_confirm, producer

CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
TIMEOUT_S = 30.0
# Fewer internal partitions: each start opens them all, and these tests start many brokers.
FAST = ["--override", "offsets.topic.num.partitions=2"]
FAST += ["--override", "transaction.state.log.num.partitions=2"]


class Serve:
    """One `onceflow serve` process; stdout and stderr go to a file (never a full pipe)."""

    def __init__(self, tmp: Path, *args: str, name: str = "serve") -> None:
        self.log_path = tmp / f"{name}.log"
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "onceflow", "serve", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
                preexec_fn=die_with_parent,
            )

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_listening(self) -> str:
        """The startup line, once it is logged; fails if the process exits first."""
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            lines = [line for line in self.log.splitlines() if "listening on" in line]
            if lines:
                return lines[0]
            if self.proc.poll() is not None:
                raise AssertionError(f"exited with {self.proc.returncode}:\n{self.log}")
            time.sleep(0.05)
        raise AssertionError(f"no startup line within {TIMEOUT_S} s:\n{self.log}")

    def wait_exit(self) -> int:
        try:
            return self.proc.wait(TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"did not exit within {TIMEOUT_S} s:\n{self.log}") from None

    def signal(self, sig: int) -> int:
        self.proc.send_signal(sig)
        return self.wait_exit()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


Starter = Callable[..., Serve]


@pytest.fixture
def serves(tmp_path: Path) -> Iterator[Starter]:
    """Start `Serve` processes; every one still running is killed at teardown."""
    made: list[Serve] = []

    def start(*args: str, name: str = "serve") -> Serve:
        s = Serve(tmp_path, *args, name=f"{name}{len(made)}")
        made.append(s)
        return s

    yield start
    for s in made:
        s.kill()


def assert_one_line_error(s: Serve, *needles: str) -> str:
    """Exit code 1 and a clear message: one line, no traceback, naming what is wrong."""
    code = s.wait_exit()
    text = s.log.strip()
    assert code == 1, f"exit code {code}:\n{text}"
    assert "Traceback" not in text, text
    assert len(text.splitlines()) == 1, f"more than one line:\n{text}"
    for needle in needles:
        assert needle in text, f"{needle!r} not in {text!r}"
    return text


def recovery_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "recovered" in line]


# ---- lifecycle ---------------------------------------------------------------------------


def test_startup_shutdown_and_recovery_only_after_a_crash(serves: Starter, tmp_path: Path) -> None:
    data = tmp_path / "data"
    port = free_port()
    args = ["--data-dir", str(data), "--listener", f"127.0.0.1:{port}", *FAST]

    first = serves(*args)
    line = first.wait_listening()
    assert f"127.0.0.1:{port}" in line and str(data) in line, line
    assert len([x for x in first.log.splitlines() if "listening on" in x]) == 1
    p = producer(f"127.0.0.1:{port}")
    done = produce_and_confirm(p, "served", [(None, b"k%d" % i, b"v", None) for i in range(20)])
    assert not done.errors and len(done.ok) == 20

    # A second broker on the same data dir is refused while the first runs.
    second = serves("--data-dir", str(data), "--listener", f"127.0.0.1:{free_port()}")
    assert_one_line_error(second, "locked", str(data))

    assert first.signal(signal.SIGTERM) == 0, first.log
    assert (data / CLEAN_SHUTDOWN).exists()
    assert "shut down cleanly" in first.log

    # After a clean shutdown nothing is scanned.
    clean = serves(*args)
    clean.wait_listening()
    assert not (data / CLEAN_SHUTDOWN).exists(), "the marker is consumed at startup"
    assert recovery_lines(clean.log) == [], clean.log
    clean.kill()  # kill -9: no marker

    crashed = serves(*args)
    crashed.wait_listening()
    recovered = recovery_lines(crashed.log)
    assert any("served-0" in line and "scanned" in line for line in recovered), crashed.log

    # SIGINT (Ctrl-C) shuts down as cleanly as SIGTERM.
    assert crashed.signal(signal.SIGINT) == 0, crashed.log
    assert (data / CLEAN_SHUTDOWN).exists()
    assert "Traceback" not in crashed.log
    again = serves(*args)
    again.wait_listening()
    assert recovery_lines(again.log) == [], again.log
    assert again.signal(signal.SIGTERM) == 0


# ---- clear errors ------------------------------------------------------------------------


def test_a_taken_port_is_a_one_line_error(serves: Starter, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        s = serves("--data-dir", str(tmp_path / "data"), "--listener", f"127.0.0.1:{port}")
        assert_one_line_error(s, f"127.0.0.1:{port}", "address already in use")


def test_a_data_dir_that_cannot_be_used_is_a_one_line_error(
    serves: Starter, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    s = serves("--data-dir", str(blocker / "data"), "--listener", f"127.0.0.1:{free_port()}")
    assert_one_line_error(s, "data dir", str(blocker / "data"))


def test_a_bad_value_on_the_command_line_names_the_key(serves: Starter, tmp_path: Path) -> None:
    s = serves("--data-dir", str(tmp_path / "data"), "--override", "num.partitions=abc")
    assert_one_line_error(s, "num.partitions", "abc")
    assert not (tmp_path / "data").exists(), "nothing is created for a config that is refused"


def test_a_bad_value_in_the_properties_file_names_the_key_and_file(
    serves: Starter, tmp_path: Path
) -> None:
    props = tmp_path / "server.properties"
    props.write_text("# a comment\nlog.retention.hours=168\nnum.partitions=abc\n")
    s = serves("--config", str(props), "--data-dir", str(tmp_path / "data"))
    assert_one_line_error(s, "num.partitions", str(props))


def test_an_unknown_key_is_a_warning_and_the_broker_starts(serves: Starter, tmp_path: Path) -> None:
    port = free_port()
    s = serves(
        "--data-dir",
        str(tmp_path / "data"),
        "--listener",
        f"127.0.0.1:{port}",
        "--override",
        "no.such.setting=1",
        *FAST,
    )
    s.wait_listening()
    warnings = [line for line in s.log.splitlines() if "no.such.setting" in line]
    assert len(warnings) == 1 and "WARNING" in warnings[0], s.log
    assert s.signal(signal.SIGTERM) == 0


def test_config_file_with_an_option_on_top(serves: Starter, tmp_path: Path) -> None:
    from_file, from_option = free_port(), free_port()
    data = tmp_path / "from-file"
    props = tmp_path / "server.properties"
    props.write_text(
        f"log.dirs={data}\n"
        f"listeners=PLAINTEXT://127.0.0.1:{from_file}\n"
        "offsets.topic.num.partitions=2\n"
        "transaction.state.log.num.partitions=2\n"
    )
    s = serves("--config", str(props), "--listener", f"127.0.0.1:{from_option}")
    line = s.wait_listening()
    assert f"127.0.0.1:{from_option}" in line and str(data) in line, line
    assert (data / ".lock").exists(), "log.dirs came from the file"
    with socket.create_connection(("127.0.0.1", from_option), timeout=5):
        pass
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", from_file), timeout=5):
        pass
    assert s.signal(signal.SIGTERM) == 0
