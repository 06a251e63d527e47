"""The real upstream: PostgreSQL → Debezium on Kafka Connect → a Highwater changefeed.

SQL drives a real PostgreSQL (``highwater dev postgres``); Debezium's PostgreSQL connector on
Kafka Connect standalone (``pipeline/dev/connect.py``) captures it: a snapshot of the rows
already there, then multi-statement transactions over two tables, two updates of one key in
one transaction, deletes, a column added with ``ALTER TABLE``, NUMERIC with many digits,
timestamps with time zones, text of any characters. A changefeed over the Debezium topics
(markers from the transaction topic) runs until its first marker and is SIGKILLed; more SQL
follows, and a drain resumes it. Checked:

* on what Debezium wrote: every change decodes (``DebeziumAdapter``) exactly, the state it
  rebuilds equals the final ``SELECT``; the versions of a key in one transaction keep their
  order in time; END counts each transaction's events per table, at its commit time;
* on the changefeed's output: every change once or more, per-key order, markers on every
  partition of every output topic past the last change (Debezium's heartbeat writes a table
  of its own each second: its transactions move the markers on while the tables are quiet),
  no new row at or below a marker
  after it, and the state rebuilt from the output equals the final ``SELECT``, value for
  value; the checkpoint record holds the transaction log with nothing in flight.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from pipeline.cli import main as highwater
from pipeline.config import ChangefeedConfig, parse_config
from pipeline.core.ledger.checkpoint import ranges_to_numbers
from pipeline.core.sources import DebeziumAdapter
from pipeline.dev.connect import ConnectInfo, EmbeddedConnect
from pipeline.dev.demo import avro_messages
from pipeline.dev.postgres import EmbeddedPostgres
from schemas.hlc import Hlc
from schemas.jsontext import Number
from tests.support.changefeed import (
    changefeed_config,
    checkpoint_records,
    read_checkpoint,
    run_to_end,
)
from tests.support.kafka import Message, consume_all
from tests.support.process import run_killed_at, write_config
from tests.support.validator import exact, hlc_order, order_and_resolved

SETUP = """
CREATE TABLE orders (id int PRIMARY KEY, amount numeric(24,4), ratio numeric,
                     at timestamptz, note text);
CREATE TABLE customers (id bigint PRIMARY KEY, name text);
ALTER TABLE orders REPLICA IDENTITY FULL;
ALTER TABLE customers REPLICA IDENTITY FULL;
INSERT INTO orders VALUES (1, 1.5, 0.1, '2024-01-01 00:00:00+00', 'snapshot row');
INSERT INTO customers VALUES (10, 'Ada');
CREATE TABLE accounts (id int PRIMARY KEY, balance numeric(10,2), memo text);
ALTER TABLE accounts REPLICA IDENTITY FULL;
INSERT INTO accounts VALUES (1, 10.50, 'a'), (2, 20.00, 'b'), (3, 30.25, 'c');
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
UPDATE accounts SET balance = 11.50 WHERE id = 1;
ALTER TABLE accounts ADD COLUMN tier int DEFAULT 5;
UPDATE accounts SET memo = 'a2' WHERE id = 1;
INSERT INTO accounts VALUES (4, 40.00, 'd', 7);
"""


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


CUSTOMERS = {
    "type": "record",
    "name": "customers",
    "fields": [{"name": "id", "type": "long"}, {"name": "name", "type": ["null", "string"]}],
}
COLUMNS = {"orders": ["id", "amount", "ratio", "note", "region"], "customers": ["id", "name"]}
MORE = """
BEGIN;
UPDATE orders SET amount = amount + 1 WHERE id = 2;
INSERT INTO customers VALUES (12, 'Ω ☃ 👩‍💻 ''single'' "double"');
COMMIT;
BEGIN;
UPDATE customers SET name = 'first' WHERE id = 11;
UPDATE customers SET name = 'second' WHERE id = 11;
DELETE FROM orders WHERE id = 3;
COMMIT;
INSERT INTO orders VALUES (4, 99999999999999999999.9999, 1e-30,
                           '1999-12-31 23:59:59.5-08', E'tab\\there', 'us');
ALTER TABLE accounts ADD COLUMN vip boolean;
UPDATE accounts SET vip = true WHERE id = 2;
ALTER TABLE accounts DROP COLUMN memo;
UPDATE accounts SET balance = 22.00 WHERE id = 2;
DELETE FROM accounts WHERE id = 3;
ALTER TABLE accounts ALTER COLUMN balance TYPE numeric(12,4);
UPDATE accounts SET balance = 1.2345 WHERE id = 4;
"""


def wait_for_changes(bootstrap: str, topics: dict[str, int]) -> None:
    """Until Debezium wrote ``count`` records (tombstones too) to each topic."""
    for topic, count in topics.items():
        found = wait_for(bootstrap, topic, count)
        assert len(found) >= count, f"{topic}: {len(found)} of {count} records"


def timed_changes(messages: list[Message]) -> list[tuple[Any, Hlc]]:
    """Each Debezium change with the time the changefeed gives it (tombstones left out).

    A change's is Debezium's; a snapshot read's is just above the latest time its partition
    passed (the rule of docs/reference/source-formats.md: Debezium's ``ts_ms`` for a read is
    its table scan's start, not its snapshot's point), one logical tick per read, from zero
    here (no ``cursor``, the snapshot before any marker). Written out here as the docs say
    it, apart from ``batch/loop.py``'s.
    """
    adapter, passed, out = DebeziumAdapter(), dict[int, Hlc](), []
    for m in messages:
        change = adapter.decode(m.key, m.value)
        if change is None:
            continue
        at = passed.get(m.partition, Hlc(0)).next() if change.point is not None else change.ts
        passed[m.partition] = at
        out.append((change, at))
    return out


def first_emissions(rows: list[Message]) -> list[tuple[str, tuple[int, int], Any]]:
    """Each (key, updated) once, at its first emission, with its value."""
    seen: set[tuple[bytes, str]] = set()
    out = []
    for m in rows:
        body = exact(m.value)
        if (m.key, body["updated"]) in seen:
            continue
        seen.add((m.key, body["updated"]))
        out.append((m.key.decode(), hlc_order(body["updated"]), body.get("after")))
    return out


def as_text(value: Any) -> str:
    """An exactly-read output value as psql prints it."""
    if value is None:
        return ""
    if isinstance(value, tuple):  # ("n", digits)
        return value[1]
    return str(value)


@dataclass(frozen=True)
class Feed:
    """What the module's one upstream and its changefeed left: topics, rows, output."""

    info: ConnectInfo
    orders: str
    customers: str
    accounts: str  # its schema changes: two columns added, one dropped, a NUMERIC widened
    changefeed_id: str
    drain: ChangefeedConfig
    final: dict[str, str]  # each table's final SELECT
    written: dict[str, list[Message]]  # what Debezium wrote, per topic
    transactions: list[Message]


