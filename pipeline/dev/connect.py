"""Kafka Connect standalone running a Debezium connector: the Debezium upstream.

The connector is Debezium's PostgreSQL one over an embedded PostgreSQL (``postgres.py``) or
its MariaDB one over an embedded MariaDB (``mariadb.py``), whichever the database passed to
:meth:`EmbeddedConnect.capture` is.

A :class:`~pipeline.dev.service.LocalService`: the directory holds the worker's and the
connector's properties, the worker's offsets file and its log. Connect comes with the broker
jars, the connector with the ``debezium`` jar set (``pipeline/jvm/debezium/pom.xml``); both
go on one classpath. The connector is set up as Highwater wants a Debezium source:

* ``JsonConverter`` with schemas (a value's schema carries NUMERIC's scale and the semantic
  types), ``decimal.handling.mode=precise``;
* PostgreSQL: ``plugin.name=pgoutput`` (built into PostgreSQL), a slot and a publication of
  its own;
* MariaDB: the binlog read as a replica with a server id of its own, the schema history in a
  Kafka topic ``<prefix>.schema-history`` (what a production connector does; the DDL it holds
  lets a restarted connector read older binlog events with the columns they had);
* ``provide.transaction.metadata=true``: BEGIN/END events on ``<prefix>.transaction`` and a
  ``transaction`` block on every change, what Highwater's markers for Debezium are made of;
* the topics it creates get ``partitions`` partitions, but the transaction topic one:
  its order is the commit order, what Highwater's markers rely on;
* a heartbeat each second that writes a row of the database's ``highwater_heartbeat`` table
  (``heartbeat.action.query``, the table captured too): a transaction of its own, whose END
  lets the markers advance while the followed tables are quiet.

Ready when the worker's REST API says the connector and its task are RUNNING.
"""

from __future__ import annotations

import hashlib
import json
import logging
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pipeline.runtime.jars import broker_classpath, debezium_classpath
from schemas.errors import PlatformError

from . import mariadb, postgres
from .mariadb import MariaDBInfo
from .postgres import PostgresInfo
from .service import LocalService, free_port, kill

log = logging.getLogger(__name__)

_LOG4J2 = Path(__file__).resolve().parent.parent / "jvm" / "log4j2.properties"

Database = PostgresInfo | MariaDBInfo


class ConnectError(PlatformError):
    """Kafka Connect (or its Debezium connector) did not start or run."""


@dataclass(frozen=True)
class ConnectInfo:
    """Where a running worker listens and what it captures."""

    directory: str
    pid: int
    port: int
    topic_prefix: str
    connector: str = "highwater-pg"

    @property
    def url(self) -> str:
        """The worker's REST API."""
        return f"http://127.0.0.1:{self.port}"

    def topic(self, table: str) -> str:
        """The change topic of ``schema.table``."""
        return f"{self.topic_prefix}.{table}"

    @property
    def transaction_topic(self) -> str:
        """The transaction metadata topic (BEGIN/END events)."""
        return f"{self.topic_prefix}.transaction"

    def sources(self, tables: list[str]) -> list[dict[str, str]]:
        """The ``sources`` of a changefeed over the captured ``tables`` (``schema.table``)."""
        return [
            {
                "topic": self.topic(table),
                "table": table.rpartition(".")[2],
                "format": "debezium",
                "transactions": self.transaction_topic,
            }
            for table in tables
        ]


def connector_config(
    database: Database, tables: list[str], topic_prefix: str, partitions: int, bootstrap: str
) -> dict[str, str]:
    """The Debezium connector's settings for ``database`` (see the module's description)."""
    if isinstance(database, MariaDBInfo):
        own = _mariadb(database, tables, topic_prefix, bootstrap)
    else:
        own = _postgres(database, tables, topic_prefix)
    return {
        **own,
        "tasks.max": "1",
        "topic.prefix": topic_prefix,
        "provide.transaction.metadata": "true",
        "decimal.handling.mode": "precise",
        "snapshot.mode": "initial",
        "topic.creation.default.partitions": str(partitions),
        # -1: the brokers' default.replication.factor (3 on the local cluster, 1 on one broker)
        "topic.creation.default.replication.factor": "-1",
        # the transaction topic on one partition: its order is the commit order
        "topic.creation.groups": "transactions",
        "topic.creation.transactions.include": f"{topic_prefix}.transaction",
        "topic.creation.transactions.partitions": "1",
        "topic.creation.transactions.replication.factor": "-1",
        "heartbeat.interval.ms": "1000",
    }


def _postgres(database: PostgresInfo, tables: list[str], topic_prefix: str) -> dict[str, str]:
    # PostgreSQL names: lowercase, digits and underscores, at most 63 characters
    slot = "hw_" + hashlib.sha256(topic_prefix.encode()).hexdigest()[:16]
    return {
        "name": "highwater-pg",
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "database.hostname": "127.0.0.1",
        "database.port": str(database.port),
        "database.user": postgres.USER,
        "database.password": "",
        "database.dbname": postgres.DATABASE,
        "table.include.list": ",".join([*tables, postgres.HEARTBEAT]),
        "plugin.name": "pgoutput",
        "slot.name": f"{slot}_slot",
        "publication.name": f"{slot}_publication",
        "publication.autocreate.mode": "filtered",
        "heartbeat.action.query": postgres.HEARTBEAT_QUERY,
    }


