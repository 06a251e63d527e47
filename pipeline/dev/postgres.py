"""An embedded PostgreSQL: Debian's server binaries, a data directory of its own, loopback only.

A :class:`~pipeline.dev.service.LocalService` like the broker and the registry: the directory
holds ``data/`` (made by ``initdb`` on first start), the server's log and a ``postgres.json``
state file; the server listens on a free port of 127.0.0.1 (and a Unix socket in the
directory), with what logical decoding for Debezium needs: ``wal_level=logical``, replication
slots and WAL senders. Local connections are trusted (it is a development server that only
this machine reaches); the database ``highwater`` is created for the demo and the tests.

PostgreSQL refuses to run as root: when this process is root, the server (and ``initdb``) run
as the ``postgres`` user the Debian package creates, through ``setpriv``, and the directory
is given to that user.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from schemas.errors import PlatformError

from .service import LocalService, alive, free_port, terminate

log = logging.getLogger(__name__)

DATABASE = "highwater"
USER = "postgres"
SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "wal_level": "logical",
    "max_replication_slots": "10",
    "max_wal_senders": "10",
    "fsync": "off",  # a development server: speed over durability across machine crashes
    "full_page_writes": "off",
    "log_min_messages": "warning",
}


class PostgresError(PlatformError):
    """The embedded PostgreSQL did not start or answer."""


@dataclass(frozen=True)
class PostgresInfo:
    """Where a running server listens and what process it is."""

    directory: str
    pid: int
    port: int

    @property
    def dsn(self) -> str:
        """A libpq connection string to the ``highwater`` database."""
        return f"host=127.0.0.1 port={self.port} dbname={DATABASE} user={USER}"


# Debezium's heartbeat.action.query writes it (pipeline/dev/connect.py): each heartbeat is a
# transaction of its own, so the markers advance while the followed tables are quiet
HEARTBEAT = "public.highwater_heartbeat"
HEARTBEAT_TABLE = (
    "CREATE TABLE IF NOT EXISTS public.highwater_heartbeat (id int PRIMARY KEY, at timestamptz)"
)
HEARTBEAT_QUERY = (
    "INSERT INTO public.highwater_heartbeat VALUES (1, now()) "
    "ON CONFLICT (id) DO UPDATE SET at = now()"
)


def binaries() -> Path:
    """The folder of Debian's PostgreSQL server binaries (``initdb``, ``postgres``, ``psql``)."""
    for folder in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (folder / "postgres").is_file():
            return folder
    raise PostgresError(
        "PostgreSQL's server is not installed (/usr/lib/postgresql/<version>/bin/postgres): "
        "`make system` installs Debian's postgresql package"
    )


def _as_server_user() -> list[str]:
    """The prefix that runs a command as the ``postgres`` user when we are root."""
    if os.geteuid() != 0:
        return []
    return ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--init-groups", "--"]


class EmbeddedPostgres(LocalService[PostgresInfo]):
    """PostgreSQL in ``directory``."""

    name = "PostgreSQL"
    state_file_name = "postgres.json"
    error = PostgresError
    info_type = PostgresInfo

    @property
    def data(self) -> Path:
        """The cluster's data directory."""
        return self.directory / "data"

    def start(self, timeout: float = 60.0) -> PostgresInfo:
        """Start the server (or return the running one) once it accepts connections."""
        running = self.status()
        if running is not None:
            return running
        self.directory.mkdir(parents=True, exist_ok=True)
        bin_dir, prefix = binaries(), _as_server_user()
        if prefix:
            shutil.chown(self.directory, USER, USER)
        if not (self.data / "PG_VERSION").is_file():
            initdb = [str(bin_dir / "initdb"), "-D", str(self.data), "-U", USER, "--auth=trust"]
            self._run([*prefix, *initdb, "--encoding=UTF8", "--locale=C.UTF-8"], "initdb")
        port = free_port()
        settings = {**SETTINGS, "port": str(port), "unix_socket_directories": str(self.directory)}
        options = [arg for name, value in settings.items() for arg in ("-c", f"{name}={value}")]
        command = [*prefix, str(bin_dir / "postgres"), "-D", str(self.data), *options]
        process = self.spawn(command, "postgres.log")
        info = PostgresInfo(str(self.directory), process.pid, port)
        self.record(info)
        self.wait_ready(process, lambda: self._ready(port), timeout)
        found = self.sql("SELECT 1 FROM pg_database WHERE datname = 'highwater'", database=USER)
        if not found.strip():
            self.sql(f"CREATE DATABASE {DATABASE}", database=USER)
        self.sql(HEARTBEAT_TABLE)
        log.info("PostgreSQL ready at 127.0.0.1:%s (pid %s)", port, process.pid)
        return info

    def _ready(self, port: int) -> bool:
        probe = [str(binaries() / "pg_isready"), "-h", "127.0.0.1", "-p", str(port), "-q"]
        return subprocess.run(probe, check=False, timeout=10).returncode == 0

    def _run(self, command: list[str], what: str) -> None:
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)
        if done.returncode != 0:
            raise PostgresError(f"{what} failed ({done.returncode}): {done.stderr[-2000:]}")

    def sql(self, statements: str, *, database: str = DATABASE) -> str:
        """Run SQL with ``psql`` (stopping at the first error); its unaligned output."""
        info = self.status()
        if info is None:
            raise PostgresError(f"no PostgreSQL running in {self.directory}")
        command = [
            str(binaries() / "psql"),
            f"host=127.0.0.1 port={info.port} dbname={database} user={USER}",
            "-v",
            "ON_ERROR_STOP=1",
            "-X",
            "-q",
            "-A",
            "-t",
        ]
        done = subprocess.run(
            command, input=statements, capture_output=True, text=True, check=False, timeout=300
        )
        if done.returncode != 0:
            raise PostgresError(f"psql failed ({done.returncode}): {done.stderr[-2000:]}")
        return done.stdout

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the server with a fast shutdown (SIGINT: sessions, replication too, end)."""
        info = self.status()
        if info is None:
            return False
        os.kill(info.pid, signal.SIGINT)
        deadline = time.monotonic() + timeout
        while alive(info.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if alive(info.pid):
            terminate(info.pid, 5)
        log.info("PostgreSQL %s stopped", self.directory)
        return True

    def log_files(self) -> list[str]:
        """The server's log."""
        return ["postgres.log"]

    def __enter__(self) -> PostgresInfo:
        return self.start()
