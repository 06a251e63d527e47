"""The Debezium upstream as one piece, and the demo on it (``dev demo --source postgres|mariadb``).

:class:`DebeziumUpstream` is an embedded database, PostgreSQL (``postgres.py``) or MariaDB
(``mariadb.py``), and Kafka Connect with Debezium's connector for it capturing some of its
tables (``connect.py``), started and stopped together (``highwater dev debezium
start|stop|status [--database mariadb]``).

The demo: an ``orders`` table in the database with a few thousand rows; Debezium captures it
(its own snapshot, then the stream, transaction metadata on); a changefeed over its topics
(``format: debezium``, markers from the transaction topic) started with ``spark-submit``
through ``highwater run``; SQL transactions (inserts, updates of several rows, deletes) for
a while as it streams, with progress lines; a SIGTERM; then the output read back with the
Kafka console consumer, and the table's ``SELECT`` beside the state the output rebuilds.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import yaml
from confluent_kafka.admin import AdminClient

from pipeline.config import load_config
from pipeline.runtime import jars
from sinks.compacted import CompactedTopic

from .broker import EmbeddedKafka
from .connect import ConnectInfo, Database, EmbeddedConnect
from .demo import OutputWatch, _progress, _say, _show_output, _status, run_changefeed
from .mariadb import EmbeddedMariaDB
from .postgres import EmbeddedPostgres

DEMO_TABLES = {
    "postgres": """
DROP TABLE IF EXISTS orders;
CREATE TABLE orders (id bigint PRIMARY KEY, customer text NOT NULL, amount numeric(14,2),
                     status text, updated_at timestamptz DEFAULT now());
ALTER TABLE orders REPLICA IDENTITY FULL;
INSERT INTO orders (id, customer, amount, status)
  SELECT n, 'customer ' || (n % 97), round((n * 7.31)::numeric % 1000, 2), 'new'
  FROM generate_series(1, {rows}) AS n;
""",
    "mariadb": """
DROP TABLE IF EXISTS orders;
CREATE TABLE orders (id bigint PRIMARY KEY, customer varchar(100) NOT NULL,
                     amount decimal(14,2), status varchar(20),
                     updated_at datetime(6) DEFAULT NOW(6)) CHARACTER SET utf8mb4;
INSERT INTO orders (id, customer, amount, status)
  SELECT seq, CONCAT('customer ', seq % 97), ROUND(seq * 7.31 % 1000, 2), 'new'
  FROM seq_1_to_{rows};
""",
}
LIVE_TRANSACTION = """
BEGIN;
INSERT INTO orders (id, customer, amount, status)
  VALUES ({id}, 'customer {customer}', {amount}, 'new');
UPDATE orders SET status = 'paid', amount = amount + 0.01, updated_at = {now}
  WHERE id BETWEEN {low} AND {low} + 2;