@pytest.fixture(scope="module")
def feed(
    kafka_bootstrap: str, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Feed]:
    """PostgreSQL and Debezium, SQL through them, a changefeed killed once and drained.

    One upstream for the module's tests (its start is the costly part).
    """
    folder = Path(tempfile.mkdtemp(prefix="highwater-dbz-"))
    folder.chmod(0o755)  # the postgres user reaches it (pytest's own folders are root's)
    logs = tmp_path_factory.mktemp("debezium")
    postgres = EmbeddedPostgres(folder / "pg")
    connect = EmbeddedConnect(folder / "connect")
    name = f"dbz-{uuid.uuid4().hex[:8]}"
    changefeed_id = f"{name}.cf"
    try:
        pg = postgres.start()
        postgres.sql(SETUP)
        tables = ["public.orders", "public.customers"]
        captured = [*tables, "public.accounts"]  # accounts: the schema changes' own tests
        info = connect.capture(kafka_bootstrap, pg, captured, topic_prefix=name, partitions=2)
        postgres.sql(CHANGES)
        orders, customers = info.topic("public.orders"), info.topic("public.customers")
        accounts = info.topic("public.accounts")
        wait_for_changes(kafka_bootstrap, {orders: 7, customers: 3, accounts: 6})
        raw = {
            "changefeed_id": changefeed_id,
            "kafka": {"bootstrap_servers": kafka_bootstrap},
            "sources": info.sources(tables),
            "initial_scan": "no",
            "sink": {"topic_prefix": f"{changefeed_id}.", "partitions": 3},
            "encoder": {"updated": True, "diff": True},
            "resolved": {"interval": "0s"},
            "checkpoint": {"min_checkpoint_frequency": "0s"},
            "safepoints": {"topic": f"{changefeed_id}.safepoints"},
            "spark": {"trigger": {"processing_time": "500ms"}},
        }
        config_file = write_config(logs / "cf.yaml", raw)
        # SIGKILLed once its first batch is committed, before its checkpoint: the run after
        # starts past it, its transactions counted again (TransactionFeed.recount)
        run_killed_at(config_file, logs / "run.log", "after_write:1")
        postgres.sql(MORE)
        wait_for_changes(kafka_bootstrap, {orders: 11, customers: 6, accounts: 11})
        time.sleep(2)  # the transaction topic's last END
        drain = parse_config({**raw, "spark": {"trigger": {"available_now": True}}}, env={})
        run_to_end(drain, spark)
        final = {
            "orders": postgres.sql(
                "SELECT id, amount, ratio, note, region FROM orders ORDER BY id"
            ),
            "customers": postgres.sql("SELECT id, name FROM customers ORDER BY id"),
            "accounts": postgres.sql("SELECT id, balance, tier, vip FROM accounts ORDER BY id"),
        }
        written = {t: consume_all(kafka_bootstrap, t) for t in (orders, customers, accounts)}
        transactions = consume_all(kafka_bootstrap, info.transaction_topic)
    finally:
        connect.stop()
        postgres.stop()
    yield Feed(
        info, orders, customers, accounts, changefeed_id, drain, final, written, transactions
    )
    shutil.rmtree(folder, ignore_errors=True)


def output_state(emitted: list[tuple[str, tuple[int, int], Any]]) -> dict[str, Any]:
    """The table the output rebuilds: every key's last image (by time), deletes removed."""
    state: dict[str, Any] = {}
    for key, _, after in sorted(emitted, key=lambda e: e[1]):
        if after is None:
            state.pop(key, None)
        else:
            state[key] = after
    return state


