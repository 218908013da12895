"""A throwaway PostgreSQL cluster for the test session (Debian's server binaries, real server)."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["PgServer", "find_pg_bin", "start_pg_server"]


_ENV = {**os.environ, "LC_ALL": "C"}


@dataclass(frozen=True)
class PgServer:
    host: str
    port: int
    user: str
    ctl: tuple[str, ...] = ()
    """``pg_ctl -D <data> -o <options> -l <log>`` (run as the cluster's owner): what
    ``kill``/``start`` call."""

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{self.user}@{self.host}:{self.port}/{dbname}"

    def kill(self) -> None:
        """Stop the server the way a crash does (``-m immediate``: no checkpoint, every
        backend killed, clients get their connections cut)."""
        subprocess.run(
            [*self.ctl, "-m", "immediate", "stop"], check=True, capture_output=True, env=_ENV
        )

    def start(self) -> None:
        """Start it again and wait until it accepts connections (crash recovery first)."""
        subprocess.run([*self.ctl, "-w", "start"], check=True, capture_output=True, env=_ENV)


def find_pg_bin() -> str | None:
    """Directory holding initdb/pg_ctl, or None."""
    found = shutil.which("pg_ctl")
    if found:
        return os.path.dirname(os.path.realpath(found))
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return os.path.dirname(candidates[-1]) if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def start_pg_server(bindir: str, *, durable_commits: bool = False) -> Iterator[PgServer]:
    """initdb + pg_ctl start on a free loopback port; stopped and removed afterwards.

    PostgreSQL refuses to run as root, so as root the cluster belongs to the ``postgres`` user.
    The test cluster skips fsync (a process kill keeps the OS cache, so only a power cut could
    lose data) and, unless *durable_commits*, acknowledges a commit before its WAL record is
    written (``synchronous_commit=off``): a killed server can then lose acknowledged commits,
    so a test that kills the server asks for durable commits.
    """
    base = tempfile.mkdtemp(prefix="ctxledger-pg-")
    data = os.path.join(base, "data")
    prefix: list[str] = []
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(base, pw.pw_uid, pw.pw_gid)
        prefix = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    env = {**os.environ, "LC_ALL": "C"}
    subprocess.run(
        [*prefix, f"{bindir}/initdb", "-D", data, "-A", "trust", "-U", "postgres", "-E", "UTF8"],
        check=True,
        capture_output=True,
        env=env,
    )
    opts = (
        f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off "
        f"-c synchronous_commit={'on' if durable_commits else 'off'} -c full_page_writes=off "
        "-c max_connections=200"
    )
    ctl = (*prefix, f"{bindir}/pg_ctl", "-D", data, "-o", opts, "-l", f"{base}/log")
    subprocess.run([*ctl, "-w", "start"], check=True, capture_output=True, env=env)
    try:
        yield PgServer("127.0.0.1", port, "postgres", ctl)
    finally:
        subprocess.run(
            [*prefix, f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "stop"],
            check=False,
            capture_output=True,
            env=env,
        )
        shutil.rmtree(base, ignore_errors=True)
