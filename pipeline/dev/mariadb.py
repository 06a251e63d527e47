"""An embedded MariaDB: Debian's server, a data directory of its own, loopback only.

The second real upstream of the Debezium tests and demo, beside PostgreSQL (``postgres.py``),
and a :class:`~pipeline.dev.service.LocalService` like it: the directory holds ``data/`` (made
by ``mariadb-install-db`` on first start), the server's socket, error log and a
``mariadb.json`` state file. The server listens on a free port of 127.0.0.1 with what
Debezium's binlog connector needs: the binary log on, ``ROW`` format with ``FULL`` row
images, a server id (MariaDB's GTIDs are always there) and ``utf8mb4`` throughout. The
database ``highwater`` is created, with a user ``highwater`` (password ``highwater``) that may
read the binlog as a replica does; ``root`` reaches the server through the socket only.

MariaDB refuses to run as root: when this process is root, the server runs as the ``mysql``
user the Debian package creates (``--user``), and the directory is given to that user.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from schemas.errors import PlatformError

from .service import LocalService, free_port

log = logging.getLogger(__name__)

DATABASE = "highwater"
USER = PASSWORD = "highwater"  # noqa: S105 - a development server on loopback
SERVER_USER = "mysql"
SETTINGS = {
    "bind-address": "127.0.0.1",
    "log-bin": "binlog",
    "binlog-format": "ROW",
    "binlog-row-image": "FULL",
    "server-id": "1",
    "character-set-server": "utf8mb4",
    "collation-server": "utf8mb4_unicode_ci",
    "innodb-flush-log-at-trx-commit": "2",  # a development server: speed over durability
    "innodb-buffer-pool-size": "64M",
    "skip-name-resolve": "ON",
}
ACCOUNT = f"""
CREATE DATABASE IF NOT EXISTS {DATABASE} CHARACTER SET utf8mb4;
CREATE USER IF NOT EXISTS '{USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}';
GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'127.0.0.1';
"""

# Debezium's heartbeat.action.query writes it (pipeline/dev/connect.py), as on PostgreSQL
HEARTBEAT = f"{DATABASE}.highwater_heartbeat"
HEARTBEAT_TABLE = f"CREATE TABLE IF NOT EXISTS {HEARTBEAT} (id int PRIMARY KEY, at datetime(6))"
HEARTBEAT_QUERY = f"INSERT INTO {HEARTBEAT} VALUES (1, NOW(6)) ON DUPLICATE KEY UPDATE at = NOW(6)"  # noqa: S608


class MariaDBError(PlatformError):
    """The embedded MariaDB did not start or answer."""


@dataclass(frozen=True)
class MariaDBInfo:
    """Where a running server listens and what process it is."""

    directory: str
    pid: int
    port: int

    @property
    def dsn(self) -> str:
        """A URL of the ``highwater`` database for the ``highwater`` user."""
        return f"mariadb://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{DATABASE}"


def _binary(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")
    if found is None:
        raise MariaDBError(
            f"MariaDB's {name} is not installed: `make system` installs Debian's mariadb-server"
        )
    return found


class EmbeddedMariaDB(LocalService[MariaDBInfo]):
    """MariaDB in ``directory``."""

    name = "MariaDB"
    state_file_name = "mariadb.json"
    error = MariaDBError
    info_type = MariaDBInfo

    @property
    def data(self) -> Path:
        """The server's data directory."""
        return self.directory / "data"

    @property
    def socket(self) -> Path:
        """The server's Unix socket (root's way in)."""
        return self.directory / "mariadb.sock"

    def start(self, timeout: float = 60.0) -> MariaDBInfo:
        """Start the server (or return the running one) once it accepts connections."""
        running = self.status()
        if running is not None:
            return running
        self.directory.mkdir(parents=True, exist_ok=True)
        as_user = [f"--user={SERVER_USER}"] if os.geteuid() == 0 else []
        if as_user:
            shutil.chown(self.directory, SERVER_USER, SERVER_USER)
        if not (self.data / "mysql").is_dir():
            install = [
                _binary("mariadb-install-db"),
                "--no-defaults",
                *as_user,
                f"--datadir={self.data}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ]
            self._run(install, "mariadb-install-db")
        port = free_port()
        settings = {
            **SETTINGS,
            "datadir": str(self.data),
            "socket": str(self.socket),
            "port": str(port),
            "pid-file": str(self.directory / "mariadb.pid"),
            "log-error": str(self.directory / "mariadb.log"),
        }
        options = [f"--{name}={value}" for name, value in settings.items()]
        process = self.spawn([_binary("mariadbd"), "--no-defaults", *as_user, *options], "out")
        info = MariaDBInfo(str(self.directory), process.pid, port)
        self.record(info)
        self.wait_ready(process, lambda: bool(self.sql("SELECT 1", database="mysql")), timeout)
        self.sql(ACCOUNT, database="mysql")
        self.sql(HEARTBEAT_TABLE)
        log.info("MariaDB ready at 127.0.0.1:%s (pid %s)", port, process.pid)
        return info

    def _run(self, command: list[str], what: str) -> None:
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)
        if done.returncode != 0:
            raise MariaDBError(f"{what} failed ({done.returncode}): {done.stderr[-2000:]}")

    def sql(self, statements: str, *, database: str = DATABASE) -> str:
        """Run SQL as root with the ``mariadb`` client (stopping at the first error).

        Its output: a row a line, values tab-separated, as they are (``--raw``; NULL as
        ``NULL``).
        """
        command = [
            _binary("mariadb"),
            "--no-defaults",
            "--user=root",
            f"--socket={self.socket}",
            "--batch",
            "--raw",
            "--skip-column-names",
            "--default-character-set=utf8mb4",
            database,
        ]
        done = subprocess.run(
            command, input=statements, capture_output=True, text=True, check=False, timeout=300
        )
        if done.returncode != 0:
            raise MariaDBError(f"mariadb failed ({done.returncode}): {done.stderr[-2000:]}")
        return done.stdout

    def log_files(self) -> list[str]:
        """The server's error log."""
        return ["out", "mariadb.log"]

    def __enter__(self) -> MariaDBInfo:
        return self.start()