def test_a_changefeed_over_debezium_topics_resolves_from_its_transactions_and_resumes(
    kafka_bootstrap: str, feed: Feed
) -> None:
    orders, customers, written, final = feed.orders, feed.customers, feed.written, feed.final
    changefeed_id, info, transactions = feed.changefeed_id, feed.info, feed.transactions
    adapter = DebeziumAdapter()
    # what Debezium wrote decodes exactly: the state it rebuilds is the final SELECT
    state = rebuilt(written[orders])
    assert text(state[(2,)]["amount"]) == "0.9999"  # numeric(24,4): its scale's digits
    assert text(state[(2,)]["ratio"]) == "123456789012345678901234567890.000000000001"
    for topic, table in ((orders, "orders"), (customers, "customers")):
        rows = sorted(rebuilt(written[topic]).items())
        got = ["|".join(text(row.get(c)) or "" for c in COLUMNS[table]) for _, row in rows]
        assert got == final[table].splitlines(), table
    # the snapshot's rows are reads; two updates of one key in one transaction keep their order
    decoded = [adapter.decode(m.key, m.value) for m in written[orders] if m.value is not None]
    assert next(c.op for c in decoded if c.key == [1]) == "insert"
    in_one = [c for c in decoded if c.key == [2]][:3]
    assert [c.op for c in in_one] == ["insert", "update", "update"]
    assert in_one[0].ts < in_one[1].ts < in_one[2].ts
    # one commit time (PostgreSQL's clock: microseconds), ordered below it by each change's
    # LSN distance from the last commit Debezium names, either side of the middle (a commit
    # of another transaction, the heartbeat's, between this one's changes and its end puts a
    # change's LSN before it: one nanosecond lower, same microsecond)
    assert len({c.ts.wall // 1_000 for c in in_one}) == 1
    # END counts each transaction's events per table, at its commit time in milliseconds
    ends = [json.loads(m.value)["payload"] for m in transactions if m.value is not None]
    first = next(e for e in ends if e["status"] == "END" and e["event_count"] == 4)
    assert {d["data_collection"]: d["event_count"] for d in first["data_collections"]} == {
        "public.orders": 3,
        "public.customers": 1,
    }
    assert first["ts_ms"] == in_one[0].ts.wall // 1_000_000

    for table, topic in (("orders", orders), ("customers", customers)):
        output = consume_all(kafka_bootstrap, f"{changefeed_id}.{table}")
        rows = [m for m in output if m.key is not None]
        markers = [m for m in output if m.key is None]
        # every committed change once or more: each Debezium change's (key, time) is there
        want = {
            (json.dumps(c.key), (ts.wall, ts.logical)) for c, ts in timed_changes(written[topic])
        }
        emitted = first_emissions(rows)
        assert {(k, ts) for k, ts, _ in emitted} == want, table
        # per key the versions in commit order (first emissions); no new row at or below a
        # marker after it; markers on every partition, past the last change (the heartbeats'
        # transactions resolve the quiet time after it)
        assert order_and_resolved(output) == {}, table
        assert {m.partition for m in markers} == {0, 1, 2}, table
        last = max(hlc_order(json.loads(m.value)["resolved"]) for m in markers)
        assert last > max(ts for _, ts, _ in emitted), f"{table}: markers stop at the last change"
        # the state the output rebuilds is the final SELECT, value for value
        state = output_state(emitted)
        got = ["|".join(as_text(row.get(c)) for c in COLUMNS[table]) for row in state.values()]
        assert sorted(got) == sorted(final[table].splitlines()), table

    record = checkpoint_records(kafka_bootstrap, changefeed_id)[-1]
    log = record["transactions"][info.transaction_topic]
    assert log["seen"] == {}, log  # nothing in flight at the end
    assert log["horizon"] is None


def test_an_initial_scan_of_debezium_topics_is_a_snapshot_at_a_committed_time(
    kafka_bootstrap: str, feed: Feed, spark: Any
) -> None:
    """The snapshot's time T lies just below the last commit the transaction topic listed.

    Every key at T once, with ``updated`` = T and its own ``mvcc_timestamp``; the last
    transaction (after T) as a change; the first marker at T or above on every partition
    once the scan's counts showed every transaction at or below T read whole; the state
    rebuilt from the output is the final SELECT.
    """
    scan_id = f"{feed.changefeed_id}.scan"
    tables = (("orders", feed.orders), ("customers", feed.customers))
    config = changefeed_config(
        kafka_bootstrap,
        scan_id,
        [
            {
                "topic": topic,
                "table": table,
                "format": "debezium",
                "transactions": feed.info.transaction_topic,
            }
            for table, topic in tables
        ],
        initial_scan="yes",
        encoder={"updated": True, "mvcc_timestamp": True},
    )
    run_to_end(config, spark)
    listed = consume_all(kafka_bootstrap, feed.info.transaction_topic)  # the heartbeats' too
    ends = [json.loads(m.value)["payload"] for m in listed if m.value is not None]
    last_commit = max(e["ts_ms"] for e in ends if e["status"] == "END") * 1_000_000
    times: set[str] = set()
    for table, _ in tables:
        output = consume_all(kafka_bootstrap, f"{scan_id}.{table}")
        rows = [(m.key, exact(m.value)) for m in output if m.key is not None]
        assert len({key for key, _ in rows}) == len(rows), f"{table}: a key emitted twice"
        snapshot = [body for _, body in rows if body["updated"] != body["mvcc_timestamp"]]
        times |= {body["updated"] for body in snapshot}
        changes = [body for _, body in rows if body["updated"] == body["mvcc_timestamp"]]
        assert all(hlc_order(b["updated"])[0] >= last_commit for b in changes), table
        emitted = [(k.decode(), hlc_order(b["updated"]), b["after"]) for k, b in rows]
        state = output_state(emitted)
        got = ["|".join(as_text(row.get(c)) for c in COLUMNS[table]) for row in state.values()]
        assert sorted(got) == sorted(feed.final[table].splitlines()), table
        markers = [m for m in output if m.key is None]
        assert {m.partition for m in markers} == {0, 1, 2}, table
        top = max(hlc_order(json.loads(m.value)["resolved"]) for m in markers)
        assert top >= max(ts for _, ts, _ in emitted), f"{table}: the last change unresolved"
    (statement,) = times  # one snapshot time for every table
    assert hlc_order(statement) == (last_commit - 1, 9_999_999_999)  # just below the last
    record = read_checkpoint(kafka_bootstrap, config)
    assert record["transactions"][feed.info.transaction_topic]["seen"] == {}


ORDERS = {
    "type": "record",
    "name": "orders",
    "fields": [
        {"name": "id", "type": "int"},
        {
            "name": "amount",
            "type": [
                "null",
                {"type": "bytes", "logicalType": "decimal", "precision": 24, "scale": 4},
            ],
        },
        {"name": "note", "type": ["null", "string"]},
        {"name": "region", "type": ["null", "string"]},
    ],
}


def test_a_cdc_query_over_a_debezium_topic_filters_projects_and_still_resolves(
    kafka_bootstrap: str, feed: Feed, spark: Any
) -> None:
    """``where``/``select`` read Debezium's rows as native envelopes, values as written.

    A change the query leaves out still counts for its transaction: markers reach every
    partition past the last change. A delete is judged by the row it deletes.
    """
    query_id = f"{feed.changefeed_id}.query"
    config = changefeed_config(
        kafka_bootstrap,
        query_id,
        [
            {
                "topic": feed.orders,
                "table": "orders",
                "format": "debezium",
                "transactions": feed.info.transaction_topic,
                "table_schema": ORDERS,
                "primary_key": ["id"],
            }
        ],
        initial_scan="no",
        encoder={"updated": True, "where": "amount > 0", "select": ["id", "amount", "region"]},
    )
    run_to_end(config, spark)
    output = consume_all(kafka_bootstrap, f"{query_id}.orders")
    rows = [json.loads(m.value) for m in output if m.key is not None]  # the bytes: below
    seen = sorted({(hlc_order(b["updated"]), json.dumps(b["after"])) for b in rows})
    assert [json.loads(after) for _, after in seen] == [
        {"id": 1, "amount": 1.5, "region": None},  # the snapshot's row
        {"id": 2, "amount": 12345678901234567890.1234, "region": None},
        None,  # the delete of key 1 (its row had amount > 0); 2's updates to -0.0001 left out
        {"id": 2, "amount": 0.9999, "region": None},  # key 3 (amount 0) left out, its delete too
        {"id": 4, "amount": 99999999999999999999.9999, "region": "us"},
    ]
    texts = [m.value for m in output if m.key is not None]
    assert any(b'"amount":1.5000' in t for t in texts)  # as Debezium wrote it, never rounded
    assert any(b'"amount":99999999999999999999.9999' in t for t in texts)
    markers = [m for m in output if m.key is None]
    assert {m.partition for m in markers} == {0, 1, 2}
    top = max(hlc_order(json.loads(m.value)["resolved"]) for m in markers)
    assert top >= seen[-1][0], "the changes left out held the markers back"


def check_customers(messages: list[tuple[int, int, str, str]]) -> None:
    """Every change of ``customers`` as confluent-kafka's deserializer read it; a marker."""
    rows = [json.loads(value) for _, _, key, value in messages if key != "null"]
    assert sorted((r["after"]["id"], r["after"]["name"]) for r in rows) == [
        (10, "Ada"),
        (10, "Ada L."),
        (11, "Grace"),
        (11, "first"),
        (11, "second"),
        (12, "Ω ☃ 👩‍💻 'single' \"double\""),
    ]
    assert any(key == "null" for _, _, key, _ in messages), "no resolved marker"


def avro_drain(
    changefeed_id: str,
    bootstrap: str,
    registry_url: str,
    sources: list[dict[str, Any]],
    **more: Any,
) -> ChangefeedConfig:
    """A changefeed writing Avro through the registry, drained (``available_now``)."""
    return parse_config(avro_raw(changefeed_id, bootstrap, registry_url, sources, **more), env={})


def avro_raw(
    changefeed_id: str,
    bootstrap: str,
    registry_url: str,
    sources: list[dict[str, Any]],
    **more: Any,
) -> dict[str, Any]:
    """:func:`avro_drain`'s config as its file says it."""
    return {
        "changefeed_id": changefeed_id,
        "kafka": {"bootstrap_servers": bootstrap},
        "sources": sources,
        "initial_scan": "no",
        "sink": {"topic_prefix": f"{changefeed_id}.", "partitions": 1},
        "encoder": {
            "format": "avro",
            "updated": True,
            "schema_registry": {"url": registry_url},
        },
        "resolved": {"interval": "0s"},
        "safepoints": {"enabled": False},
        "spark": {"trigger": {"available_now": True}},
        **more,
    }


def test_avro_output_over_a_debezium_topic_reads_back_with_confluents_deserializer(
    kafka_bootstrap: str, schema_registry_url: str, feed: Feed, spark: Any
) -> None:
    """Read with confluent-kafka's Avro deserializer against the registry."""
    customers, info = feed.customers, feed.info
    avro_id = f"{feed.changefeed_id}.avro"
    source = {
        "topic": customers,
        "table": "customers",
        "format": "debezium",
        "transactions": info.transaction_topic,
        "table_schema": CUSTOMERS,
        "primary_key": ["id"],
    }
    avro = avro_drain(
        avro_id,
        kafka_bootstrap,
        schema_registry_url,
        [source],
        checkpoint={"topic": f"{avro_id}.checkpoints"},
    )
    run_to_end(avro, spark)
    messages = avro_messages(f"{avro_id}.customers", kafka_bootstrap, schema_registry_url)
    check_customers(messages)


# orders as declared before the ALTER TABLE … ADD COLUMN region (ratio: NUMERIC without a
# precision, no Avro decimal holds every value of it; at: timestamptz, Debezium's text)
ORDERS_AT_START = {
    **ORDERS,
    "fields": [
        *ORDERS["fields"][:2],
        {"name": "ratio", "type": ["null", "double"]},
        {"name": "at", "type": ["null", "string"]},
        ORDERS["fields"][2],
    ],
}


def test_a_column_added_upstream_evolves_the_avro_output_schema_from_debezium_s_own(
    kafka_bootstrap: str,
    schema_registry_url: str,
    feed: Feed,
    spark: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``schema_change_policy: evolve`` on the real chain: PostgreSQL's ALTER TABLE ADD COLUMN.

    The table's schema is declared as it was before the ALTER; the first row after it carries
    ``region``, whose type the changefeed takes from Debezium's schema of that row: the output
    schema gains it as an optional field, a new registry version the registry found
    compatible, and the run goes on without a pause. Read through the registry by
    confluent-kafka's AvroDeserializer, each change is there once, ``region`` with its values;
    a consumer holding the first schema as its reader schema still reads every record; the
    job status names the change.
    """
    from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: PLC0415
    from confluent_kafka.schema_registry.avro import AvroDeserializer  # noqa: PLC0415
    from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: PLC0415

    from pipeline.control.changefeeds import Changefeeds  # noqa: PLC0415
    from pipeline.control.context import OperatorContext  # noqa: PLC0415

    evolve_id = f"{feed.changefeed_id}.evolve"
    source = {
        "topic": feed.orders,
        "table": "orders",
        "format": "debezium",
        "transactions": feed.info.transaction_topic,
        "table_schema": ORDERS_AT_START,
        "primary_key": ["id"],
    }
    config = avro_drain(
        evolve_id,
        kafka_bootstrap,
        schema_registry_url,
        [source],
        schema_change_policy="evolve",
    )
    run_to_end(config, spark)
    output = f"{evolve_id}.orders"
    registry = SchemaRegistryClient({"url": schema_registry_url})
    ctx = SerializationContext(output, MessageField.VALUE)
    raw = [m for m in consume_all(kafka_bootstrap, output) if m.key is not None]
    as_written = AvroDeserializer(registry)  # each record by its writer schema
    rows = [as_written(m.value, ctx) for m in raw]
    images = sorted(
        {
            (hlc_order(r["updated"]), repr(sorted(r["after"].items()))): r["after"]
            for r in rows
            if r["after"] is not None
        }.items()
    )
    assert [(i["id"], i.get("region", "absent")) for _, i in images] == [
        (1, "absent"),  # the snapshot's row: written in the declared schema
        (2, "absent"),
        (2, "absent"),
        (2, "absent"),
        (3, "eu"),  # the first row after the ALTER: the evolved schema from here on
        (2, None),  # later rows of the other keys carry the column too (null)
        (4, "us"),
    ]
    assert images[-1][1]["amount"] == Decimal("99999999999999999999.9999")  # exactly
    assert sum(r["after"] is None for r in rows) >= 2  # the deletes of 1 and 3
    # the registry: one more version of the value subject, with region optional, defaulted
    subject = f"{output}-value"
    registered = [registry.get_version(subject, v) for v in registry.get_versions(subject)]
    versions = [r.schema for r in registered]
    grown = [s for s in versions if '"region"' in (s.schema_str or "")]
    (grown_id,) = [r.schema_id for r in registered if '"region"' in (r.schema.schema_str or "")]
    assert len(versions) == 3, [s.schema_str for s in versions]  # envelope, marker, grown
    assert len(grown) == 1
    envelope = json.loads(grown[0].schema_str or "")
    region = envelope["fields"][0]["type"][1]["fields"][-1]
    assert region == {"name": "region", "type": ["null", "string"], "default": None}
    # a consumer that still holds the first envelope as its reader schema reads everything
    old_reader = AvroDeserializer(registry, versions[0].schema_str)
    old = [old_reader(m.value, ctx) for m in raw]
    assert len(old) == len(rows)
    assert all("region" not in o["after"] for o in old if o["after"] is not None)
    # what an operator sees: the table's schema version and its last change
    found = Changefeeds(OperatorContext({"bootstrap.servers": kafka_bootstrap})).get(evolve_id)
    assert found.status is not None
    assert found.status.state == "stopped"
    assert found.status.warnings == [
        "sources[0].table_schema differs from the source's newest schema: column(s) region not "
        "declared (the declared schema is written; rows it cannot hold follow "
        "schema_change_policy)"
    ]  # named at the start, from the newest changes at the topic's end
    schemas = found.status.schemas or {}
    assert schemas["orders"]["added"] == ["region"]
    assert schemas["orders"]["columns"][-1] == "region"
    first_with_region = min(hlc_order(r["updated"]) for r in rows if "region" in (r["after"] or {}))
    assert hlc_order(schemas["orders"]["changed_at"]) == first_with_region
    capsys.readouterr()
    assert (
        highwater(["changefeed", "query", evolve_id, "--bootstrap-servers", kafka_bootstrap]) == 0
    )
    shown = capsys.readouterr().out
    line = f"orders: id {grown_id} of subject {output}-value, 6 columns; added region at "
    assert f"schema          {line}{schemas['orders']['changed_at']}" in shown, shown


def test_avro_output_takes_its_schema_from_debezium_s_where_none_is_declared(
    kafka_bootstrap: str, schema_registry_url: str, feed: Feed, spark: Any
) -> None:
    """No ``table_schema``: the output schema is Debezium's, read at the start.

    ``customers`` (bigint key, text) becomes ``id: long``, ``name: ["null", "string"]`` keyed
    by ``id``, read back through the registry by confluent-kafka's AvroDeserializer. A table
    one of whose columns no Avro type holds exactly (``orders.ratio``: NUMERIC without a
    precision) is refused at the start, naming the column and the key to declare.
    """
    from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: PLC0415

    from schemas.errors import ConfigError  # noqa: PLC0415

    derived_id = f"{feed.changefeed_id}.derived"

    def config(*topics: str) -> ChangefeedConfig:
        sources = [
            {
                "topic": topic,
                "table": topic.rsplit(".", 1)[-1],
                "format": "debezium",
                "transactions": feed.info.transaction_topic,
            }
            for topic in topics
        ]
        return avro_drain(derived_id, kafka_bootstrap, schema_registry_url, sources)

    with pytest.raises(ConfigError, match=r"sources\[1\]\.table_schema: is needed.*'ratio'"):
        run_to_end(config(feed.customers, feed.orders), spark)
    run_to_end(config(feed.customers), spark)
    output = f"{derived_id}.customers"
    registry = SchemaRegistryClient({"url": schema_registry_url})
    key = json.loads(registry.get_latest_version(f"{output}-key").schema.schema_str or "")
    assert key["fields"] == [{"name": "id", "type": "long"}]
    messages = avro_messages(output, kafka_bootstrap, schema_registry_url)
    check_customers(messages)


def decimal_field(name: str, precision: int, scale: int) -> dict[str, Any]:
    decimal = {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}
    return {"name": name, "type": ["null", decimal]}


# accounts as declared before its ALTERs, and as an operator declares it after each one
ACCOUNTS: list[dict[str, Any]] = [
    {"name": "id", "type": "int"},
    decimal_field("balance", 10, 2),
    {"name": "memo", "type": ["null", "string"]},
]
TIER = {"name": "tier", "type": ["null", "int"], "default": None}
VIP = {"name": "vip", "type": ["null", "boolean"], "default": None}
WIDENED = [ACCOUNTS[0], decimal_field("balance", 12, 4), ACCOUNTS[2], TIER, VIP]
ACCOUNT_STAGES = {
    "tier": [*ACCOUNTS, TIER],
    "vip": [*ACCOUNTS, TIER, VIP],
    "balance": WIDENED,
}


def accounts_read(
    bootstrap: str, registry_url: str, topic: str
) -> tuple[list[dict[str, Any]], list[Message]]:
    """The output as confluent-kafka's AvroDeserializer reads it, and as the validator does.

    Each record by its writer schema, through the registry; the validator's messages carry
    keys, times and markers.
    """
    from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: PLC0415
    from confluent_kafka.schema_registry.avro import AvroDeserializer  # noqa: PLC0415
    from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: PLC0415

    registry = SchemaRegistryClient({"url": registry_url})
    keys, values = AvroDeserializer(registry), AvroDeserializer(registry)
    rows, seen = [], []
    for m in consume_all(bootstrap, topic):
        value = values(m.value, SerializationContext(topic, MessageField.VALUE))
        if m.key is None:
            shown = json.dumps({"resolved": value["resolved"]}).encode()
            seen.append(Message(m.partition, m.offset, None, shown, ()))
            continue
        key = keys(m.key, SerializationContext(topic, MessageField.KEY))
        rows.append({**value, "key": key["id"]})
        shown = json.dumps({"updated": value["updated"]}).encode()
        seen.append(Message(m.partition, m.offset, json.dumps([key["id"]]).encode(), shown, ()))
    return rows, seen


def accounts_raw(
    feed: Feed,
    changefeed_id: str,
    bootstrap: str,
    registry_url: str,
    fields: list[dict[str, Any]],
    **more: Any,
) -> dict[str, Any]:
    """A changefeed over ``accounts`` with ``fields`` declared, Avro through the registry."""
    source = {
        "topic": feed.accounts,
        "table": "accounts",
        "format": "debezium",
        "transactions": feed.info.transaction_topic,
        "table_schema": {"type": "record", "name": "accounts", "fields": fields},
        "primary_key": ["id"],
    }
    return avro_raw(changefeed_id, bootstrap, registry_url, [source], **more)


def drain_or_pause(raw: dict[str, Any], spark: Any, bootstrap: str) -> str | None:
    """One drain; the pause's reason, the changefeed resumed (None: it ran to the end)."""
    from pipeline.control.changefeeds import Changefeeds  # noqa: PLC0415
    from pipeline.control.context import OperatorContext  # noqa: PLC0415

    run_to_end(parse_config(raw, env={}), spark)
    changefeeds = Changefeeds(OperatorContext({"bootstrap.servers": bootstrap}))
    status = changefeeds.get(raw["changefeed_id"]).status
    assert status is not None
    if status.state != "paused":
        return None
    changefeeds.resume(raw["changefeed_id"])
    return status.error


@pytest.mark.parametrize("policy", ["stop", "evolve", "backfill"])
def test_schema_changes_upstream_follow_the_policy_and_an_update_resumes_without_loss(
    kafka_bootstrap: str,
    schema_registry_url: str,
    feed: Feed,
    spark: Any,
    *,
    policy: str,
    tmp_path: Path,
) -> None:
    """ADD COLUMN with a default and without, DROP COLUMN, a NUMERIC widened, each policy.

    PostgreSQL → Debezium; the table's schema declared as it was at the start. ``stop``
    pauses at each added column, naming it and the first row's commit time, with everything
    before it written and a marker below it; ``evolve`` and ``backfill`` grow the schema
    through both; ``backfill`` also emits the table again just before each change's first
    row, the rows that predate ``tier`` with its default (5, as PostgreSQL filled them). A
    dropped nullable column is null from then on. The widened NUMERIC (``numeric(12,4)`` over
    ``decimal(10,2)``) stops under every policy, naming both types; the operator's new
    ``table_schema`` and ``resume`` go on; under ``backfill`` the first run is killed during
    the first scan at a change, and the next finishes it. At the end: no per-key order or marker
    violation, and the table rebuilt from the output equals the final ``SELECT``.
    """
    changefeed_id = f"{feed.changefeed_id}.accounts-{policy}"

    def raw(fields: list[dict[str, Any]]) -> dict[str, Any]:
        return accounts_raw(
            feed,
            changefeed_id,
            kafka_bootstrap,
            schema_registry_url,
            fields,
            schema_change_policy=policy,
            sink={"topic_prefix": f"{changefeed_id}.", "partitions": 2},
        )

    if policy == "backfill":
        # killed once the table's first scan at a change recorded a chunk (spark-submit,
        # SIGKILL): the next run scans the rest first, the schema evolved again to hold it
        config_file = write_config(tmp_path / "backfill.yaml", raw(ACCOUNTS))
        run_killed_at(config_file, tmp_path / "backfill.log", "after_chunk:1")
        left = checkpoint_records(kafka_bootstrap, changefeed_id)[-1]["backfill"]
        assert left["change"][0] == feed.accounts  # the scan at the change, half done
        # a chunk done (and an empty partition's with it): some of the topic's two, not none
        done = set(ranges_to_numbers(left["partitions"][feed.accounts]["done"]))
        assert done, left
        assert done <= {0, 1}, left

    output = f"{changefeed_id}.accounts"
    pauses, marked, fields = [], [], ACCOUNTS
    while (error := drain_or_pause(raw(fields), spark, kafka_bootstrap)) is not None:
        assert len(pauses) < 3, error
        pauses.append(error)
        _, now = accounts_read(kafka_bootstrap, schema_registry_url, output)
        marked.append([Hlc.parse(json.loads(m.value or b"")["resolved"]) for m in now if not m.key])
        # what the pause names: a retyped column, else the column(s) added
        column = "balance" if "balance:" in error else "vip" if "vip" in error else "tier"
        fields = ACCOUNT_STAGES[column]

    rows, seen = accounts_read(kafka_bootstrap, schema_registry_url, output)
    shown = [(m.partition, m.offset, m.key, m.value) for m in seen]
    assert order_and_resolved(seen) == {}, shown  # 0 violations
    changes = [
        (c.key[0], str(ts), c.after or {}) for c, ts in timed_changes(feed.written[feed.accounts])
    ]
    tier_at, vip_at = (
        Hlc.parse(min((ts for _, ts, after in changes if column in after), key=Hlc.parse))
        for column in ("tier", "vip")
    )
    if policy == "stop":
        assert len(pauses) == 3, pauses
        assert "column(s) tier not in its output schema" in pauses[0]
        assert f"(commit time {tier_at})" in pauses[0]
        # no marker reaches a change the changefeed paused at (here none may be sent at all:
        # a run over Debezium's history resolves nothing until it has read as far as the data
        # topics reached when it read the transaction topic's first END, its horizon)
        assert all(m < tier_at for m in marked[0])
        assert all(m < vip_at for m in marked[1])
        assert "column(s) vip not in its output schema" in pauses[1]
        assert f"(commit time {vip_at})" in pauses[1]
    else:
        assert len(pauses) == 1, pauses
    retyped = "balance: decimal(12,4) at the source, decimal(10,2) in the output"
    assert retyped in pauses[-1], pauses[-1]
    # every Debezium change is there at its own time; backfill's rows besides them
    own = {(key, ts) for key, ts, _ in changes}
    assert own <= {(r["key"], r["updated"]) for r in rows}
    again = [r for r in rows if (r["key"], r["updated"]) not in own]
    if policy == "backfill":  # the table just before each added column's first row
        before_tier, before_vip = str(tier_at.previous()), str(vip_at.previous())
        assert {r["updated"] for r in again} == {before_tier, before_vip}
        # every row live then, the column's default in those that predate it (as PostgreSQL
        # filled them). Key 3, deleted later, is there when its delete was not written before
        # the scan (the scan leaves out a key whose delete is out, or it would undo it): always
        # when it shares the partition the change stopped (Connect's partitioner, read from
        # the topic), as the change's first row stops it; on another partition it depends on
        # where that partition's batch ended when the change was met, which is timing (seen
        # both ways: alone it was written first, under load it was not), so either there
        partition = {
            c.key[0]: m.partition
            for m in feed.written[feed.accounts]
            if (c := DebeziumAdapter().decode(m.key, m.value)) is not None
        }
        first_key = {
            column: next(k for k, ts, after in changes if column in after and Hlc.parse(ts) == at)
            for column, at in (("tier", tier_at), ("vip", vip_at))
        }
        stopped = {c: partition[3] == partition[first_key[c]] for c in ("tier", "vip")}
        tiers = {(r["key"], r["after"]["tier"]) for r in again if r["updated"] == before_tier}
        must = {(1, 5), (2, 5), *([(3, 5)] if stopped["tier"] else [])}
        assert must <= tiers <= {(1, 5), (2, 5), (3, 5)}, (tiers, partition)
        vips = {
            (r["key"], r["after"]["tier"], r["after"]["vip"])
            for r in again
            if r["updated"] == before_vip
        }
        live = {(1, 5, None), (2, 5, None), (4, 7, None)}
        must_vip = {*live, *([(3, 5, None)] if stopped["vip"] else [])}
        assert must_vip <= vips <= {*live, (3, 5, None)}, (vips, partition)
    else:
        assert again == []
    # the registry: the value subject's envelopes, each row record's columns, in order
    from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: PLC0415

    registry, subject = SchemaRegistryClient({"url": schema_registry_url}), f"{output}-value"
    envelopes = [
        json.loads(registry.get_version(subject, v).schema.schema_str or "")
        for v in registry.get_versions(subject)
    ]
    # (each first registration: a restart registers the declared one again, and the same
    # schema with its keys in another order is another version to the registry)
    rows_of = [
        json.loads(row)
        for row in dict.fromkeys(
            json.dumps(
                {f["name"]: f["type"] for f in e["fields"][0]["type"][1]["fields"]},
                sort_keys=True,  # the killed run read its schema from YAML, keys sorted
            )
            for e in envelopes
            if e["fields"][0]["name"] == "after"  # not the markers' schema
        )
    ]
    assert [sorted(columns) for columns in rows_of] == [
        ["balance", "id", "memo"],
        ["balance", "id", "memo", "tier"],
        ["balance", "id", "memo", "tier", "vip"],
        ["balance", "id", "memo", "tier", "vip"],  # balance widened by the operator
    ], rows_of
    assert rows_of[-1]["balance"] == WIDENED[1]["type"]
    # the table rebuilt from the output is the final SELECT
    state: dict[int, dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: hlc_order(r["updated"])):
        if r["after"] is None:
            state.pop(r["key"], None)
        else:
            state[r["key"]] = r["after"]
    got = [(a["id"], a["balance"], a.get("tier"), a.get("vip")) for _, a in sorted(state.items())]
    selected = [line.split("|") for line in feed.final["accounts"].splitlines()]
    assert got == [
        (int(i), Decimal(b), int(t) if t else None, {"t": True, "f": False}.get(v))
        for i, b, t, v in selected
    ]


@pytest.mark.parametrize("policy", ["stop", "evolve"])
def test_an_initial_scan_follows_the_schema_change_policy(
    kafka_bootstrap: str, schema_registry_url: str, feed: Feed, spark: Any, policy: str
) -> None:
    """The snapshot of a table whose declared schema lacks columns its rows have now.

    ``evolve``: the schema takes the source's newest columns before the scan, and the
    snapshot has them. ``stop``: the scan pauses at the first such row, naming the columns;
    the new ``table_schema`` and ``resume`` finish it. Either way the snapshot, read through
    the registry, is the final ``SELECT``.
    """
    changefeed_id = f"{feed.changefeed_id}.accounts-scan-{policy}"

    def run(fields: list[dict[str, Any]]) -> str | None:
        more = {"schema_change_policy": policy, "initial_scan": "yes"}
        raw = accounts_raw(
            feed, changefeed_id, kafka_bootstrap, schema_registry_url, fields, **more
        )
        return drain_or_pause(raw, spark, kafka_bootstrap)

    error = run(WIDENED[:3])  # balance as it is now; tier and vip not declared
    if policy == "stop":
        assert error is not None
        assert "changed shape: column(s) tier" in error, error  # (and vip: by the chunk)
        error = run(WIDENED)
    assert error is None
    rows, _ = accounts_read(kafka_bootstrap, schema_registry_url, f"{changefeed_id}.accounts")
    got = sorted(
        (r["key"], r["after"]["balance"], r["after"]["tier"], r["after"]["vip"]) for r in rows
    )
    selected = [line.split("|") for line in feed.final["accounts"].splitlines()]
    assert got == [
        (int(i), Decimal(b), int(t) if t else None, {"t": True, "f": False}.get(v))
        for i, b, t, v in selected
    ]


# Last: it trims the orders topic, which the tests above read from its start.
def test_gc_trims_the_debezium_topics_and_a_resume_loses_nothing(
    kafka_bootstrap: str, feed: Feed, spark: Any, capsys: Any
) -> None:
    """GC over Debezium topics trims all a safepoint does not need, and nothing more.

    A resume with nothing new holds the safepoint at the last checkpoint; GC trims all before
    it (tombstones too); a resume after GC finds what it needs and emits nothing again.
    """
    drain, orders = feed.drain, feed.orders
    run_to_end(drain, spark)
    cli = ["--bootstrap-servers", kafka_bootstrap, "--cluster", drain.safepoints.cluster]
    cli += ["--safepoint-topic", drain.safepoints.topic, "--jobs-topic", drain.jobs.topic]
    gc = ["gc", "run", "--once", "--topic", orders, "--format", "debezium", "--gc-life-time", "0s"]
    assert highwater([*gc, *cli]) == 0
    printed = capsys.readouterr().out
    reader = Consumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": f"{drain.changefeed_id}.gc"}
    )
    try:
        for p in (0, 1):
            low, high = reader.get_watermark_offsets(TopicPartition(orders, p), timeout=10)
            assert low == high, f"{orders}/{p}: trimmed to {low} of {high}\n{printed}"
    finally:
        reader.close()
    output = f"{feed.changefeed_id}.orders"
    before = [m for m in consume_all(kafka_bootstrap, output) if m.key is not None]
    run_to_end(drain, spark)
    after = [m for m in consume_all(kafka_bootstrap, output) if m.key is not None]
    assert len(after) == len(before), "a resume after GC emitted rows again"
