"""A throwaway PostgreSQL server for the order demo and the dual-write tests: initdb in a
temporary directory, pg_ctl on a free loopback port, trust authentication. PostgreSQL
refuses to run as root, so as root the server runs as the `postgres` user (Debian's
package creates it)."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

__all__ = ["PostgresError", "PostgresServer", "postgres_bin"]


def postgres_bin() -> Path | None:
    """The newest installed PostgreSQL's bin directory (Debian: /usr/lib/postgresql/N/bin)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_major)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _major(path: str) -> int:
    try:
        return int(Path(path).parent.parent.name)
    except ValueError:
        return 0


class PostgresError(Exception):
    """initdb or pg_ctl failed (the message carries their output and the server's log)."""


class PostgresServer:
    def __init__(self) -> None:
        bin_dir = postgres_bin()
        if bin_dir is None:
            raise PostgresError(
                "PostgreSQL is not installed: `make test` installs Debian's 'postgresql' "
                "package (sudo apt-get install postgresql)"
            )
        self.bin = bin_dir
        self.tmp = tempfile.mkdtemp(prefix="onceflow-pg-")
        os.chmod(self.tmp, 0o755)
        self.data = str(Path(self.tmp) / "data")
        self.log = str(Path(self.tmp) / "postgres.log")
        self.port = free_port()
        self.user = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            os.chown(self.tmp, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", self.data, "-A", "trust", "-U", "postgres", "--no-sync")

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        cmd = [str(self.bin / tool), *args]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise PostgresError(f"{tool} failed: {done.stdout}\n{done.stderr}\n{self.tail()}")

    def tail(self) -> str:
        try:
            return Path(self.log).read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def start(self) -> PostgresServer:
        options = f"-p {self.port} -k {self.tmp} -c listen_addresses=127.0.0.1 -c fsync=on"
        self._run("pg_ctl", "-D", self.data, "-l", self.log, "-o", options, "-w", "start")
        return self

    def stop(self, mode: str = "fast") -> None:
        """`immediate` is a crash: no checkpoint, WAL replay at the next start."""
        self._run("pg_ctl", "-D", self.data, "-m", mode, "-w", "stop")

    def restart(self, mode: str = "immediate") -> None:
        self.stop(mode)
        self.start()

    def close(self) -> None:
        with contextlib.suppress(PostgresError):
            self.stop("immediate")
        shutil.rmtree(self.tmp, ignore_errors=True)
