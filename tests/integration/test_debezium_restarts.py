"""Debezium's restarts on PostgreSQL: Kafka Connect SIGKILLed mid-stream, and the changefeed too.

A real PostgreSQL → Debezium (Kafka Connect standalone) capture of two tables while
multi-statement transactions are written (one key changed six times in a transaction, both
tables, inserts, deletes, NUMERIC, text of any characters). Connect is SIGKILLed at random
moments (three times; ``make soak``: ten) and started again: it resumes from its last
flushed offsets (flushed every 3 s), inside a transaction most of the time, and sends again
what followed them, with Debezium's ``total_order`` counted anew and that transaction's
BEGIN/END again. The changefeed is SIGKILLed too, and a drain ends it. What the output must
show is ``tests/support/debezium_chaos.py``'s: per key Debezium's distinct changes in LSN
order (``source.sequence``), each once; times rising; no row at or below a marker after it;
the final ``SELECT`` rebuilt value for value; the last marker at or above the last commit.

Then the chain goes on to Iceberg (``tests/support/debezium_iceberg.py``): the output applied
by ``highwater apply`` to the embedded catalog, its tables made from the schemas derived from
Debezium's, the applier SIGKILLed between two tables' commits and at random moments: every
window once in every table, every complete cut the output at its R, the last the final SELECT.
"""

from __future__ import annotations

import json
import random
import tempfile
from pathlib import Path
from typing import Any

import pytest

from pipeline.dev.postgres import EmbeddedPostgres
from tests.support import debezium_chaos, debezium_iceberg
from tests.support.debezium_chaos import Upstream

pytestmark = pytest.mark.integration

ORDERS, CUSTOMERS = 12, 6
BULK = 100_001  # 5,000 more rows: the initial snapshot lasts long enough to be killed in
SETUP = f"""
CREATE TABLE orders (id int PRIMARY KEY, amount numeric(30,10), note text);
CREATE TABLE customers (id bigint PRIMARY KEY, name text);
ALTER TABLE orders REPLICA IDENTITY FULL;
ALTER TABLE customers REPLICA IDENTITY FULL;
INSERT INTO orders SELECT i, i * 1.0000000001, 'snapshot ' || i FROM generate_series(1, {ORDERS}) i;
INSERT INTO customers SELECT i, 'snapshot ' || i FROM generate_series(1, {CUSTOMERS}) i;
INSERT INTO orders SELECT i, i, 'bulk ' || i FROM generate_series({BULK}, {BULK + 4999}) i;
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


def lsn_place(source: dict[str, Any]) -> tuple[int, ...]:
    """A change's place in PostgreSQL's history: ``source.sequence`` (last commit, LSN)."""
    last, lsn = json.loads(source["sequence"])
    return (int(last or 0), int(lsn))


def as_psql(value: Any, _column: str) -> str:
    """An exactly-read output value as psql prints it (a number by its digits)."""
    return value[1] if isinstance(value, tuple) else str(value)


def test_connect_and_the_changefeed_killed_mid_transaction_lose_nothing_and_send_no_news_twice(
    kafka_bootstrap: str, spark: Any, tmp_path: Path
) -> None:
    folder = Path(tempfile.mkdtemp(prefix="highwater-pg-"))
    folder.chmod(0o755)  # the postgres user reaches it
    upstream = Upstream(
        server=EmbeddedPostgres(folder / "pg"),
        tables=["public.customers", "public.orders"],
        setup=SETUP,
        transaction=transaction,
        last=LAST,
        selects={
            "orders": ("SELECT id, amount, note FROM orders ORDER BY id", ("id", "amount", "note")),
            "customers": ("SELECT id, name FROM customers ORDER BY id", ("id", "name")),
        },
        watched={"orders": "note", "customers": "name"},
        place=lsn_place,
        bulk="public.orders",  # BULK's 5,000 rows
        text=as_psql,
        separator="|",
    )
    result = debezium_chaos.run(upstream, kafka_bootstrap, spark, tmp_path)
    debezium_chaos.check(upstream, result)
    debezium_chaos.negative_controls(upstream, result)
    debezium_iceberg.apply_and_check(upstream, result, kafka_bootstrap, tmp_path)
