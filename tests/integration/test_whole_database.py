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

import json
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import parse_config
from pipeline.core.coordinator import changefeed as coordinator
from pipeline.core.coordinator.changefeed import run
from pipeline.core.operators import StopRequest
from pipeline.dev.connect import EmbeddedConnect
from pipeline.dev.postgres import EmbeddedPostgres
from sinks.admin import cluster_metadata
from tests.support.kafka import Message, consume_all
from tests.support.validator import hlc_order

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


def wait_for(what: str, done: Any, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"waited {timeout:.0f} s for {what}"
        time.sleep(1.0)


def rows(messages: list[Message]) -> list[tuple[str, dict[str, Any] | None]]:
    out = []
    for m in messages:
        if m.key is not None and m.value is not None:
            value = json.loads(m.value)
            out.append((value["updated"], value["after"]))
    return sorted(out, key=lambda r: hlc_order(r[0]))


def markers_never_passed_a_row(outputs: dict[str, list[Message]]) -> None:
    """No row at or below a marker the brokers took before it, on any output topic."""
    markers = [
        (m.timestamp_ms, hlc_order(json.loads(m.value or b"")["resolved"]))
        for messages in outputs.values()
        for m in messages
        if m.key is None
    ]
    for topic, messages in outputs.items():
        for m in messages:
            if m.key is None:
                continue
            time_ = hlc_order(json.loads(m.value or b"")["updated"])
            passed = [r for at, r in markers if at < m.timestamp_ms and r >= time_]
            assert not passed, f"{topic}@{m.offset}: a marker at {passed[0]} came first"


def slow_restart(monkeypatch: Any, seconds: float) -> None:
    """The run ends ``seconds`` after it first meets the new table, not at once.

    Meanwhile its batches and markers go on: the window in which a marker could pass the new
    table's changes, were its transactions not held (the mutation that leaves the new table
    uncounted fails this test: its markers pass them, or its floor drops them).
    """
    first: list[float] = []
    real = coordinator.met_tables

    def later(config: Any, resolver: Any) -> set[str]:
        if not resolver.appeared():
            return set()
        first.append(first[0] if first else time.monotonic())
        return real(config, resolver) if time.monotonic() - first[0] >= seconds else set()

    monkeypatch.setattr(coordinator, "met_tables", later)


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
        raw = {
            "changefeed_id": f"{name}-cf",
            "kafka": {"bootstrap_servers": kafka_bootstrap},
            "databases": [
                {
                    "prefix": name,
                    "transactions": info.transaction_topic,
                    "exclude": ["public.highwater_heartbeat"],
                }
            ],
            "initial_scan": "no",
            "sink": {"topic_prefix": f"{name}-cf.", "partitions": 2},
            "encoder": {"updated": True},
            "resolved": {"interval": "0s"},
            "checkpoint": {"min_checkpoint_frequency": "0s"},
            "safepoints": {"enabled": False},
            "spark": {"trigger": {"processing_time": "500ms"}},
        }
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
    assert "table(s) public.later_items appeared in the database" in caplog.text
    assert "created since it started: read from the start" in caplog.text
    outputs = {t: consume_all(kafka_bootstrap, t) for t in [*old.values(), new]}
    assert [a for _, a in rows(outputs[old["orders"]])][-1] == {"id": 1, "note": "with an item"}
    markers_never_passed_a_row(outputs)
    topics = cluster_metadata({"bootstrap.servers": kafka_bootstrap}).topics
    assert f"{name}.public.highwater_heartbeat" in topics  # captured, and left out by exclude
    assert f"{name}-cf.highwater_heartbeat" not in topics
