"""A real Debezium capture in Avro: PostgreSQL → Debezium with Apicurio's AvroConverter → JSON.

Debezium's PostgreSQL connector on Kafka Connect standalone (``pipeline/dev/connect.py``),
its keys and values (the transaction topic's too) written by Apicurio Registry's Kafka Connect
``AvroConverter`` in Confluent's wire format against the suite's registry (Apicurio, its
Confluent-compatible API read with confluent-kafka's ``SchemaRegistryClient``). Two tables
with the column kinds the converter writes (int and bigint keys, text, NUMERIC with a scale
and without one, NULLs, a timestamp, boolean, json), a snapshot, then multi-statement
transactions: inserts, a key updated twice in one transaction, updates to NULL, deletes.
A changefeed (JSON output) reads the Avro topics through the registry to their end, and a
second one writes ``accounts`` in Avro with no ``table_schema``: its output schema derived
from the converter's (every column kind of the table: int, text, NUMERIC(20,4), bigint,
boolean, timestamp, json; optional or not). Checked, independently of Highwater's reader:

* the source is the real thing: every key and value is Confluent's wire format (byte 0,
  4-byte id) with no schema id in headers; each id resolves through the ccompat API to the
  schema registered under the topic's ``-key``/``-value`` subject, the envelope's referring
  to its records registered apart (Apicurio's way), which the changefeed's reader writes in;
* per key the versions emitted are Debezium's changes in its order (read with
  confluent-kafka's ``AvroDeserializer``), value for value as PostgreSQL prints them, and
  the tables the output rebuilds are the final ``SELECT``;
* markers on every output partition, the last at or above the last commit;
* the Avro output, read with confluent-kafka's ``AvroDeserializer``, holds the same versions
  per key, its schema's column types those of the converter's (a decimal(20,4), a
  timestamp-micros, a string for the json column).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from pipeline.config import parse_config
from pipeline.core.sources.wire import whole_schema
from pipeline.dev.connect import EmbeddedConnect
from pipeline.dev.postgres import EmbeddedPostgres
from schemas.connect import non_null
from tests.support.changefeed import over_capture, run_to_end
from tests.support.kafka import Message, consume_all
from tests.support.validator import exact, hlc_order, order_and_resolved

pytestmark = pytest.mark.integration

SETUP = """
CREATE TABLE accounts (id int PRIMARY KEY, owner text NOT NULL, balance numeric(20,4),
                       visits bigint NOT NULL, active boolean, opened timestamp, profile json);
CREATE TABLE entries (id bigint PRIMARY KEY, account int NOT NULL, amount numeric(12,2) NOT NULL,
                      ratio numeric, memo text, booked timestamp);
ALTER TABLE accounts REPLICA IDENTITY FULL;
ALTER TABLE entries REPLICA IDENTITY FULL;
INSERT INTO accounts VALUES
  (1, 'snapshot 1', 0.0000, 9007199254740993, true, '2024-02-29 23:59:59.999999', '{"a": 1}'),
  (2, 'snapshot 2', NULL, 0, NULL, NULL, NULL);
INSERT INTO entries VALUES (10, 1, 1.50, 0.1, 'opening', '2024-01-02 03:04:05');
"""
TRANSACTIONS = """
BEGIN;
INSERT INTO accounts VALUES (3, 'ü 𝄞 "q"', -12345678901234.5678, -9223372036854775808, false,
                             '1999-12-31 23:59:59.5', '{"nested": [true, null, 1.5e300]}');
UPDATE accounts SET owner = 'tx1 first', balance = 99999999999999.9999 WHERE id = 1;
UPDATE accounts SET owner = 'tx1 second', visits = visits + 1 WHERE id = 1;
INSERT INTO entries VALUES (9223372036854775807, 3, -0.01,
                            123456789012345678901234567890.000000000001, NULL,
                            '2038-01-19 03:14:08.000001');
