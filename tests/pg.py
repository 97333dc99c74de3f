"""A throwaway PostgreSQL server from the machine's own binaries, for tests.

``with postgres_server() as server:`` runs ``initdb`` into a fresh temporary
directory, starts ``postgres`` with ``pg_ctl -w`` (which itself waits until the
server accepts connections) on 127.0.0.1 and a free port, and on exit stops it
(``-m immediate``) and removes the directory. ``server.create_database()``
returns the DSN of a new, empty database; tests take one each.

PostgreSQL refuses to run as root. When the effective uid is 0 the data
directory is chowned to an unprivileged system user (``postgres``, which the
Debian package creates, else ``nobody``) and the server commands run as that
user through ``runuser``. Clients (asyncpg, ``psql``) connect over TCP as the
superuser ``shadowtrial`` with trust authentication, so they need no switch.

No binaries: :func:`find_bindir` returns None and :data:`INSTALL_HINT` says
what to install. The helper imports nothing from pytest, so a plain script or a
multi-process test can use it as well::

    with postgres_server() as server:
        dsn = server.create_database()
"""

from __future__ import annotations

import glob
import os
import pwd
import shlex
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

INSTALL_HINT = "PostgreSQL server binaries (initdb, pg_ctl) not found: apt-get install postgresql"
SUPERUSER = "shadowtrial"


def find_bindir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``: the newest
    ``/usr/lib/postgresql/*/bin`` (Debian's layout), else wherever ``initdb`` is on PATH."""

    def version(path: str) -> tuple[int, ...]:
        part = Path(path).parent.parent.name
        return tuple(int(p) for p in part.split(".") if p.isdigit())

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=version)
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("initdb")
    if on_path is None:
        return None
    real = Path(on_path).resolve()  # Debian's /usr/bin/initdb may be a wrapper link
    return real.parent if (real.parent / "pg_ctl").exists() else Path(on_path).parent


@dataclass(frozen=True)
class PostgresServer:
    """A running throwaway server. ``create_database`` is safe to call from any thread or process."""

    bindir: Path
    host: str
    port: int
    datadir: Path

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@{self.host}:{self.port}/{dbname}"

    def create_database(self, name: str | None = None) -> str:
        """Create an empty database (copied from ``template0``) and return its DSN."""
        name = name or f"t_{uuid.uuid4().hex[:16]}"
        self._sql(f'CREATE DATABASE "{name}" TEMPLATE template0 STRATEGY file_copy')
        return self.dsn(name)

    def drop_database(self, dsn: str) -> None:
        """Drop the database of ``dsn`` (one :meth:`create_database` returned), closing its sessions."""
        self._sql(f'DROP DATABASE IF EXISTS "{dsn.rsplit("/", 1)[1]}" WITH (FORCE)')

    def _sql(self, statement: str) -> None:
        psql = shutil.which("psql", path=str(self.bindir)) or "psql"
        done = subprocess.run(
            [psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", self.dsn(), "-c", statement],
            capture_output=True, text=True, timeout=60,
        )
        if done.returncode != 0:
            raise RuntimeError(f"psql failed on {statement!r}: {done.stderr.strip()}")


def _as_server_user(cmd: list[str], user: str | None) -> list[str]:
    if user is None:
        return cmd
    if shutil.which("runuser"):
        return ["runuser", "-u", user, "--", *cmd]
    return ["su", "-s", "/bin/sh", user, "-c", shlex.join(cmd)]


def _server_user() -> str | None:
    """None when we may run the server ourselves; else the unprivileged user to run it as."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    raise RuntimeError("running as root and no unprivileged user (postgres, nobody) to run PostgreSQL as")


def _scratch_root() -> Path:
    """A new directory for the cluster: in /dev/shm when it has room (a disk-backed
    CREATE DATABASE costs a checkpoint, ~0.3 s, against ~15 ms in memory), else in
    the system temp dir — not pytest's, which is 0700 under root and so out of the
    server user's reach."""
    shm = Path("/dev/shm")
    try:
        stat = os.statvfs(shm)
        roomy = stat.f_bavail * stat.f_frsize >= 1 << 30 and os.access(shm, os.W_OK)
    except OSError:
        roomy = False
    return Path(tempfile.mkdtemp(prefix="shadowtrial-pg-", dir=shm if roomy else None))


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _run(cmd: list[str], what: str, *, timeout: float = 120) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")


@contextmanager
def postgres_server(bindir: Path | None = None) -> Iterator[PostgresServer]:
    """Start a server for the block and tear it down after. Raises ``RuntimeError``
    with :data:`INSTALL_HINT` when no binaries are found."""
    bindir = bindir or find_bindir()
    if bindir is None:
        raise RuntimeError(INSTALL_HINT)
    user = _server_user()
    root = _scratch_root()
    datadir, sockdir, log = root / "data", root / "sock", root / "server.log"
    sockdir.mkdir()
    if user is not None:
        entry = pwd.getpwnam(user)
        for p in (root, sockdir):
            os.chown(p, entry.pw_uid, entry.pw_gid)
    started = False
    try:
        _run(_as_server_user(
            [str(bindir / "initdb"), "-D", str(datadir), "-U", SUPERUSER, "--auth=trust",
             "-E", "UTF8", "--locale=C", "--no-sync"], user), "initdb")
        for _attempt in range(5):  # another process may take the free port before postgres binds it
            port = _free_port()
            opts = (f"-c listen_addresses=127.0.0.1 -p {port} -k {sockdir} -c fsync=off "
                    "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300")
            done = subprocess.run(_as_server_user(
                [str(bindir / "pg_ctl"), "-D", str(datadir), "-l", str(log), "-o", opts, "-w", "-t", "60", "start"],
                user), capture_output=True, text=True, timeout=90)
            if done.returncode == 0:
                started = True
                break
        if not started:
            raise RuntimeError(f"pg_ctl start failed: {log.read_text() if log.exists() else done.stderr}")
        yield PostgresServer(bindir=bindir, host="127.0.0.1", port=port, datadir=datadir)
    finally:
        if started:
            subprocess.run(_as_server_user(
                [str(bindir / "pg_ctl"), "-D", str(datadir), "-m", "immediate", "-w", "stop"], user),
                capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)
