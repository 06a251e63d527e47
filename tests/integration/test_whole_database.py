"""A whole database (`databases:`) over a real PostgreSQL capture: a table created mid-run.

PostgreSQL with two tables, Debezium on Kafka Connect capturing every ``public`` table (a
publication for all tables, so one created later is captured too), a changefeed whose only
source is a ``databases`` entry (``exclude`` leaves the heartbeat table out), running. Then,
while it runs, ``CREATE TABLE later_items`` and transactions that change it and an old table
together. Checked on what users read:

* the new table's output topic holds each of its changes once, its values as PostgreSQL has
  them, at their own commit times (no snapshot of it: its topic is its whole history);
* no marker passes a change of it: on every output topic, a row whose commit time is at or
  below a marker written before the row (by the brokers' clock) would be one;
* the run says it started again with the table (10 s after it met it, so that its markers
  had time to pass the new changes, were they not held); the excluded table has no output
  topic.
(The rule's negative control: tests/unit/test_databases.py, the log without its watch.)
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import parse_config
from pipeline.core.coordinator.changefeed import run
from pipeline.core.operators import StopRequest
from pipeline.dev.connect import EmbeddedConnect
from pipeline.dev.postgres import EmbeddedPostgres
from sinks.admin import cluster_metadata
from tests.support.changefeed import every_batch
from tests.support.kafka import consume_all
from tests.support.whole_database import markers_never_passed_a_row, rows, slow_restart, wait_for

pytestmark = pytest.mark.integration

SETUP = """
CREATE TABLE orders (id int PRIMARY KEY, note text);
CREATE TABLE customers (id int PRIMARY KEY, name text);
INSERT INTO orders VALUES (1, 'first'), (2, 'second');
INSERT INTO customers VALUES (1, 'ü 𝄞');
"""
LATER = """
CREATE TABLE later_items (id bigint PRIMARY KEY, amount numeric(12,4), label text);
BEGIN;
INSERT INTO later_items VALUES (9223372036854775807, 1.5000, 'one "q"');
UPDATE orders SET note = 'with an item' WHERE id = 1;
COMMIT;
BEGIN;
INSERT INTO later_items VALUES (2, -0.0001, NULL);
UPDATE later_items SET label = 'changed ☃' WHERE id = 9223372036854775807;
INSERT INTO customers VALUES (2, 'later');
COMMIT;
DELETE FROM later_items WHERE id = 2;
"""


def test_a_table_created_while_the_changefeed_runs_is_followed(
    kafka_bootstrap: str, spark: Any, caplog: Any, monkeypatch: Any
) -> None:
    folder = Path(tempfile.mkdtemp(prefix="highwater-database-"))
    folder.chmod(0o755)  # the postgres user reaches it
    postgres, connect = EmbeddedPostgres(folder / "pg"), EmbeddedConnect(folder / "connect")
    name = f"db-{uuid.uuid4().hex[:8]}"
    stop = StopRequest()
    runner: threading.Thread | None = None
    try:
        database = postgres.start()
        postgres.sql(SETUP)
        info = connect.capture(
            kafka_bootstrap,
            database,
            ["public.*"],  # every public table, and those created later
            topic_prefix=name,
            partitions=2,
            publication="all_tables",
        )
        wait_for(
            "the snapshot", lambda: len(consume_all(kafka_bootstrap, f"{name}.public.orders")) >= 2
        )
        raw = every_batch(
            kafka_bootstrap,
            f"{name}-cf",
            databases=[
                {
                    "prefix": name,
                    "transactions": info.transaction_topic,
                    "exclude": ["public.highwater_heartbeat"],
                }
            ],
            sink={"topic_prefix": f"{name}-cf.", "partitions": 2},
            spark={"trigger": {"processing_time": "500ms"}},
        )
        config = parse_config(raw, env={})
        slow_restart(monkeypatch, 10.0)
        caplog.set_level("INFO", logger="pipeline.core.coordinator")
        runner = threading.Thread(target=run, args=(config, spark, stop))
        runner.start()
        old = {t: f"{name}-cf.{t}" for t in ("orders", "customers")}
        wait_for(
            "the old tables' rows",
            lambda: len(rows(consume_all(kafka_bootstrap, old["orders"]))) >= 2,
        )

        postgres.sql(LATER)
        new = f"{name}-cf.later_items"

        def followed() -> bool:
            return len(rows(consume_all(kafka_bootstrap, new))) >= 4

        wait_for("the new table's rows", followed, timeout=180)
        wait_for(
            "a marker past the last commit",
            lambda: any(m.key is None for m in consume_all(kafka_bootstrap, new)),
        )
        assert runner.is_alive(), "the changefeed stopped"
    finally:
        stop.set()
        if runner is not None:
            runner.join(180)
        connect.stop()
        postgres.stop()
        shutil.rmtree(folder, ignore_errors=True)

    later = rows(consume_all(kafka_bootstrap, new))
    assert [after for _, after in later] == [
        {"id": 9223372036854775807, "amount": 1.5, "label": 'one "q"'},
        {"id": 2, "amount": -0.0001, "label": None},
        {"id": 9223372036854775807, "amount": 1.5, "label": "changed ☃"},
        None,
    ]
    assert f"table(s) of {name}.public.later_items appeared in the database" in caplog.text
    assert "created since it started: read from the start" in caplog.text
    outputs = {t: consume_all(kafka_bootstrap, t) for t in [*old.values(), new]}
    assert [a for _, a in rows(outputs[old["orders"]])][-1] == {"id": 1, "note": "with an item"}
    markers_never_passed_a_row(outputs)
    topics = cluster_metadata({"bootstrap.servers": kafka_bootstrap}).topics
    assert f"{name}.public.highwater_heartbeat" in topics  # captured, and left out by exclude
    assert f"{name}-cf.highwater_heartbeat" not in topics