COMMIT;
BEGIN;
UPDATE accounts SET balance = NULL, active = NULL, opened = NULL, profile = NULL,
                    owner = 'tx2 nulls' WHERE id = 1;
UPDATE entries SET memo = 'tx2 ☃', ratio = -0.5 WHERE id = 10;
DELETE FROM accounts WHERE id = 2;
COMMIT;
BEGIN;
INSERT INTO accounts VALUES (2, 'tx3 again', 1.0000, 7, true, '2000-01-01 00:00:00', '[]');
DELETE FROM entries WHERE id = 10;
UPDATE accounts SET owner = 'the last transaction' WHERE id = 3;
COMMIT;
"""
SELECTS = {
    "accounts": (
        "SELECT id, owner, balance, visits, active, opened, profile FROM accounts ORDER BY id",
        ("id", "owner", "balance", "visits", "active", "opened", "profile"),
    ),
    "entries": (
        "SELECT id, account, amount, ratio, memo, booked FROM entries ORDER BY id",
        ("id", "account", "amount", "ratio", "memo", "booked"),
    ),
}
TIMESTAMPS = {"opened", "booked"}  # Debezium's MicroTimestamp: microseconds since the epoch
# per key, the text column's versions as written (None: deleted, "": NULL); the snapshot first
WRITTEN: dict[str, dict[str, list[str | None]]] = {
    "accounts": {
        "[1]": ["snapshot 1", "tx1 first", "tx1 second", "tx2 nulls"],
        "[2]": ["snapshot 2", None, "tx3 again"],
        "[3]": ['ü 𝄞 "q"', "the last transaction"],
    },
    "entries": {
        "[10]": ["opening", "tx2 ☃", None],
        "[9223372036854775807]": [""],
    },
}
WATCHED = {"accounts": "owner", "entries": "memo"}
CCOMPAT = "/apis/ccompat/v7"


def pg_timestamp(moment: datetime) -> str:
    """A ``timestamp`` as psql prints it: microseconds without their trailing zeros."""
    text = moment.strftime("%Y-%m-%d %H:%M:%S")
    return text + f".{moment.microsecond:06d}".rstrip("0") if moment.microsecond else text


def output_text(value: Any, column: str) -> str:
    """A value of the changefeed's output (read by :func:`exact`) as psql prints it."""
    if value is None:
        return ""
    if isinstance(value, tuple):  # a number, by its digits
        return str(value[1])
    if isinstance(value, bool):
        return "t" if value else "f"
    if column in TIMESTAMPS:  # ISO 8601, e.g. 2024-01-02T03:04:05.120000
        return pg_timestamp(datetime.fromisoformat(value))
    return str(value)


def avro_text(value: Any, column: str) -> str:
    """A value Debezium wrote (read by confluent-kafka's deserializer) as psql prints it."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, Decimal):  # Connect's Decimal: Avro's decimal logical type
        return format(value, "f")
    if isinstance(value, dict):  # Debezium's VariableScaleDecimal: scale and unscaled bytes
        unscaled = int.from_bytes(value["value"], "big", signed=True)
        return format(Decimal(f"{unscaled}E-{value['scale']}"), "f")  # exact: from text
    if column in TIMESTAMPS:
        return pg_timestamp(datetime(1970, 1, 1) + timedelta(microseconds=value))  # noqa: DTZ001
    return str(value)


def wait_for(what: str, done: Callable[[], bool], timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"waited {timeout:.0f} s for {what}"
        time.sleep(0.5)


@dataclass
class Capture:
    """What the run left: Debezium's topics, the changefeed's output, the final SELECTs."""

    topics: dict[str, str]  # table -> its change topic
    transaction_topic: str
    written: dict[str, list[Message]]  # topic -> its records (the transaction topic's too)
    outputs: dict[str, list[Message]]  # table -> the changefeed's output topic
    avro_topic: str  # the Avro changefeed's output topic of accounts
    avro_output: list[Message]  # its records
    enriched_output: list[Message]  # the enriched (Avro) changefeed's, of the same topic
    final: dict[str, str]  # table -> the final SELECT's psql output
    last_commit: int  # the last transaction's commit time, ns


class Decoder:
    """Debezium's Avro values read with confluent-kafka, independently of Highwater."""

    def __init__(self, registry: SchemaRegistryClient) -> None:
        self.read = AvroDeserializer(registry)

    def value(self, topic: str, m: Message) -> Any:
        """A record's value as a dict (None: a tombstone)."""
        context = SerializationContext(topic, MessageField.VALUE)
        return None if m.value is None else self.read(m.value, context)

    def commits(self, topic: str, messages: list[Message], tables: list[str]) -> list[int]:
        """Per END of the transaction ``topic``: its commit time (ms); 0 for another table's."""
        ends = [e for e in (self.value(topic, m) for m in messages) if e and e["status"] == "END"]
        ours = [{d["data_collection"] for d in e["data_collections"]} & set(tables) for e in ends]
        return [e["ts_ms"] if mine else 0 for e, mine in zip(ends, ours, strict=True)]


