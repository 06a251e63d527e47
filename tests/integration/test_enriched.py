"""`envelope: enriched` on the real broker and Spark, exactly once, read back by real clients.

A native source's creates, updates and deletes (its table declared, so the key's columns have
names): confluent-kafka reads each record's key as an object of the key's columns and its
value as CockroachDB's enriched envelope (``after``, ``before``, ``key``, ``op``, ``source``,
``ts_ns``), the source block naming the changefeed, the table and the very source record it
came from, its commit time ``ts_hlc``; markers on every partition; the consumer library hands
the rows over in windows at those commit times.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from highwater_consumer import ChangefeedConsumer, Output
from pipeline.runtime.jars import broker_classpath
from schemas.hlc import Hlc
from schemas.jsontext import loads_exact
from sinks.admin import ensure_topics
from tests.integration.test_exactly_once import produce
from tests.support.changefeed import changefeed_config, run_to_end
from tests.support.kafka import consume_all

T0 = 1_700_000_000_000_000_000
SCHEMA = {
    "type": "record",
    "name": "orders",
    "fields": [
        {"name": "region", "type": "string"},
        {"name": "order_id", "type": "long"},
        {"name": "amount", "type": ["null", "double"], "default": None},
    ],
}


def change(t: int, order: int, after: Any, before: Any) -> tuple[bytes, bytes]:
    value = {"after": after, "before": before, "updated": f"{T0 + t}.0000000000"}
    return json.dumps(["eu", order]).encode(), json.dumps(value).encode()


def test_enriched_records_carry_op_source_and_their_commit_time(
    kafka_bootstrap: str, unique_name: Any, spark: Any
) -> None:
    source = unique_name("src")
    ensure_topics({"bootstrap.servers": kafka_bootstrap}, {source: 2})
    row = {"region": "eu", "order_id": 1, "amount": 1.50}
    changes = [
        (0, *change(1, 1, row, None)),  # a create
        (0, *change(2, 1, {**row, "amount": 2.25}, row)),  # an update, its version before
        (1, *change(3, 2, {**row, "order_id": 2}, None)),
        (0, *change(4, 1, None, {**row, "amount": 2.25})),  # a delete
    ]
    marker = json.dumps({"resolved": f"{T0 + 5}.0000000000"}).encode()
    produce(kafka_bootstrap, source, [*changes, *((p, None, marker) for p in (0, 1))])
    name = unique_name("enriched")
    declared = {"topic": source, "table": "orders", "table_schema": SCHEMA}
    config = changefeed_config(
        kafka_bootstrap,
        name,
        [declared | {"primary_key": ["region", "order_id"]}],
        encoder={
            "envelope": "enriched",
            "enriched_properties": ["source"],
            "updated": True,
            "diff": True,
            "key_in_value": True,
        },
    )
    run_to_end(config, spark)

    records = consume_all(kafka_bootstrap, config.output_topic(config.sources[0]))
    assert {m.partition for m in records if m.key is None} == {0, 1, 2}, "markers everywhere"
    rows = sorted(
        (json.loads(m.value or b"") for m in records if m.key is not None),
        key=lambda v: v["source"]["ts_hlc"],
    )
    assert [r["op"] for r in rows] == ["c", "u", "c", "d"]
    for value, (partition, key, written) in zip(rows, changes, strict=True):
        assert list(value) == ["after", "before", "key", "op", "source", "ts_ns"]
        sent = json.loads(written)
        assert (value["after"], value["before"]) == (sent["after"], sent["before"])
        assert value["key"] == dict(zip(["region", "order_id"], json.loads(key), strict=True))
        block = value["source"]
        assert (block["job_id"], block["table_name"], block["origin"]) == (
            name,
            "orders",
            "highwater",
        )
        assert (block["source_topic"], block["source_partition"]) == (source, partition)
        assert block["ts_hlc"] == sent["updated"]
        assert block["primary_keys"] == ["region", "order_id"]
    offsets = [v["source"]["source_offset"] for v in rows if v["source"]["source_partition"] == 0]
    assert offsets == [0, 1, 2]
    keys = {m.key for m in records if m.key is not None}
    assert b'{"region":"eu","order_id":1}' in keys

    output = Output.of_changefeed(kafka_bootstrap, name)
    with ChangefeedConsumer(output, unique_name("reader")) as consumer:
        windows = list(consumer.windows(until=Hlc(T0 + 5), idle=30))
    read = [r for w in windows for r in w.rows]
    assert sorted(str(r.updated) for r in read) == [json.loads(v)["updated"] for _, _, v in changes]


CONNECT_READ = Path(__file__).parents[1] / "support" / "java" / "ConnectRead.java"


def connect_read(records: list[tuple[bytes, bytes]]) -> list[str]:
    """Each record as Kafka Connect's JsonConverter reads it (``ConnectRead.java``)."""
    lines = "".join(f"{key.hex()} {value.hex()}\n" for key, value in records)
    done = subprocess.run(
        ["java", "-cp", broker_classpath(), str(CONNECT_READ)],
        input=lines,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout.rstrip("\n").split("\n")  # not splitlines: values hold U+2028


def test_enriched_json_with_its_schema_is_what_kafka_connects_json_converter_reads(
    kafka_bootstrap: str, unique_name: Any, spark: Any
) -> None:
    """``enriched_properties: [source, schema]``: each key and value a Connect envelope."""
    source = unique_name("src")
    ensure_topics({"bootstrap.servers": kafka_bootstrap}, {source: 1})
    row = {"region": "eu ✓ \u2028", "order_id": 1, "amount": 1.50}
    changes = [
        (0, *change(1, 1, row, None)),
        (0, *change(2, 1, {**row, "amount": -0.0}, row)),
        (0, *change(3, 1, None, {**row, "amount": -0.0})),
    ]
    marker = json.dumps({"resolved": f"{T0 + 5}.0000000000"}).encode()
    produce(kafka_bootstrap, source, [*changes, (0, None, marker)])
    name = unique_name("schemaed")
    declared = {"topic": source, "table": "orders", "table_schema": SCHEMA}
    encoder = {"envelope": "enriched", "enriched_properties": ["source", "schema"]}
    config = changefeed_config(
        kafka_bootstrap,
        name,
        [declared | {"primary_key": ["region", "order_id"]}],
        encoder=encoder | {"updated": True, "diff": True, "key_in_value": True},
    )
    run_to_end(config, spark)

    records = consume_all(kafka_bootstrap, config.output_topic(config.sources[0]))
    rows = [(m.key, m.value or b"") for m in records if m.key is not None]
    assert [json.loads(v)["payload"]["op"] for _, v in rows] == ["c", "u", "d"]
    read = [line.split("\t") for line in connect_read(rows)]
    assert [len(r) for r in read] == [3, 3, 3], read
    assert {k for k, _, _ in read} == {"Struct{region=eu,order_id=1}"}  # the source's key
    assert {name for _, name, _ in read} == {"highwater.envelope"}
    created, updated, deleted = (v for _, _, v in read)
    assert created.startswith("Struct{after=Struct{region=eu ✓ \u2028,order_id=1,amount=1.5},")
    assert "before=Struct{region=eu ✓ \u2028,order_id=1,amount=1.5}" in updated
    assert ",op=u" in updated
    assert "after=" not in deleted  # null: Connect's Struct leaves it out
    assert ",op=d" in deleted
    assert "source=Struct{changefeed_sink=kafka," in created
    # the consumer library reads the payloads: windows at their commit times
    output = Output.of_changefeed(kafka_bootstrap, name)
    with ChangefeedConsumer(output, unique_name("reader")) as consumer:
        windows = list(consumer.windows(until=Hlc(T0 + 5), idle=30))
    handed = [r for w in windows for r in w.rows]
    assert [str(r.updated) for r in handed] == [json.loads(v)["updated"] for _, _, v in changes]
    assert {json.dumps(r.key_values) for r in handed} == {'{"region": "eu", "order_id": 1}'}
    assert [r.after for r in handed] == [loads_exact(v)["after"] for _, _, v in changes]
    # the negative control: CockroachDB's `after` (not optional) under a delete is refused
    key, value = rows[2]
    strict = value.replace(
        b'"name":"orders.after.value","optional":true',
        b'"name":"orders.after.value","optional":false',
    )
    assert strict != value
    (refused,) = connect_read([(key, strict)])
    assert refused.startswith("ERROR"), refused
