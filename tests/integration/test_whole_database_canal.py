"""A whole TiCDC schema (`databases:` of format canal-json): a table created mid-run.

TiCDC and TiDB do not run here; a writer stands in for TiCDC's Kafka sink, in its order:
Canal-JSON events of schema ``shop`` (``tests/support/canal.py``), one topic a table by the
dispatcher expression ``<name>_{schema}_{table}``, a watermark to every partition of every
table topic every 0.2 s, and a new table's topic created (its ``CREATE TABLE`` written to
each partition) before any watermark passes its first change. The changefeed's only source is
the ``databases`` entry; while it runs, ``later`` is created and written with ``orders``.
Checked on what users read:

* the new table's output topic holds each of its rows once, at its own commit time (its
  topic's whole history, read from its start);
* no marker passes a row: on every output topic, a row whose commit time is at or below a
  marker written before the row (by the broker's clock) would be one;
* the run starts again with the table, 5 s after it met it: the window in which markers went
  on and would have passed the new rows were the frontier not held where the topics were
  last listed (a mutation that does not hold it fails here; its unit negative control:
  tests/unit/test_databases_canal.py).
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from pipeline.config import parse_config
from pipeline.core.coordinator.changefeed import run
from pipeline.core.ledger import Checkpoint
from pipeline.core.operators import StopRequest
from pipeline.core.sources.canal import tso_time
from sinks.admin import ensure_topics
from tests.support.canal import canal, tso, watermark
from tests.support.changefeed import every_batch
from tests.support.kafka import consume_all
from tests.support.process import run as run_job
from tests.support.process import run_killed_at, write_config
from tests.support.validator import hlc_order
from tests.support.whole_database import markers_never_passed_a_row, rows, slow_restart, wait_for

pytestmark = pytest.mark.integration


class TiCDC:
    """What TiCDC's Kafka sink writes for schema ``shop``, one topic a table, in its order."""

    def __init__(self, bootstrap: str, name: str) -> None:
        self.bootstrap, self.name = bootstrap, name
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        self.topics: dict[str, int] = {}  # table topic -> partitions
        self.ms = int(time.time() * 1000)
        self.lock = threading.Lock()

    def topic(self, table: str) -> str:
        return f"{self.name}_shop_{table}"

    def next_ts(self) -> int:
        self.ms = max(self.ms + 1, int(time.time() * 1000))
        return tso(self.ms)

    def create(self, table: str) -> None:
        """The topic first, its ``CREATE TABLE`` on every partition; watermarks after it."""
        with self.lock:
            topic = self.topic(table)
            ensure_topics({"bootstrap.servers": self.bootstrap}, {topic: 2})
            ts = self.next_ts()
            for p in range(2):
                ddl = canal("CREATE", ts, None, isDdl=True, table=table, sql="create table …")
                self.producer.produce(topic, ddl, partition=p)
            self.producer.flush(30)
            self.topics[topic] = 2

    def insert(self, table: str, row_id: int) -> int:
        """One row, committed now: its TSO."""
        with self.lock:
            ts = self.next_ts()
            row = {"id": str(row_id), "amount": f"{row_id}.5000000000", "note": f"n{row_id} ☃"}
            event = canal("INSERT", ts, [row], table=table)
            self.producer.produce(self.topic(table), event, key=str(row_id), partition=row_id % 2)
            self.producer.flush(30)
            return ts

    def watermark(self) -> None:
        """A watermark past every change written, to every partition of every table topic."""
        with self.lock:
            ts = self.next_ts()
            for topic, partitions in self.topics.items():
                for p in range(partitions):
                    self.producer.produce(topic, watermark(ts), partition=p)
            self.producer.flush(30)


def whole_schema(bootstrap: str, name: str) -> dict[str, Any]:
    """The tests' changefeed of TiCDC schema ``shop``: every record read, no initial scan."""
    return every_batch(
        bootstrap,
        f"{name}-cf",
        databases=[
            {"format": "canal-json", "topics": f"{name}_{{schema}}_{{table}}", "database": "shop"}
        ],
        cursor="0.0000000000",
        sink={"topic_prefix": f"{name}-cf.", "partitions": 2},
        spark={"trigger": {"processing_time": "300ms"}},
    )