def capture_and_run(
    kafka_bootstrap: str, schema_registry_url: str, spark: Any, decoder: Decoder
) -> Capture:
    """PostgreSQL, Debezium in Avro, the SQL, then a changefeed over its topics to their end."""
    folder = Path(tempfile.mkdtemp(prefix="highwater-dbz-avro-"))
    folder.chmod(0o755)  # the postgres user reaches it (pytest's own folders are root's)
    postgres = EmbeddedPostgres(folder / "pg")
    connect = EmbeddedConnect(folder / "connect")
    name = f"dbza-{uuid.uuid4().hex[:8]}"
    changefeed_id = f"{name}.cf"
    tables = ["public.accounts", "public.entries"]
    started = time.monotonic()
    try:
        database = postgres.start()
        postgres.sql(SETUP)
        info = connect.capture(
            kafka_bootstrap,
            database,
            tables,
            topic_prefix=name,
            partitions=2,
            schema_registry=schema_registry_url,
        )
        postgres.sql(TRANSACTIONS)
        topics = {table.rpartition(".")[2]: info.topic(table) for table in tables}
        counts = {topics[t]: sum(len(v) for v in WRITTEN[t].values()) for t in topics}

        def read(topic: str) -> list[Message]:
            return consume_all(kafka_bootstrap, topic)

        def commits() -> list[int]:
            return decoder.commits(info.transaction_topic, read(info.transaction_topic), tables)

        def changes_there() -> bool:
            return all(sum(m.value is not None for m in read(t)) >= n for t, n in counts.items())

        def last_end_there() -> bool:  # our three ENDs, and a heartbeat's transaction after
            ends = commits()
            return len(ends) - ends.count(0) == 3 and ends[-1] == 0

        wait_for("Debezium's changes", changes_there)
        wait_for("the last END", last_end_there)
        captured = time.monotonic()
        raw = over_capture(kafka_bootstrap, changefeed_id, info.sources(tables))
        assert all(s["schema_registry"] == {"url": schema_registry_url} for s in raw["sources"])
        run_to_end(parse_config(raw, env={}), spark)
        accounts = [s for s in raw["sources"] if s["table"].endswith("accounts")]
        avro = over_capture(
            kafka_bootstrap,
            f"{changefeed_id}-avro",
            accounts,
            encoder={
                "format": "avro",
                "updated": True,
                "schema_registry": {"url": schema_registry_url},
            },
        )
        run_to_end(parse_config(avro, env={}), spark)
        enriched = over_capture(
            kafka_bootstrap,
            f"{changefeed_id}-enriched",
            accounts,
            encoder={
                "format": "avro",
                "envelope": "enriched",
                "enriched_properties": ["source"],
                "updated": True,
                "diff": True,
                "schema_registry": {"url": schema_registry_url},
            },
        )
        run_to_end(parse_config(enriched, env={}), spark)
        final = {table: postgres.sql(select) for table, (select, _) in SELECTS.items()}
        written = {t: read(t) for t in [*topics.values(), info.transaction_topic]}
    except BaseException:
        print(f"Kafka Connect's log:\n{connect.tail(60)}")
        raise
    finally:
        connect.stop()
        postgres.stop()
    shutil.rmtree(folder, ignore_errors=True)
    print(
        f"PostgreSQL, Connect and the SQL through it {captured - started:.1f} s; "
        f"the changefeed {time.monotonic() - captured:.1f} s"
    )
    return Capture(
        topics,
        info.transaction_topic,
        written,
        {t: read(f"{changefeed_id}.{t}") for t in topics},
        f"{changefeed_id}-avro.accounts",
        read(f"{changefeed_id}-avro.accounts"),
        read(f"{changefeed_id}-enriched.accounts"),
        final,
        max(commits()) * 1_000_000,
    )


