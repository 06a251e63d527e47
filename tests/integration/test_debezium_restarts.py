"""Debezium's restarts: Kafka Connect SIGKILLed mid-stream, and the changefeed too.

A real PostgreSQL → Debezium (Kafka Connect standalone) capture of two tables while
multi-statement transactions are written (one key changed six times in a transaction, both
tables, inserts, deletes, NUMERIC, text of any characters). Meanwhile Connect is SIGKILLed
at random moments (three times; ``make soak``: ten) and started again: it resumes from its
last flushed offsets (flushed every 3 s), inside a transaction most of the time, and sends
again what followed them, with Debezium's ``total_order`` counted anew and that
transaction's BEGIN/END again. The changefeed (``highwater run``) is SIGKILLed while writing
a batch and after a few markers, and a drain ends it. Checked on the output topics,
independently of Highwater's own reading:

* per key, the versions first emitted are exactly the distinct changes Debezium wrote for it,
  in the order of their LSNs (``source.sequence``), each once: a re-sent change is never news;
* their times (``updated``) rise with them; after a marker no new row at or below it;
* the tables rebuilt from the output equal the final ``SELECT``, value for value;
* markers on every output partition, the last at or above the last transaction's commit time;
* the kills hurt: Debezium did send changes again, and a transaction's BEGIN again, and the
  changefeed dropped changes as re-sent.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import parse_config
from pipeline.dev.connect import EmbeddedConnect
from pipeline.dev.postgres import EmbeddedPostgres
from tests.support.changefeed import run_to_end
from tests.support.kafka import Message, consume_all
from tests.support.process import run_killed_at, write_config
from tests.support.validator import exact, hlc_order, order_and_resolved

pytestmark = pytest.mark.integration

SEED = random.randrange(2**32)
ORDERS, CUSTOMERS = 12, 6
CONNECT_KILLS = int(os.environ.get("HIGHWATER_CONNECT_KILLS", "3"))  # make soak: 10
TRANSACTIONS = 50 * CONNECT_KILLS  # written over about 20 s a kill
SETUP = f"""
CREATE TABLE orders (id int PRIMARY KEY, amount numeric(30,10), note text);
CREATE TABLE customers (id bigint PRIMARY KEY, name text);
ALTER TABLE orders REPLICA IDENTITY FULL;
ALTER TABLE customers REPLICA IDENTITY FULL;
INSERT INTO orders SELECT i, i * 1.0000000001, 'snapshot ' || i FROM generate_series(1, {ORDERS}) i;
INSERT INTO customers SELECT i, 'snapshot ' || i FROM generate_series(1, {CUSTOMERS}) i;
"""
LAST = "INSERT INTO customers VALUES (999999, 'the last transaction');"


def transaction(i: int, rng: random.Random) -> str:
    """One transaction: a key changed six times, both tables, an insert, maybe a delete."""
    a, b = rng.sample(range(1, ORDERS + 1), 2)
    lines = ["BEGIN;"]
    for step in range(6):
        lines.append(
            f"UPDATE orders SET amount = amount + 0.0000000001, note = 'tx {i} step {step} "
            f'ü 𝄞 "q"\' WHERE id = {a};'
        )
        lines.append(
            f"UPDATE customers SET name = 'tx {i} step {step} 👩‍💻' "
            f"WHERE id = {1 + (i + step) % CUSTOMERS};"
        )
    lines.append(f"UPDATE orders SET note = 'tx {i} other' WHERE id = {b};")
    lines.append(
        f"INSERT INTO orders VALUES ({1000 + i}, 12345678901234567890.0123456789, 'new {i}');"
    )
    if i % 3 == 2:
        lines.append(f"DELETE FROM orders WHERE id = {1000 + i - 1};")
    lines.append("COMMIT;")
    return "\n".join(lines)


def versions(messages: list[Message], column: str) -> dict[str, list[Any]]:
    """Per key, Debezium's distinct changes in LSN order: the column's text (None: deleted).

    Read from the raw JSON, not with Highwater's adapter: each change once by its LSN, the
    snapshot's reads first.
    """
    changes: dict[tuple[str, tuple[int, int]], Any] = {}
    for m in messages:
        if m.value is None:
            continue  # a tombstone
        payload = json.loads(m.value)["payload"]
        source = payload["source"]
        key = json.dumps(list(json.loads(m.key)["payload"].values()))
        if payload["op"] == "r":
            place = (-1, -1)
        else:
            last, lsn = json.loads(source["sequence"])
            place = (int(last or 0), int(lsn))
        after = payload["after"]
        changes[(key, place)] = None if after is None else after[column]
    out: dict[str, list[Any]] = {}
    for (key, _), value in sorted(changes.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        out.setdefault(key, []).append(value)
    return out


def sent_again(messages: list[Message]) -> int:
    """Changes Debezium wrote more than once (the same LSN of the same key)."""
    seen: set[tuple[bytes, str]] = set()
    again = 0
    for m in messages:
        if m.value is None:
            continue
        source = json.loads(m.value)["payload"]["source"]
        place = (m.key, source.get("sequence") or "")
        again += place in seen and json.loads(m.value)["payload"]["op"] != "r"
        seen.add(place)
    return again


class Chaos:
    """The writer, and the changefeed's runs killed, each in a thread of its own.

    Connect is killed and started again from the test's own thread: its JVM dies with the
    thread that started it (``PR_SET_PDEATHSIG``).
    """

    def __init__(self, postgres: EmbeddedPostgres, rng: random.Random) -> None:
        self.postgres, self.rng = postgres, rng
        self.errors: list[BaseException] = []
        self.logs: list[str] = []

    def write(self) -> None:
        """The transactions, three at a time, for about a minute."""
        try:
            for first in range(0, TRANSACTIONS, 3):
                self.postgres.sql(
                    "\n".join(transaction(i, self.rng) for i in range(first, first + 3))
                )
                time.sleep(1.0)
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)

    def kill_changefeed(self, config_file: Path, log_file: Path) -> None:
        """``highwater run`` SIGKILLed while writing a batch, then after a few markers.

        (Markers go on while the writer is done: the heartbeat's transactions.)
        """
        try:
            for crash in (
                f"during_write:{self.rng.randint(2, 4)}",
                f"after_marker:{self.rng.randint(5, 15)}",
            ):
                self.logs.append(run_killed_at(config_file, log_file, crash, 240))
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)


def test_connect_and_the_changefeed_killed_mid_transaction_lose_nothing_and_send_no_news_twice(
    kafka_bootstrap: str, spark: Any, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    folder = Path(tempfile.mkdtemp(prefix="highwater-dbz-restarts-"))
    folder.chmod(0o755)  # the postgres user reaches it
    postgres = EmbeddedPostgres(folder / "pg")
    connect = EmbeddedConnect(folder / "connect")
    name = f"dbzr-{uuid.uuid4().hex[:8]}"
    changefeed_id = f"{name}.cf"
    try:
        pg = postgres.start()
        postgres.sql(SETUP)
        tables = ["public.orders", "public.customers"]

        def capture() -> Any:
            return connect.capture(
                kafka_bootstrap, pg, tables, topic_prefix=name, partitions=2, flush_interval_ms=3000
            )

        def restart() -> None:
            connect.kill()  # SIGKILL: what it sent after its last flush is sent again
            capture()

        info = capture()
        orders, customers = info.topic("public.orders"), info.topic("public.customers")
        raw = {
            "changefeed_id": changefeed_id,
            "kafka": {"bootstrap_servers": kafka_bootstrap},
            "sources": info.sources(tables),
            "initial_scan": "no",
            "sink": {"topic_prefix": f"{changefeed_id}.", "partitions": 3},
            "encoder": {"updated": True},
            "resolved": {"interval": "0s"},
            "checkpoint": {"min_checkpoint_frequency": "0s"},
            "safepoints": {"enabled": False},
            "spark": {"trigger": {"processing_time": "1s"}},
        }
        config_file = write_config(tmp_path / "cf.yaml", raw)
        chaos = Chaos(postgres, random.Random(rng.random()))
        writer = threading.Thread(target=chaos.write)
        runs = threading.Thread(
            target=chaos.kill_changefeed, args=(config_file, tmp_path / "run.log")
        )
        writer.start()
        runs.start()
        for _ in range(CONNECT_KILLS):  # Connect SIGKILLed at random moments while writing
            time.sleep(rng.uniform(5, 12))
            restart()
        writer.join(300)
        runs.join(600)
        assert not chaos.errors, chaos.errors
        postgres.sql(LAST)
        deadline = time.monotonic() + 120
        while not any(
            b"the last transaction" in (m.value or b"")
            for m in consume_all(kafka_bootstrap, customers)
        ):
            assert time.monotonic() < deadline, "Debezium never sent the last transaction"
            time.sleep(1)
        time.sleep(3)  # its END, and a heartbeat's transaction after it
        drain = parse_config({**raw, "spark": {"trigger": {"available_now": True}}}, env={})
        drained = run_to_end(drain, spark)
        final = {
            "orders": postgres.sql("SELECT id, amount, note FROM orders ORDER BY id"),
            "customers": postgres.sql("SELECT id, name FROM customers ORDER BY id"),
        }
        written = {t: consume_all(kafka_bootstrap, t) for t in (orders, customers)}
        transactions = consume_all(kafka_bootstrap, info.transaction_topic)
    except BaseException:
        print(f"Kafka Connect's log:\n{connect.tail(60)}")
        raise
    finally:
        connect.stop()
        postgres.stop()
    shutil.rmtree(folder, ignore_errors=True)

    # the kills hurt: Debezium sent changes again, a transaction's BEGIN again, and the
    # changefeed dropped changes as re-sent
    again = sum(sent_again(messages) for messages in written.values())
    events = [json.loads(m.value)["payload"] for m in transactions if m.value is not None]
    begins = [e["id"].split(":")[0] for e in events if e["status"] == "BEGIN"]
    begun_again = len(begins) - len(set(begins))
    resent = drained.stats.resent + sum(
        int(n) for log in chaos.logs for n in re.findall(r"(\d+) re-sent dropped", log)
    )
    print(
        f"seed {SEED}: Debezium sent {again} changes again, {begun_again} BEGINs again; "
        f"the changefeed dropped {resent} re-sent"
    )
    assert again > 0, f"seed {SEED}: no Connect kill made Debezium send a change again"
    assert begun_again > 0, f"seed {SEED}: no Connect kill landed inside a transaction"

    # the last transaction of the followed tables (the heartbeat's go on after the drain)
    ours = [
        e
        for e in events
        if e["status"] == "END"
        and any(
            d["data_collection"] in ("public.orders", "public.customers")
            for d in e["data_collections"]
        )
    ]
    last_commit = max(e["ts_ms"] for e in ours) * 1_000_000
    columns = {"orders": ("id", "amount", "note"), "customers": ("id", "name")}
    for table, topic, column in (("orders", orders, "note"), ("customers", customers, "name")):
        output = consume_all(kafka_bootstrap, f"{changefeed_id}.{table}")
        rows = [m for m in output if m.key is not None]
        # per key, the first emissions are Debezium's distinct changes in LSN order, once each
        first: dict[str, list[tuple[tuple[int, int], Any]]] = {}  # key: [(time, after)]
        shown: set[tuple[bytes, str]] = set()
        for m in rows:
            body = exact(m.value)
            if (m.key, body["updated"]) in shown:
                continue  # a replay of the changefeed's own (at least once)
            shown.add((m.key, body["updated"]))
            first.setdefault(m.key.decode(), []).append((hlc_order(body["updated"]), body["after"]))
        want = versions(written[topic], column)
        got_versions = {k: [a and a[column] for _, a in vs] for k, vs in first.items()}
        assert got_versions == want, table
        # per key the first emissions rise in time; after a marker no new row at or below it
        assert order_and_resolved(output) == {}, table
        markers = [m for m in output if m.key is None]
        assert {m.partition for m in markers} == {0, 1, 2}, table
        top = max(hlc_order(json.loads(m.value)["resolved"]) for m in markers)
        assert top[0] >= last_commit, f"{table}: the last marker {top} below the last commit"
        # the table the output rebuilds is the final SELECT, value for value (number texts too)
        state = [vs[-1][1] for vs in first.values() if vs[-1][1] is not None]
        got = ["|".join(_text(after[c]) for c in columns[table]) for after in state]
        assert sorted(got) == sorted(final[table].splitlines()), table

    assert resent > 0, "the changefeed dropped no change as re-sent"


def _text(value: Any) -> str:
    """An exactly-read output value as psql prints it (a number by its digits)."""
    return value[1] if isinstance(value, tuple) else str(value)