def test_a_table_created_while_the_changefeed_runs_is_followed(
    kafka_bootstrap: str, spark: Any, caplog: Any, monkeypatch: Any
) -> None:
    """A new table's rows come once, at their times, with no marker before them.

    The harder way there: no record ever names the table in ``appeared`` (as if each run
    were killed between the listing that met it and its next record), and the changefeed
    has ``initial_scan: no``, so the next run knows the table is new only from the record's
    ``listed`` databases (``start.created_since``). Without that it would start the table
    now, and its first rows would be lost (the negative control, run by hand: 0 of its 3
    rows, docs/benchmarks.md).
    """
    name = f"ticdc{uuid.uuid4().hex[:8]}"
    ticdc = TiCDC(kafka_bootstrap, name)
    ticdc.create("orders")
    committed: dict[tuple[str, int], int] = {}  # (table, id) -> TSO
    for k in range(1, 4):
        committed["orders", k] = ticdc.insert("orders", k)
    ticdc.watermark()
    raw = whole_schema(kafka_bootstrap, name)
    config = parse_config(raw, env={})
    slow_restart(monkeypatch, 5.0)
    unnamed = Checkpoint.of  # every record as if the run was killed before naming the table
    monkeypatch.setattr(
        Checkpoint, "of", staticmethod(lambda *a, **k: unnamed(*a, **(k | {"appeared": ()})))
    )
    caplog.set_level("INFO", logger="pipeline.core")
    stop, writing = StopRequest(), threading.Event()
    runner = threading.Thread(target=run, args=(config, spark, stop))

    def upstream() -> None:  # orders go on, watermarks every 0.2 s
        row_id = 100
        while not writing.is_set():
            row_id += 1
            committed["orders", row_id] = ticdc.insert("orders", row_id)
            ticdc.watermark()
            time.sleep(0.2)

    writer = threading.Thread(target=upstream)
    old, new = f"{name}-cf.orders", f"{name}-cf.later"
    try:
        runner.start()
        writer.start()
        wait_for("a marker", lambda: any(m.key is None for m in consume_all(kafka_bootstrap, old)))
        ticdc.create("later")
        for k in range(1, 4):
            committed["later", k] = ticdc.insert("later", k)
        wait_for("the new table's rows", lambda: len(rows(consume_all(kafka_bootstrap, new))) >= 3)
        wait_for("a marker past them", lambda: consume_all(kafka_bootstrap, new)[-1].key is None)
        assert runner.is_alive(), "the changefeed stopped"
    finally:
        writing.set()
        writer.join(30)
        stop.set()
        runner.join(180)

    later = rows(consume_all(kafka_bootstrap, new))
    assert [(hlc_order(u), (a or {})["id"]) for u, a in later] == [
        (hlc_order(str(tso_time(committed["later", k], "ts"))), k) for k in range(1, 4)
    ]
    assert "created since it started: read from the start" in caplog.text
    outputs = {t: consume_all(kafka_bootstrap, t) for t in (old, new)}
    ids = [(a or {})["id"] for _, a in rows(outputs[old])]
    assert len(ids) == len(set(ids))  # each row once
    assert {1, 2, 3, 101} <= set(ids)
    markers_never_passed_a_row(outputs)


@pytest.mark.soak
def test_a_run_killed_when_its_listing_met_a_table_loses_none_of_the_table(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The test above with a real SIGKILL where it simulates one (make test holds it there).

    ``highwater run`` is killed the moment a listing met the new table (crash point
    ``table_listed``, before any record names it), then runs again to an end time: with
    ``initial_scan: no`` the table's rows still come, once, at their times
    (``start.created_since`` finds it from the record's ``listed``).
    """
    name = f"ticdc{uuid.uuid4().hex[:8]}"
    ticdc = TiCDC(kafka_bootstrap, name)
    ticdc.create("orders")
    committed = {("orders", k): ticdc.insert("orders", k) for k in range(1, 4)}
    ticdc.watermark()
    raw = whole_schema(kafka_bootstrap, name)
    config_file = write_config(tmp_path / "changefeed.yaml", raw)
    log = tmp_path / "run.log"
    writing = threading.Event()
    old, new = f"{name}-cf.orders", f"{name}-cf.later"

    def upstream() -> None:  # orders go on; once run 1 sent a marker, the new table
        row_id, created = 100, False
        while not writing.is_set():
            row_id += 1
            committed["orders", row_id] = ticdc.insert("orders", row_id)
            ticdc.watermark()
            if not created and any(m.key is None for m in consume_all(kafka_bootstrap, old)):
                ticdc.create("later")
                for k in range(1, 4):
                    committed["later", k] = ticdc.insert("later", k)
                created = True
            time.sleep(0.2)

    writer = threading.Thread(target=upstream)
    writer.start()
    try:
        run_killed_at(config_file, log, "table_listed:1", timeout=240)
    finally:
        writing.set()
        writer.join(30)
    ticdc.watermark()
    end = ticdc.next_ts()
    ticdc.watermark()  # past the end time: the run ends there
    write_config(config_file, raw | {"end_time": str(tso_time(end, "ts"))})
    assert run_job(config_file, log, timeout=300) == 0, log.read_text(errors="replace")[-3000:]

    later = rows(consume_all(kafka_bootstrap, new))
    assert [(hlc_order(u), (a or {})["id"]) for u, a in later] == [
        (hlc_order(str(tso_time(committed["later", k], "ts"))), k) for k in range(1, 4)
    ]
    assert "created since it started: read from the start" in log.read_text(errors="replace")
    outputs = {t: consume_all(kafka_bootstrap, t) for t in (old, new)}
    markers_never_passed_a_row(outputs)