def check_wire_format(registry: SchemaRegistryClient, run: Capture) -> None:
    """Every key and value in Confluent's wire format; its id a schema the registry serves."""
    schemas = {}  # (topic, key or value) -> the writer schema, whole
    referencing = {}  # (topic, key or value) -> whether it references other schemas

    def referenced(subject: str, version: int) -> tuple[str, list[Any]]:
        found = registry.get_version(subject, version).schema
        return found.schema_str or "", list(found.references or ())

    for topic, messages in run.written.items():
        ids: dict[str, set[int]] = {"key": set(), "value": set()}
        for m in messages:
            assert not any(h.startswith("apicurio.") for h, _ in m.headers), m.headers
            for side, data in (("key", m.key), ("value", m.value)):
                if data is not None:
                    assert data[:1] == b"\x00", (topic, side, data[:8])  # then a 4-byte id
                    ids[side].add(int.from_bytes(data[1:5], "big"))
        for side, found in ids.items():
            assert len(found) == 1, (topic, side, found)  # one schema: the tables never change
            (schema_id,) = found
            schema = registry.get_schema(schema_id)  # GET /apis/ccompat/v7/schemas/ids/<id>
            assert schema.schema_type == "AVRO", (topic, side)
            assert registry.get_latest_version(f"{topic}-{side}").schema_id == schema_id
            referencing[topic, side] = bool(schema.references)
            schemas[topic, side] = whole_schema(
                schema.schema_str or "", schema.references or [], referenced
            )
    # Apicurio's converter registers an envelope's records as schemas of their own, which the
    # envelope references by name: the reader writes them in (the harder path, tested here)
    assert referencing[run.topics["entries"], "value"], referencing
    assert schemas[run.transaction_topic, "value"]["name"] == "TransactionMetadataValue"
    envelope = schemas[run.topics["entries"], "value"]
    assert envelope["name"] == "Envelope", envelope
    # the topic prefix's "-" adjusted to an Avro name (schema.name.adjustment.mode=avro)
    assert envelope["namespace"] == run.topics["entries"].replace("-", "_"), envelope
    before = next(f for f in envelope["fields"] if f["name"] == "before")["type"][1]
    assert before["name"] == "Value", before  # the row's record inline, named again in "after"


def debezium_versions(run: Capture, table: str, decoder: Decoder) -> dict[str, list[Any]]:
    """Per key, Debezium's changes in its order (read with confluent-kafka), as psql prints."""
    columns = SELECTS[table][1]
    want: dict[str, list[dict[str, str] | None]] = {}
    for m in run.written[run.topics[table]]:
        event = decoder.value(run.topics[table], m)
        if event is None:
            continue  # a delete's tombstone
        after = event["after"]
        image = None if after is None else {c: avro_text(after[c], c) for c in columns}
        want.setdefault(f"[{(after or event['before'])['id']}]", []).append(image)
    return want


