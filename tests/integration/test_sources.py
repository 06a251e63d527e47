"""Source formats other than ``native`` on a real broker.

canal-json: hand-built events shaped as TiCDC writes them (TiCDC and TiDB do not run here:
the tests named ``hand_built`` say so; one row or several per event, DDL on partition 0,
watermarks on every partition) become CockroachDB-style envelopes; the
watermarks become resolved markers on every output partition. Read back with confluent-kafka.
The changefeed runs in this process (the format is not about ``spark-submit``).

debezium in Avro: events as Debezium's AvroConverter writes them, registered in the real
registry (Apicurio) by confluent-kafka's serializer, the transaction topic in Avro too.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from pipeline.cli import main as highwater
from pipeline.config import parse_config
from pipeline.core.sources.canal import tso_time
from sinks.admin import ensure_topics
from tests.support.canal import canal, tso, watermark
from tests.support.changefeed import run_to_end
from tests.support.debezium_avro import AVRO_KEY, AVRO_VALUE, TRANSACTION_EVENT
from tests.support.kafka import consume_all


def test_hand_built_canal_json_in_ticdc_shape_becomes_envelopes_with_markers_on_every_partition(
    kafka_bootstrap: str, unique_name: Any, spark: Any
) -> None:
    source, changefeed_id = unique_name("ticdc"), unique_name("cf")
    ensure_topics({"bootstrap.servers": kafka_bootstrap}, {source: 2})
    t = 1_700_000_000_000  # ms
    records = [
        (0, canal("CREATE", tso(t), None, isDdl=True, sql="create table orders (…)")),
        (
            0,
            canal(
                "INSERT",
                tso(t + 1),
                [{"id": "1", "amount": "12345678901234567890.1234567890", "note": "ü 𝄞"}],
            ),
        ),
        (
            1,
            canal(
                "INSERT",
                tso(t + 2),
                [
                    {"id": "2", "amount": "-0.0000000001", "note": None},
                    {"id": "4", "amount": "0", "note": '"q"'},
                ],
            ),
        ),
        (0, watermark(tso(t + 3))),
        (1, watermark(tso(t + 3))),
        (
            0,
            canal(
                "UPDATE",
                tso(t + 4, 1),
                [{"id": "1", "amount": "1.5000000000", "note": "x"}],
                old=[{"amount": "2.0000000000"}],
            ),
        ),
        (1, b'{"type": "INSERT"}'),  # no _tidb: a dead letter, named
        (1, canal("DELETE", tso(t + 5), [{"id": "2", "amount": "-0.0000000001", "note": None}])),
        (0, watermark(tso(t + 6))),
        (1, watermark(tso(t + 6))),
    ]
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for partition, value in records:
        producer.produce(source, value=value, partition=partition)  # TiCDC sends no key
    assert producer.flush(30) == 0
    raw = {
        "changefeed_id": changefeed_id,
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "sources": [{"topic": source, "table": "orders", "format": "canal-json"}],
        "cursor": "0.0000000000",
        "sink": {"topic_prefix": f"{changefeed_id}.", "partitions": 2},
        "encoder": {"updated": True, "diff": True},
        "on_error": "dlq",
        "spark": {"trigger": {"available_now": True}},
    }
    run_to_end(parse_config(raw), spark)

    out = consume_all(kafka_bootstrap, f"{changefeed_id}.orders")
    rows = sorted((m.key, m.value) for m in out if m.key is not None)

    def hlc(ts: int) -> str:
        return str(tso_time(ts, "t"))

    assert rows == sorted(
        [
            (
                b"[1]",
                '{"after":{"id":1,"amount":12345678901234567890.1234567890,"note":"ü 𝄞"},'
                f'"before":null,"updated":"{hlc(tso(t + 1))}"}}'.encode(),
            ),
            (
                b"[2]",
                '{"after":{"id":2,"amount":-0.0000000001,"note":null},"before":null,'
                f'"updated":"{hlc(tso(t + 2))}"}}'.encode(),
            ),
            (
                b"[4]",
                '{"after":{"id":4,"amount":0,"note":"\\"q\\""},"before":null,'
                f'"updated":"{hlc(tso(t + 2))}"}}'.encode(),
            ),
            (
                b"[1]",
                '{"after":{"id":1,"amount":1.5000000000,"note":"x"},'
                '"before":{"id":1,"amount":2.0000000000,"note":"x"},'
                f'"updated":"{hlc(tso(t + 4, 1))}"}}'.encode(),
            ),
            (
                b"[2]",
                '{"after":null,"before":{"id":2,"amount":-0.0000000001,"note":null},'
                f'"updated":"{hlc(tso(t + 5))}"}}'.encode(),
            ),
        ]
    )
    markers = {(m.partition, json.loads(m.value)["resolved"]) for m in out if m.key is None}
    assert {(p, r) for p, r in markers if r == hlc(tso(t + 6))} == {
        (0, hlc(tso(t + 6))),
        (1, hlc(tso(t + 6))),
    }
    dead = consume_all(kafka_bootstrap, f"_highwater_dlq_{changefeed_id}")
    assert [m.value for m in dead] == [b'{"type": "INSERT"}']
    reason = dict(dead[0].headers)["highwater.error"].decode()
    assert "enable-tidb-extension=true" in reason
    assert dict(dead[0].headers)["highwater.source"] == f"{source}/1@2".encode()


def test_debezium_avro_through_a_real_registry_reads_exactly_and_resolves(
    kafka_bootstrap: str, schema_registry_url: str, unique_name: Any, spark: Any
) -> None:
    """Debezium events in Confluent's wire format (AvroConverter's shapes).

    Registered in the real registry by confluent-kafka's serializer; the transaction topic in
    Avro too. Values exact, markers from the Avro transaction topic.
    """
    prefix, changefeed_id = unique_name("dbz"), unique_name("cf")
    orders, transactions = f"{prefix}.public.orders", f"{prefix}.transaction"
    ensure_topics({"bootstrap.servers": kafka_bootstrap}, {orders: 2, transactions: 1})
    registry = SchemaRegistryClient({"url": schema_registry_url})

    def serializer(schema: Any) -> Any:
        return AvroSerializer(registry, json.dumps(schema), conf={"auto.register.schemas": True})

    key_of, value_of, event_of = (serializer(s) for s in (AVRO_KEY, AVRO_VALUE, TRANSACTION_EVENT))
    ms = 1_700_000_000_000

    def row(i: int, amount: str) -> dict[str, Any]:
        return {"id": i, "amount": Decimal(amount), "note": f"ü {i}", "at_ms": ms}

    def change(tx: str, place: int, op: str, after: Any, before: Any = None) -> dict[str, Any]:
        return {
            "before": before,
            "after": after,
            "op": op,
            "source": {
                "connector": "postgresql",
                "ts_ms": ms + int(tx),
                "ts_ns": (ms + int(tx)) * 1_000_000,
                "lsn": place,
                "sequence": json.dumps([tx, str(place)]),
            },
            "ts_ms": ms,
            "transaction": {
                "id": f"{tx}:{place}",
                "total_order": place,
                "data_collection_order": place,
            },
        }

    changes = [
        (1, change("1", 1, "c", row(1, "12345678.90"))),
        (2, change("1", 2, "c", row(2, "-0.01"))),
        (1, change("2", 1, "u", row(1, "0.10"), row(1, "12345678.90"))),
        (2, change("2", 2, "d", None, row(2, "-0.01"))),
    ]
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i, value in changes:
        key = key_of({"id": i}, SerializationContext(orders, MessageField.KEY))
        body = value_of(value, SerializationContext(orders, MessageField.VALUE))
        producer.produce(orders, key=key, value=body, partition=i % 2)
    for tx in ("1", "2"):
        counts = [{"data_collection": "public.orders", "event_count": 2}]
        end = {"status": "END", "id": f"{tx}:9", "event_count": 2, "data_collections": counts}
        end["ts_ms"] = ms + int(tx)
        context = SerializationContext(transactions, MessageField.VALUE)
        producer.produce(transactions, value=event_of(end, context))
    assert producer.flush(30) == 0

    config = parse_config(
        {
            "changefeed_id": changefeed_id,
            "kafka": {"bootstrap_servers": kafka_bootstrap},
            "sources": [
                {
                    "topic": orders,
                    "table": "orders",
                    "format": "debezium",
                    "transactions": transactions,
                    "schema_registry": {"url": schema_registry_url},
                }
            ],
            "initial_scan": "no",
            "sink": {"topic_prefix": f"{changefeed_id}.", "partitions": 2},
            "encoder": {"updated": True},
            "resolved": {"interval": "0s"},
            "checkpoint": {"topic": f"{changefeed_id}.checkpoints"},
            "safepoints": {"enabled": False},
            "spark": {"trigger": {"available_now": True}},
        },
        env={},
    )
    run_to_end(config, spark)
    output = consume_all(kafka_bootstrap, f"{changefeed_id}.orders")
    rows = sorted((m.key, m.value) for m in output if m.key is not None)
    texts = b"\n".join(value for _, value in rows)
    assert b'"amount":12345678.90' in texts  # the scale's digits, never rounded
    assert b'"amount":-0.01' in texts
    assert b'"amount":0.10' in texts
    assert b'"at_ms":"2023-11-14T22:13:20"' in texts  # Connect's Timestamp, as in JSON
    assert b'"note":"\xc3\xbc 1"' in texts
    versions = sorted((json.loads(v) for k, v in rows if k == b"[2]"), key=lambda b: b["updated"])
    assert [b["after"] is None for b in versions] == [False, True]  # inserted, then deleted
    markers = [m for m in output if m.key is None]
    assert {m.partition for m in markers} == {0, 1}
    top = max(json.loads(m.value)["resolved"] for m in markers)
    assert top >= f"{(ms + 2) * 1_000_000}.0000000002"  # past tx 2's last change

    # GC reads the Avro records' times through the registry: all of them lie in 2023, below
    # a GC safe point of now, so both partitions are trimmed to their end (without the
    # registry, the first record does not decode and nothing is trimmed)
    gc = ["gc", "run", "--once", "--topic", orders, "--format", "debezium"]
    gc += ["--gc-life-time", "0s", "--schema-registry", schema_registry_url]
    gc += ["--bootstrap-servers", kafka_bootstrap, "--cluster", changefeed_id]
    gc += ["--safepoint-topic", f"{changefeed_id}.safepoints"]
    assert highwater(gc) == 0
    watermarks = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": changefeed_id})
    try:
        for p in (0, 1):
            low, high = watermarks.get_watermark_offsets(TopicPartition(orders, p), timeout=10)
            assert (low, high) == (high, 2), f"{orders}/{p} trimmed to {low}"
    finally:
        watermarks.close()


def test_hand_built_canal_json_of_a_column_added_in_tidb_evolves_registry_free_avro(
    kafka_bootstrap: str, unique_name: Any, spark: Any
) -> None:
    """canal-json with ``schema_change_policy: evolve`` and Avro without a registry.

    The table is declared as it was; after TiDB's ``ALTER TABLE … ADD COLUMN vip tinyint(1)``
    the events carry ``vip`` and its ``mysqlType``: the output schema gains ``vip: ["null",
    "int"]`` and is published to the schema topic beside the first, and fastavro reads every
    record by the fingerprint in its header. The start names the declared schema's
    difference from the topic's newest events; the status shows the change.
    """
    import io  # noqa: PLC0415

    from fastavro import parse_schema, schemaless_reader  # noqa: PLC0415

    from pipeline.control.changefeeds import Changefeeds  # noqa: PLC0415
    from pipeline.control.context import OperatorContext  # noqa: PLC0415

    source, changefeed_id = unique_name("ticdc"), unique_name("cf")
    ensure_topics({"bootstrap.servers": kafka_bootstrap}, {source: 2})
    t = 1_700_000_000_000  # ms
    wide = {
        "mysqlType": {"id": "int", "amount": "decimal(30,10)", "note": "text", "vip": "tinyint(1)"}
    }
    records = [
        (0, canal("INSERT", tso(t + 1), [{"id": "1", "amount": "1.5000000000", "note": "a"}])),
        (0, canal("ALTER", tso(t + 2), None, isDdl=True, sql="alter table orders add vip …")),
        (
            1,
            canal(
                "INSERT", tso(t + 3), [{"id": "2", "amount": "2", "note": "b", "vip": "1"}], **wide
            ),
        ),
        (
            0,
            canal(
                "INSERT", tso(t + 4), [{"id": "3", "amount": "3", "note": "c", "vip": None}], **wide
            ),
        ),
        *((p, watermark(tso(t + 5))) for p in (0, 1)),
    ]
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for partition, value in records:
        producer.produce(source, value=value, partition=partition)
    assert producer.flush(30) == 0
    declared = {
        "type": "record",
        "name": "orders",
        "fields": [
            {"name": "id", "type": "int"},
            {
                "name": "amount",
                "type": [
                    "null",
                    {"type": "bytes", "logicalType": "decimal", "precision": 30, "scale": 10},
                ],
            },
            {"name": "note", "type": ["null", "string"]},
        ],
    }
    schema_topic = f"{changefeed_id}.schemas"
    config = parse_config(
        {
            "changefeed_id": changefeed_id,
            "kafka": {"bootstrap_servers": kafka_bootstrap},
            "sources": [
                {
                    "topic": source,
                    "table": "orders",
                    "format": "canal-json",
                    "table_schema": declared,
                    "primary_key": ["id"],
                }
            ],
            "cursor": "0.0000000000",
            "schema_change_policy": "evolve",
            "sink": {"topic_prefix": f"{changefeed_id}.", "partitions": 1},
            "encoder": {"format": "avro", "updated": True, "schema_topic": schema_topic},
            "spark": {"trigger": {"available_now": True}},
        }
    )
    run_to_end(config, spark)
    schemas = {
        bytes.fromhex(m.key.decode()): json.loads(m.value)
        for m in consume_all(kafka_bootstrap, schema_topic)
    }

    def decode(data: bytes) -> Any:
        assert data[:2] == b"\xc3\x01", "single-object encoding"
        return schemaless_reader(io.BytesIO(data[10:]), parse_schema(schemas[data[2:10]]), None)

    out = [m for m in consume_all(kafka_bootstrap, f"{changefeed_id}.orders") if m.key is not None]
    rows = sorted((decode(m.key)["id"], sorted(decode(m.value)["after"].items())) for m in out)
    assert rows == [
        (1, [("amount", Decimal("1.5000000000")), ("id", 1), ("note", "a")]),
        (2, [("amount", Decimal("2.0000000000")), ("id", 2), ("note", "b"), ("vip", 1)]),
        (3, [("amount", Decimal("3.0000000000")), ("id", 3), ("note", "c"), ("vip", None)]),
    ]
    envelopes = [
        s for s in schemas.values() if s["name"] == "orders_envelope" and len(s["fields"]) > 1
    ]
    assert len(envelopes) == 2  # the declared one and the grown one, both published
    found = Changefeeds(OperatorContext({"bootstrap.servers": kafka_bootstrap})).get(changefeed_id)
    assert found.status is not None
    assert (found.status.schemas or {})["orders"]["added"] == ["vip"]
    assert any("column(s) vip not declared" in w for w in found.status.warnings)