def _mariadb(
    database: MariaDBInfo, tables: list[str], topic_prefix: str, bootstrap: str
) -> dict[str, str]:
    # the connector reads the binlog as a replica: its id differs from every server's (1)
    server_id = 10_000 + int(hashlib.sha256(topic_prefix.encode()).hexdigest()[:6], 16) % 50_000
    return {
        "name": "highwater-mariadb",
        "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
        "database.hostname": "127.0.0.1",
        "database.port": str(database.port),
        "database.user": mariadb.USER,
        "database.password": mariadb.PASSWORD,
        "database.server.id": str(server_id),
        "database.include.list": mariadb.DATABASE,
        "table.include.list": ",".join([*tables, mariadb.HEARTBEAT]),
        "include.schema.changes": "false",
        "schema.history.internal.kafka.bootstrap.servers": bootstrap,
        "schema.history.internal.kafka.topic": f"{topic_prefix}.schema-history",
        "heartbeat.action.query": mariadb.HEARTBEAT_QUERY,
    }


def _get(url: str) -> object:
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - loopback URL
        return json.loads(response.read())


class EmbeddedConnect(LocalService[ConnectInfo]):
    """Kafka Connect standalone with the Debezium connector, in ``directory``."""

    name = "Kafka Connect"
    state_file_name = "connect.json"
    error = ConnectError
    info_type = ConnectInfo

    def start(self, timeout: float = 120.0) -> ConnectInfo:
        """Return the running worker (start one with :meth:`capture`)."""
        running = self.status()
        if running is None:
            raise ConnectError(f"no Kafka Connect runs in {self.directory}: use capture()")
        return running

    def capture(
        self,
        bootstrap: str,
        database: Database,
        tables: list[str],
        *,
        topic_prefix: str = "pg",
        partitions: int = 3,
        timeout: float = 180.0,
        flush_interval_ms: int = 1000,
    ) -> ConnectInfo:
        """Start the worker capturing ``tables`` (``schema.table``) once its task runs.

        Started again in the same directory (after :meth:`kill`), it resumes from the offsets
        it flushed last (every ``flush_interval_ms``): what it sent after them, it sends again.
        """
        running = self.status()
        if running is not None:
            return running
        self.directory.mkdir(parents=True, exist_ok=True)
        port = free_port()
        worker = {
            "bootstrap.servers": bootstrap,
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable": "true",
            "value.converter.schemas.enable": "true",
            "offset.storage.file.filename": str(self.directory / "offsets"),
            "offset.flush.interval.ms": str(flush_interval_ms),
            "listeners": f"http://127.0.0.1:{port}",
            "topic.creation.enable": "true",
        }
        connector = connector_config(database, tables, topic_prefix, partitions, bootstrap)
        _write(self.directory / "worker.properties", worker)
        _write(self.directory / "connector.properties", connector)
        classpath = f"{broker_classpath()}:{debezium_classpath()}"
        command = [
            "java",
            "-Xms64m",
            "-Xmx512m",
            f"-Dlog4j2.configurationFile={_LOG4J2}",
            f"-Dhighwater.log.file={self.directory / 'connect.log'}",
            "-cp",
            classpath,
            "org.apache.kafka.connect.cli.ConnectStandalone",
            str(self.directory / "worker.properties"),
            str(self.directory / "connector.properties"),
        ]
        process = self.spawn(command, "connect.out")
        info = ConnectInfo(str(self.directory), process.pid, port, topic_prefix, connector["name"])
        self.record(info)
        self.wait_ready(process, lambda: self._running(info), timeout)
        log.info("Kafka Connect capturing %s at %s (pid %s)", tables, info.url, info.pid)
        return info

    def kill(self) -> None:
        """SIGKILL the worker, as a crash or an evicted pod does (its offsets not flushed)."""
        info = self.status()
        if info is not None:
            kill([info.pid])

    def _running(self, info: ConnectInfo) -> bool:
        status = _get(f"{info.url}/connectors/{info.connector}/status")
        if not isinstance(status, dict):
            return False
        tasks = status.get("tasks") or []
        states = [status.get("connector", {}).get("state")] + [t.get("state") for t in tasks]
        if "FAILED" in states:
            trace = next((t.get("trace", "") for t in tasks if t.get("state") == "FAILED"), "")
            raise ConnectError(f"the Debezium connector failed: {str(trace)[:2000]}")
        return bool(tasks) and all(state == "RUNNING" for state in states)

    def log_files(self) -> list[str]:
        """The worker's console and log."""
        return ["connect.out", "connect.log"]


def _write(path: Path, settings: Mapping[str, str]) -> None:
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()), encoding="utf-8")