def check_table(run: Capture, table: str, decoder: Decoder) -> None:
    """Per key Debezium's changes in its order, value for value; the final SELECT; markers."""
    columns = SELECTS[table][1]
    want = debezium_versions(run, table, decoder)
    watched = WATCHED[table]
    texts = {k: [None if v is None else v[watched] for v in vs] for k, vs in want.items()}
    assert texts == WRITTEN[table], table

    output = run.outputs[table]
    got: dict[str, list[tuple[tuple[int, int], dict[str, str] | None]]] = {}
    seen: set[tuple[bytes, str]] = set()
    for m in output:
        if m.key is None:
            continue  # a marker
        body = exact(m.value or b"")
        if (m.key, body["updated"]) in seen:
            continue  # a replay of the changefeed's own (at least once)
        seen.add((m.key, body["updated"]))
        after = body["after"]
        image = None if after is None else {c: output_text(after[c], c) for c in columns}
        got.setdefault(m.key.decode(), []).append((hlc_order(body["updated"]), image))
    # per key, Debezium's changes in its order, value for value as psql prints them
    emitted = {k: [image for _, image in sorted(vs, key=lambda v: v[0])] for k, vs in got.items()}
    assert emitted == want, table
    assert order_and_resolved(output) == {}, table
    # the table the output rebuilds is the final SELECT, value for value
    state = [vs[-1][1] for vs in got.values() if vs[-1][1] is not None]
    rebuilt = sorted("|".join(image[c] for c in columns) for image in state)
    assert rebuilt == sorted(run.final[table].splitlines()), table
    # markers on every output partition, the last at or above the last commit
    markers = [m for m in output if m.key is None]
    assert {m.partition for m in markers} == {0, 1, 2}, table
    top = max(hlc_order(json.loads(m.value or b"")["resolved"]) for m in markers)
    assert top[0] >= run.last_commit, f"{table}: the last marker {top} is below the last commit"


def avro_rows(
    registry: SchemaRegistryClient, topic: str, output: list[Message]
) -> list[tuple[Any, Any]]:
    """Each row record of an Avro output: key and value read by confluent-kafka."""
    read_key, read_value = AvroDeserializer(registry), AvroDeserializer(registry)
    return [
        (
            read_key(m.key, SerializationContext(topic, MessageField.KEY)),
            read_value(m.value, SerializationContext(topic, MessageField.VALUE)),
        )
        for m in output
        if m.key is not None  # not a marker
    ]


def versions(rows: list[tuple[Any, Any]], time_of: Callable[[Any], str]) -> dict[str, list[Any]]:
    """Per key, the rows' after images as psql prints them, in commit-time order."""
    columns = SELECTS["accounts"][1]
    got: dict[str, list[tuple[tuple[int, int], dict[str, str] | None]]] = {}
    for key, body in rows:
        after = body["after"]
        image = None if after is None else {c: avro_output_text(after[c]) for c in columns}
        got.setdefault(f"[{key['id']}]", []).append((hlc_order(time_of(body)), image))
    return {k: [image for _, image in sorted(vs, key=lambda v: v[0])] for k, vs in got.items()}


def check_avro_output(run: Capture, registry: SchemaRegistryClient, decoder: Decoder) -> None:
    """The Avro changefeed's accounts: Debezium's versions per key; the derived schema's types."""
    rows = avro_rows(registry, run.avro_topic, run.avro_output)
    emitted = versions(rows, lambda body: body["updated"])
    assert emitted == debezium_versions(run, "accounts", decoder)
    changes = [m.value for m in run.avro_output if m.key is not None and m.value is not None]
    schema_ids = {int.from_bytes(value[1:5], "big") for value in changes}
    assert len(schema_ids) == 1, schema_ids  # one derived schema: the table never changed
    record = json.loads(registry.get_schema(schema_ids.pop()).schema_str or "")
    after_type = next(f for f in record["fields"] if f["name"] == "after")["type"]
    row = next(t for t in after_type if isinstance(t, dict))
    # each column's type as the converter's says it (the output's row fields are all nullable)
    types = {f["name"]: non_null(f["type"]) for f in row["fields"]}
    assert types == {
        "id": "int",
        "owner": "string",
        "balance": {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 4},
        "visits": "long",
        "active": "boolean",
        "opened": {"type": "long", "logicalType": "timestamp-micros"},
        "profile": "string",
    }, types


