"""A second real upstream: MariaDB → Debezium's MariaDB connector, killed, and the changefeed too.

Debian's MariaDB with its binlog (ROW, FULL images) captured by Debezium's MariaDB connector
on Kafka Connect, with transaction metadata; multi-statement transactions of DECIMAL(30,10),
DATETIME(6), JSON (nested, numbers of every form, any characters) and utf8mb4 text with
4-byte characters; a column added mid-stream (``ALTER TABLE … ADD COLUMN``, the later
transactions set it). Connect is SIGKILLed at random moments and started again (the binlog
read again from its last flushed offsets: transactions sent again, their BEGIN again), the
changefeed too, then a drain. The same end-to-end check as PostgreSQL's
(``tests/support/debezium_chaos.py``): per key the distinct changes in binlog order (file,
position, row), each once; times rising; no row at or below a marker after it; the final
``SELECT`` rebuilt value for value; the last marker at or above the last commit.

A binlog's event times are the statements' starts in whole seconds, so a transaction that
commits later may carry an earlier time than another's commit. Here another session commits
a row of ``events`` every 0.2 s while every ninth of the writer's transactions sleeps 1.2 s
between its statements: timed by their statements, its first changes would lie below a
marker the others' commits had already raised, and be dropped as duplicates. Highwater times
a binlog change by its transaction's END, so nothing is lost (mutation-checked: timed by
``source.ts_ms`` this test fails).
"""

from __future__ import annotations

import json
import random
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from pipeline.dev.mariadb import EmbeddedMariaDB
from tests.support import debezium_chaos
from tests.support.debezium_chaos import TRANSACTIONS, Upstream

pytestmark = pytest.mark.integration

ORDERS, CUSTOMERS = 12, 6
BULK = 100_001  # 5,000 more rows: the initial snapshot lasts long enough to be killed in
DOC = json.dumps(
    {"n": [0, -1.5, 1e-7, 12345678901234567890123], "deep": [[[{"é": "𝄞 👩‍💻"}]]], "t": True},
    ensure_ascii=False,
)
SETUP = f"""
CREATE TABLE orders (id int PRIMARY KEY, amount decimal(30,10), at datetime(6), doc json,
                     note text) CHARACTER SET utf8mb4;
CREATE TABLE customers (id bigint PRIMARY KEY, name varchar(200)) CHARACTER SET utf8mb4;
CREATE TABLE events (id int PRIMARY KEY, note text) CHARACTER SET utf8mb4;
INSERT INTO orders SELECT seq, seq * 1.0000000001, '2026-01-02 03:04:05.000001', '{DOC}',
  CONCAT('snapshot ', seq) FROM seq_1_to_{ORDERS};
INSERT INTO customers SELECT seq, CONCAT('snapshot ', seq) FROM seq_1_to_{CUSTOMERS};
INSERT INTO orders SELECT seq, seq, '2026-01-02 03:04:05', '{DOC}', CONCAT('bulk ', seq)
  FROM seq_{BULK}_to_{BULK + 4999};
"""
LAST = "INSERT INTO orders (id, note) VALUES (999999, 'the last transaction');"
ALTER_AT = TRANSACTIONS // 2  # the column is added before this transaction


def transaction(i: int, rng: random.Random) -> str:
    """One transaction: a key changed six times, both tables, an insert, maybe a delete."""
    a, b = rng.sample(range(1, ORDERS + 1), 2)
    vip = f", vip = {i % 2 == 0}" if i >= ALTER_AT else ""
    lines = ["ALTER TABLE orders ADD COLUMN vip boolean;"] if i == ALTER_AT else []
    lines.append("BEGIN;")
    for step in range(6):
        lines.append(
            f"UPDATE orders SET amount = amount - 0.0000000001, at = '2026-11-26 10:{i % 60:02d}:"
            f"{step:02d}.{i * 7 + step:06d}', note = 'tx {i} step {step} ü 𝄞 \"q\"'{vip} "
            f"WHERE id = {a};"
        )
        lines.append(
            f"UPDATE customers SET name = 'tx {i} step {step} 👩‍💻' "
            f"WHERE id = {1 + (i + step) % CUSTOMERS};"
        )
        if step == 1 and i % 9 == 4:
            lines.append("DO SLEEP(1.2);")  # others commit meanwhile, a second later
    doc = f'[{i}, {{"é": {i}.50}}]'
    lines.append(f"UPDATE orders SET note = 'tx {i} other', doc = '{doc}' WHERE id = {b};")
    lines.append(
        f"INSERT INTO orders (id, amount, at, doc, note) VALUES ({1000 + i}, "
        f"-12345678901234567890.0123456789, '2026-11-26 00:00:00', '{DOC}', 'new {i}');"
    )
    if i % 3 == 2:
        lines.append(f"DELETE FROM orders WHERE id = {1000 + i - 1};")
    lines.append("COMMIT;")
    return "\n".join(lines)


def event(n: int) -> str:
    """Another session's short transaction: a row of ``events``, new or changed."""
    return f"REPLACE INTO events VALUES ({n % 40}, 'event {n} 𝄞');"


def binlog_place(source: dict[str, Any]) -> tuple[int, ...]:
    """A change's place in the binlog: the file's number, the position, the row."""
    return (int(source["file"].rpartition(".")[2]), int(source["pos"]), int(source["row"]))


def as_mariadb(value: Any, column: str) -> str:
    """An output value (or a raw Debezium one) as the ``mariadb`` client prints it."""
    if value is None:
        return "NULL"  # also a column a version from before the ALTER does not have
    if isinstance(value, tuple):
        return str(value[1])  # an exactly-read number: its digits
    if isinstance(value, bool):
        return str(int(value))
    if column == "at":
        return datetime.fromisoformat(value).strftime("%Y-%m-%d %H:%M:%S.%f")
    return str(value)


def test_mariadb_through_debezium_with_restarts_loses_nothing_and_sends_no_news_twice(
    kafka_bootstrap: str, spark: Any, tmp_path: Path
) -> None:
    folder = Path(tempfile.mkdtemp(prefix="highwater-mariadb-"))
    folder.chmod(0o755)  # the mysql user reaches it
    columns = ("id", "amount", "at", "doc", "note", "vip")
    upstream = Upstream(
        server=EmbeddedMariaDB(folder / "mariadb"),
        tables=["highwater.orders", "highwater.customers", "highwater.events"],
        setup=SETUP,
        transaction=transaction,
        last=LAST,
        selects={
            "orders": (f"SELECT {', '.join(columns)} FROM orders ORDER BY id", columns),
            "customers": ("SELECT id, name FROM customers ORDER BY id", ("id", "name")),
            "events": ("SELECT id, note FROM events ORDER BY id", ("id", "note")),
        },
        watched={"orders": "note", "customers": "name", "events": "note"},
        place=binlog_place,
        bulk="highwater.orders",  # BULK's 5,000 rows
        text=as_mariadb,
        separator="\t",
        concurrent=event,
    )
    result = debezium_chaos.run(upstream, kafka_bootstrap, spark, tmp_path)
    debezium_chaos.check(upstream, result)
    debezium_chaos.negative_controls(upstream, result)
