"""Kafka Connect standalone running a Debezium connector: the Debezium upstream.

The connector is Debezium's PostgreSQL one over an embedded PostgreSQL (``postgres.py``) or
its MariaDB one over an embedded MariaDB (``mariadb.py``), whichever the database passed to
:meth:`EmbeddedConnect.capture` is.

A :class:`~pipeline.dev.service.LocalService`: the directory holds the worker's and the
connector's properties, the worker's offsets file and its log. Connect comes with the broker
jars, the connector with the ``debezium`` jar set (``pipeline/jvm/debezium/pom.xml``); both
go on one classpath. The connector is set up as Highwater wants a Debezium source:

* ``JsonConverter`` with schemas (a value's schema carries NUMERIC's scale and the semantic
  types), ``decimal.handling.mode=precise``; or, given a schema registry, Apicurio's
  ``AvroConverter`` for keys and values (the transaction topic's too), writing Confluent's wire
  format (byte 0, the schema's 4-byte id, Avro binary) and registering each topic's schemas in
  that registry (:func:`avro_converters`);
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
from typing import Any

from pipeline.runtime.jars import broker_classpath, debezium_classpath
from schemas.errors import PlatformError

from . import mariadb, postgres
from .mariadb import MariaDBInfo
from .postgres import PostgresInfo
from .service import LocalService, free_port, kill

log = logging.getLogger(__name__)

AVRO_CONVERTER = "io.apicurio.registry.utils.converter.AvroConverter"
_CCOMPAT, _NATIVE = "/apis/ccompat/v7", "/apis/registry/v3"
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
    # the registry's Confluent-compatible URL when the topics are in Avro, else None (JSON)
    schema_registry: str | None = None

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

    def sources(self, tables: list[str]) -> list[dict[str, Any]]:
        """The ``sources`` of a changefeed over the captured ``tables`` (``schema.table``).

        In Avro, each reads its records' schemas through the registry.
        """
        registry = (
            {"schema_registry": {"url": self.schema_registry}} if self.schema_registry else {}
        )
        return [
            {
                "topic": self.topic(table),
                "table": table.rpartition(".")[2],
                "format": "debezium",
                "transactions": self.transaction_topic,
                **registry,
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


def avro_converters(registry: str) -> dict[str, str]:
    """The worker's settings for Apicurio's ``AvroConverter`` against ``registry``.

    ``registry``: the registry's Confluent-compatible URL (``…/apis/ccompat/v7``, what a
    source's ``schema_registry.url`` takes); the converter speaks Apicurio's own API beside it
    (``…/apis/registry/v3``). Each record carries its schema's id in the payload as
    Confluent's wire format (byte 0, 4-byte big-endian id, not in headers): the id is the
    schema's content id, the one the Confluent-compatible API serves at
    ``/schemas/ids/<id>``. Schemas are registered on first use, as artifacts named by topic
    (``<topic>-key``, ``<topic>-value``, Confluent's subjects).
    """
    base = registry.rstrip("/")
    base = base.removesuffix(_CCOMPAT) + _NATIVE if base.endswith(_CCOMPAT) else base
    own = {
        "apicurio.registry.url": base,
        "apicurio.registry.auto-register": "true",
        "apicurio.registry.headers.enabled": "false",  # the id in the payload
        "apicurio.registry.id-handler": "io.apicurio.registry.serde.Default4ByteIdHandler",
        "apicurio.registry.use-id": "contentId",  # what the ccompat API calls a schema id
        # Apicurio's default, kept: the envelope's records (Value, Source, block, …) are
        # registered as schemas of their own that the envelope references by name, which the
        # reader writes in (wire.py's whole_schema); ``dereference-schema=true`` would register
        # each whole, as Confluent's AvroConverter does
    }
    return {
        f"{side}.converter{suffix}": value
        for side in ("key", "value")
        for suffix, value in (("", AVRO_CONVERTER), *((f".{k}", v) for k, v in own.items()))
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
        schema_registry: str | None = None,
        publication: str = "filtered",
    ) -> ConnectInfo:
        """Start the worker capturing ``tables`` (``schema.table``) once its task runs.

        Started again in the same directory (after :meth:`kill`), it resumes from the offsets
        it flushed last (every ``flush_interval_ms``): what it sent after them, it sends again.
        In JSON, unless ``schema_registry`` (a registry's Confluent-compatible URL) is given:
        then in Avro, the schemas in that registry (:func:`avro_converters`). ``tables`` are
        Debezium's patterns; ``publication`` PostgreSQL's ``all_tables`` captures the tables
        they match created later too (``filtered``: those there at the start).
        """
        running = self.status()
        if running is not None:
            return running
        self.directory.mkdir(parents=True, exist_ok=True)
        port = free_port()
        converters = (
            avro_converters(schema_registry)
            if schema_registry
            else {
                "key.converter": "org.apache.kafka.connect.json.JsonConverter",
                "value.converter": "org.apache.kafka.connect.json.JsonConverter",
                "key.converter.schemas.enable": "true",
                "value.converter.schemas.enable": "true",
            }
        )
        worker = {
            "bootstrap.servers": bootstrap,
            **converters,
            "offset.storage.file.filename": str(self.directory / "offsets"),
            "offset.flush.interval.ms": str(flush_interval_ms),
            "listeners": f"http://127.0.0.1:{port}",
            "topic.creation.enable": "true",
        }
        connector = connector_config(database, tables, topic_prefix, partitions, bootstrap)
        if isinstance(database, PostgresInfo):
            connector["publication.autocreate.mode"] = publication
        if schema_registry:
            # Avro names are letters, digits and underscores: a topic prefix's "-" in a schema's
            # namespace (``<prefix>.public.orders.Value``) or a column's name would make the
            # schema one the registry stores but cannot serve back through its ccompat API
            connector["schema.name.adjustment.mode"] = "avro"
            connector["field.name.adjustment.mode"] = "avro"
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
        info = ConnectInfo(
            str(self.directory),
            process.pid,
            port,
            topic_prefix,
            connector["name"],
            schema_registry.rstrip("/") if schema_registry else None,
        )
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