def check_enriched_output(run: Capture, registry: SchemaRegistryClient, decoder: Decoder) -> None:
    """The enriched changefeed's accounts: each row names the Debezium event it came from.

    Its op is that event's (a snapshot read's ``c``), its ``before`` the event's, its source
    block the event's LSN and transaction; each source record once (exactly once, counted);
    per key Debezium's versions at ``source.ts_hlc``; markers on every partition.
    """
    columns = SELECTS["accounts"][1]
    topic = run.topics["accounts"]
    rows = avro_rows(registry, run.avro_topic.replace("-avro.", "-enriched."), run.enriched_output)
    assert versions(rows, lambda body: body["source"]["ts_hlc"]) == debezium_versions(
        run, "accounts", decoder
    )
    events = {(m.partition, m.offset): decoder.value(topic, m) for m in run.written[topic]}
    places = [(b["source"]["source_partition"], b["source"]["source_offset"]) for _, b in rows]
    assert len(places) == len(set(places)), "a Debezium event written twice"
    assert len(places) == sum(e is not None for e in events.values())  # every event once
    for _, body in rows:
        assert list(body) == ["before", "after", "source", "ts_ns", "op"]
        block = body["source"]
        event = events[block["source_partition"], block["source_offset"]]
        assert body["op"] == {"r": "c"}.get(event["op"], event["op"])
        assert (block["source_topic"], block["table_name"]) == (topic, "accounts")
        assert (block["origin"], block["primary_keys"]) == ("highwater", ["id"])
        before = body["before"]
        assert (None if before is None else {c: avro_output_text(before[c]) for c in columns}) == (
            None
            if event["before"] is None
            else {c: avro_text(event["before"][c], c) for c in columns}
        )
        if event["op"] != "r":  # a streamed change: PostgreSQL's LSN and transaction
            assert block["db_position"][-1] == event["source"]["lsn"], (block, event["source"])
            # PostgreSQL's xid: Debezium's id ("<xid>:<lsn>") names each event's own LSN
            xid, _, lsn = event["transaction"]["id"].partition(":")
            assert (block["transaction_id"], lsn) == (xid, str(event["source"]["lsn"])), block
    markers = [m for m in run.enriched_output if m.key is None]
    assert {m.partition for m in markers} == {0, 1, 2}


def avro_output_text(value: Any) -> str:
    """A value of the Avro output (confluent-kafka's reading) as psql prints it."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, datetime):
        return pg_timestamp(value.replace(tzinfo=None))
    return str(value)


def test_a_real_debezium_capture_in_avro_through_the_registry_becomes_exact_json(
    kafka_bootstrap: str, schema_registry_url: str, spark: Any
) -> None:
    if not schema_registry_url.rstrip("/").endswith(CCOMPAT):
        pytest.skip("Apicurio's converter needs an Apicurio registry (its ccompat API given)")
    registry = SchemaRegistryClient({"url": schema_registry_url})
    decoder = Decoder(registry)
    run = capture_and_run(kafka_bootstrap, schema_registry_url, spark, decoder)
    check_wire_format(registry, run)
    for table in SELECTS:
        check_table(run, table, decoder)
    check_avro_output(run, registry, decoder)
    check_enriched_output(run, registry, decoder)
    # the values as psql prints them, exactly: 2^53 + 1, NUMERIC's digits, bigint's range
    accounts = run.final["accounts"].splitlines()
    assert accounts[0] == "1|tx2 nulls||9007199254740994|||", accounts
    assert "|-12345678901234.5678|-9223372036854775808|f|1999-12-31 23:59:59.5|" in accounts[2]
    assert run.final["entries"].splitlines() == [
        "9223372036854775807|3|-0.01|123456789012345678901234567890.000000000001||"
        "2038-01-19 03:14:08.000001"
    ]
