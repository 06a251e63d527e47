"""The real upstream: PostgreSQL → Debezium on Kafka Connect → the broker, read by our decoder.

SQL drives a real PostgreSQL (``highwater dev postgres``); Debezium's PostgreSQL connector on
Kafka Connect standalone (``pipeline/dev/connect.py``) captures it: a snapshot of the rows
already there, then multi-statement transactions over two tables, two updates of one key in
one transaction, deletes, a column added with ``ALTER TABLE``, NUMERIC with many digits,
timestamps with time zones, text of any characters. Checked on what Debezium wrote: every
change decodes (``DebeziumAdapter``) and the state rebuilt from the change topics equals the
final ``SELECT`` of each table, value for value; the transaction topic has BEGIN and END with
the event counts; the versions of a key in one transaction keep their order in time.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.core.sources import DebeziumAdapter
from pipeline.dev.connect import EmbeddedConnect
from pipeline.dev.postgres import EmbeddedPostgres
from schemas.jsontext import Number
from tests.support.kafka import Message, consume_all

SETUP = """
CREATE TABLE orders (id int PRIMARY KEY, amount numeric(24,4), ratio numeric,
                     at timestamptz, note text);
CREATE TABLE customers (id bigint PRIMARY KEY, name text);
ALTER TABLE orders REPLICA IDENTITY FULL;
ALTER TABLE customers REPLICA IDENTITY FULL;
INSERT INTO orders VALUES (1, 1.5, 0.1, '2024-01-01 00:00:00+00', 'snapshot row');
INSERT INTO customers VALUES (10, 'Ada');
"""
CHANGES = """
BEGIN;
INSERT INTO orders VALUES
  (2, 12345678901234567890.1234, 123456789012345678901234567890.000000000001,
   '2024-02-29 23:59:59.999999+05:30', 'ü 𝄞 "quoted" \\ tab	end');
UPDATE orders SET amount = -0.0001 WHERE id = 2;
UPDATE orders SET note = 'second update, same transaction' WHERE id = 2;
INSERT INTO customers VALUES (11, 'Grace');
COMMIT;
BEGIN;
DELETE FROM orders WHERE id = 1;
UPDATE customers SET name = 'Ada L.' WHERE id = 10;
COMMIT;
ALTER TABLE orders ADD COLUMN region text;
INSERT INTO orders VALUES (3, 0, -1e-20, NULL, '', 'eu');
"""


@pytest.fixture
def folder() -> Iterator[Path]:
    """A folder the ``postgres`` user can reach (pytest's own are private to root)."""
    path = Path(tempfile.mkdtemp(prefix="highwater-dbz-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def wait_for(bootstrap: str, topic: str, count: int, timeout: float = 90) -> list[Message]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = consume_all(bootstrap, topic, timeout=10)
        except Exception:
            found = []
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(1)


def rebuilt(messages: list[Message]) -> dict[Any, dict[str, Any]]:
    """The table as the change topic says it is: every key's last image, deletes removed."""
    adapter, state = DebeziumAdapter(), {}
    for message in messages:
        change = adapter.decode(message.key, message.value)
        if change is None:
            continue  # the tombstone after a delete
        key = tuple(change.key)
        if change.after is None:
            state.pop(key, None)
        else:
            state[key] = change.after
    return state


def text(value: Any) -> str | None:
    """A decoded value as psql prints it (numbers by their digits)."""
    if value is None:
        return None
    return value.text if isinstance(value, Number) else str(value)


def test_postgres_changes_reach_kafka_through_debezium_and_decode_exactly(
    kafka_bootstrap: str, unique_name: Any, folder: Path
) -> None:
    postgres = EmbeddedPostgres(folder / "pg")
    connect = EmbeddedConnect(folder / "connect")
    prefix = unique_name("pg").replace("_", "-")
    try:
        pg = postgres.start()
        postgres.sql(SETUP)
        tables = ["public.orders", "public.customers"]
        info = connect.capture(kafka_bootstrap, pg, tables, topic_prefix=prefix, partitions=2)
        postgres.sql(CHANGES)
        orders = wait_for(kafka_bootstrap, info.topic("public.orders"), 7)
        customers = wait_for(kafka_bootstrap, info.topic("public.customers"), 3)
        transactions = wait_for(kafka_bootstrap, info.transaction_topic, 6)
    finally:
        connect.stop()
        postgres.start()  # (running: a no-op) for the final SELECTs below
    try:
        final_orders = postgres.sql(
            "SELECT id, amount, ratio, note, region FROM orders ORDER BY id"
        ).splitlines()
        final_customers = postgres.sql("SELECT id, name FROM customers ORDER BY id").splitlines()
    finally:
        postgres.stop()

    state = rebuilt(orders)
    got = [
        "|".join(text(row.get(c)) or "" for c in ("id", "amount", "ratio", "note", "region"))
        for _, row in sorted(state.items())
    ]
    assert got == final_orders
    people = rebuilt(customers)
    assert ["|".join(text(v) or "" for v in row.values()) for _, row in sorted(people.items())] == (
        final_customers
    )
    assert text(state[(2,)]["amount"]) == "-0.0001"  # numeric(24,4): its scale's digits
    assert text(state[(2,)]["ratio"]) == "123456789012345678901234567890.000000000001"

    # the snapshot's rows are reads; two updates of one key in one transaction keep their order
    adapter = DebeziumAdapter()
    changes = [adapter.decode(m.key, m.value) for m in orders if m.value is not None]
    assert next(c.op for c in changes if c.key == [1]) == "insert"
    in_one = [c for c in changes if c.key == [2]]
    assert [c.op for c in in_one] == ["insert", "update", "update"]
    assert in_one[0].ts < in_one[1].ts < in_one[2].ts
    assert len({c.ts.wall for c in in_one}) == 1  # one commit time, ordered within it

    # BEGIN and END for each transaction, END counting its events per table
    ends = [json.loads(m.value)["payload"] for m in transactions if m.value is not None]
    ends = [e for e in ends if e["status"] == "END"]
    first = next(e for e in ends if e["event_count"] == 4)
    assert {d["data_collection"]: d["event_count"] for d in first["data_collections"]} == {
        "public.orders": 3,
        "public.customers": 1,
    }