DELETE FROM orders WHERE id = {doomed};
COMMIT;
"""
LIVE_SECONDS = 20.0
LIVE_TRANSACTIONS = 10.0  # per second


DATABASES = ("postgres", "mariadb")
NOW = {"postgres": "now()", "mariadb": "NOW(6)"}
CAPTURED = {"postgres": "public.orders", "mariadb": "highwater.orders"}


@dataclass
class DebeziumUpstream:
    """A database and Kafka Connect with Debezium, in ``directory/{<database>,connect}``.

    ``database``: ``postgres`` or ``mariadb``.
    """

    directory: Path
    database: str = "postgres"

    @property
    def server(self) -> EmbeddedPostgres | EmbeddedMariaDB:
        """The database."""
        if self.database == "mariadb":
            return EmbeddedMariaDB(self.directory / "mariadb", owned=False)
        return EmbeddedPostgres(self.directory / "postgres", owned=False)

    @property
    def connect(self) -> EmbeddedConnect:
        """The Connect worker running the connector."""
        return EmbeddedConnect(self.directory / "connect", owned=False)

    def start(
        self, bootstrap: str, tables: list[str], *, prefix: str = "pg", partitions: int = 3
    ) -> tuple[Database, ConnectInfo]:
        """The database (if not running), then Connect capturing ``tables`` (``schema.table``)."""
        database = self.server.start()
        return database, self.connect.capture(
            bootstrap, database, tables, topic_prefix=prefix, partitions=partitions
        )

    def stop(self) -> bool:
        """Stop both; True if either was running."""
        stopped = self.connect.stop()
        return self.server.stop() or stopped


def sources_yaml(info: ConnectInfo, tables: list[str]) -> str:
    """The ``sources`` section of a changefeed over the captured tables."""
    return yaml.safe_dump({"sources": info.sources(tables), "initial_scan": "no"}, sort_keys=False)


def run_debezium_demo(
    rows: int, state: Path, database: str = "postgres", live_seconds: float = LIVE_SECONDS
) -> int:
    """The demo on ``database`` and Debezium; returns the changefeed's exit code."""
    started = time.monotonic()
    for name, fetched in jars.fetch_all().items():
        _say(f"{name} jars {'fetched' if fetched else 'present'}")
    bootstrap = EmbeddedKafka(state / "kafka" / "demo", owned=False).start().bootstrap_servers
    _say(f"Kafka broker at {bootstrap}")
    upstream = DebeziumUpstream(state / "debezium" / "demo", database)
    upstream.connect.stop()  # a fresh capture: new topics, a new slot
    shutil.rmtree(upstream.directory / "connect", ignore_errors=True)
    server = upstream.server
    info_db = server.start()
    _say(f"{server.name} at {info_db.dsn}")
    if database == "postgres":
        server.sql(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
            "WHERE slot_name LIKE 'hw\\_%' AND NOT active"
        )
    server.sql(DEMO_TABLES[database].format(rows=rows))
    _say(f"table orders with {rows:,} rows; starting Debezium (Kafka Connect) on it")
    short = "pg" if database == "postgres" else "mdb"
    prefix = f"demo-{short}-{int(time.time())}"
    table = CAPTURED[database]
    _, info = upstream.start(bootstrap, [table], prefix=prefix)
    _say(
        f"Debezium captures {table} to {info.topic(table)}, "
        f"transactions to {info.transaction_topic}"
    )

    config_file = state / "demo" / f"{database}.yaml"
    config_file.parent.mkdir(parents=True, exist_ok=True)
    changefeed_id = f"demo-{short}-{prefix.rpartition('-')[2]}"
    config_file.write_text(
        yaml.safe_dump(
            {
                "changefeed_id": changefeed_id,
                "kafka": {"bootstrap_servers": bootstrap},
                "sink": {"topic_prefix": f"{changefeed_id}.", "partitions": 3},
                "encoder": {"updated": True, "diff": True},
                "resolved": {"interval": "1s"},
                "spark": {"trigger": {"processing_time": "1s"}},
                "safepoints": {"enabled": False},
            },
            sort_keys=False,
        )
        + sources_yaml(info, [table]),
        encoding="utf-8",
    )
    config = load_config(config_file)
    output = config.output_topic(config.sources[0])
    try:
        code = run_changefeed(
            config_file,
            state / "demo" / f"changefeed-{database}.log",
            dict(os.environ),
            lambda job: _live(
                server,
                bootstrap,
                output,
                config.jobs.topic,
                changefeed_id,
                job,
                rows,
                live_seconds,
            ),
        )
    finally:
        upstream.connect.stop()
    if code:
        return code
    _show_output(output, bootstrap, None)
    count = server.sql("SELECT count(*) FROM orders").strip()
    _say(f"rows in the table now (SELECT count): {count}")
    elapsed = time.monotonic() - started
    _say(f"done in {elapsed:.0f}s. The broker and {server.name} keep running; try:")
    print(f"    {'psql' if database == 'postgres' else 'mariadb'}: {info_db.dsn}")
    print(
        f"    highwater dev kafka-cli --name demo console-consumer --topic {output} "
        "--from-beginning --timeout-ms 5000 --property print.key=true"
    )
    print(
        f"    highwater dev debezium --name demo --database {database} stop; "
        "highwater dev kafka --name demo stop"
    )
    return 0


def _live(  # noqa: PLR0917 - the demo's parts
    server: EmbeddedPostgres | EmbeddedMariaDB,
    bootstrap: str,
    output: str,
    jobs_topic: str,
    changefeed_id: str,
    job: subprocess.Popen[bytes],
    rows: int,
    seconds: float,
) -> bool:
    """Debezium's snapshot through, then SQL while it streams; False: the job ended."""
    jobs = CompactedTopic({"bootstrap.servers": bootstrap}, jobs_topic)
    watch: OutputWatch | None = None
    try:
        deadline = time.monotonic() + 180
        while watch is None or watch.rows < rows:
            if job.poll() is not None or time.monotonic() > deadline:
                return False
            time.sleep(1)
            if watch is None:
                if not _exists(bootstrap, output):
                    continue  # the changefeed has not created its output topic yet
                watch = OutputWatch(bootstrap, output)
            watch.poll()
        _say(f"Debezium's snapshot through the changefeed: {watch.rows:,} rows on {output}")
        _say(f"SQL transactions for {seconds:.0f}s at {LIVE_TRANSACTIONS:.0f}/s while it streams:")
        writer = threading.Thread(target=_transactions, args=(server, rows, seconds), daemon=True)
        writer.start()
        while writer.is_alive() and job.poll() is None:
            time.sleep(3)
            watch.poll()
            _progress(watch, _status(jobs, changefeed_id), lag=True)
        writer.join()
        time.sleep(5)  # the last transactions' markers
        watch.poll()
        _progress(watch, _status(jobs, changefeed_id), lag=False)
        return job.poll() is None
    finally:
        if watch is not None:
            watch.close()
        jobs.close()


def _exists(bootstrap: str, topic: str) -> bool:
    found = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    metadata = found.topics.get(topic)
    return metadata is not None and metadata.error is None and bool(metadata.partitions)


def _transactions(server: EmbeddedPostgres | EmbeddedMariaDB, rows: int, seconds: float) -> None:
    """Transactions of a few statements each: new orders, updates of several, deletes."""
    rng, next_id = random.Random(7), rows + 1  # noqa: S311 - demo data, not secrets
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        batch = []
        for _ in range(int(LIVE_TRANSACTIONS)):
            low = rng.randint(1, rows)
            amount, doomed = rng.randint(1, 99999) / 100, rng.randint(1, rows)
            batch.append(
                LIVE_TRANSACTION.format(
                    id=next_id,
                    customer=next_id % 97,
                    amount=amount,
                    low=low,
                    doomed=doomed,
                    now=NOW["mariadb" if isinstance(server, EmbeddedMariaDB) else "postgres"],
                )
            )
            next_id += 1
        server.sql("\n".join(batch))
        time.sleep(1)
