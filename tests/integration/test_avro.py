"""Avro output on a real broker, Spark and schema registry, read back by real clients."""

import copy
import io
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from fastavro import parse_schema, schemaless_reader

from pipeline.config import ChangefeedConfig
from pipeline.core.coordinator.changefeed import Changefeed
from pipeline.dev.demo import avro_consumer
from pipeline.dev.generator import GeneratorSpec, write
from pipeline.dev.kafka_tools import run_tool
from schemas.errors import SchemaError
from tests.integration.test_changefeed import produce
from tests.support.changefeed import changefeed_config, run_to_end
from tests.support.kafka import consume_all

ORDERS = json.loads((Path(__file__).resolve().parents[2] / "examples" / "orders.avsc").read_text())
KEY = ["region", "order_id"]
ENCODER = {"updated": True, "diff": True}


def config_for(
    bootstrap: str, name: str, source: str, schema: dict | None = None, **encoder: Any
) -> ChangefeedConfig:
    return changefeed_config(
        bootstrap,
        name,
        [
            {
                "topic": source,
                "table": "orders",
                "table_schema": schema or ORDERS,
                "primary_key": KEY,
            }
        ],
        encoder={**ENCODER, **encoder},
        # several batches: the encoder goes to the executors again after markers used it
        spark={"trigger": {"available_now": True}, "max_offsets_per_trigger": 250},
    )


def source_rows(bootstrap: str, topic: str) -> list[tuple]:
    """Every distinct change of the source topic, read with the standard library."""

    def full(row: dict | None) -> str:  # as an Avro reader sees a row: every declared column
        columns = None if row is None else {f["name"]: row.get(f["name"]) for f in ORDERS["fields"]}
        return json.dumps(columns, sort_keys=True)

    changes = set()
    for m in consume_all(bootstrap, topic):
        if m.key is not None:
            value = json.loads(m.value)
            updated = value["updated"]
            changes.add(
                (
                    tuple(json.loads(m.key)),
                    updated,
                    full(value.get("after")),
                    full(value.get("before")),
                )
            )
    return sorted(changes)


def as_row(key: dict, value: dict) -> tuple:
    return (
        (key["region"], key["order_id"]),
        value["updated"],
        json.dumps(value["after"], sort_keys=True),
        json.dumps(value["before"], sort_keys=True),
    )


def consume_avro(bootstrap: str, topic: str, registry_url: str) -> list[Any]:
    """Every record of ``topic`` through confluent-kafka's AvroDeserializer."""
    consumer = avro_consumer(bootstrap, registry_url, f"avro-check-{topic}-{uuid.uuid4()}")
    expected = len(consume_all(bootstrap, topic))
    consumer.subscribe([topic])
    messages = []
    try:
        while len(messages) < expected:
            message = consumer.poll(10)
            assert message is not None, f"only {len(messages)} of {expected} records"
            assert message.error() is None
            messages.append(message)
    finally:
        consumer.close()
    return messages


@pytest.fixture
def history(kafka_bootstrap: str, unique_name) -> str:
    source = unique_name("src")
    write(
        GeneratorSpec(topic=source, rows=600, partitions=2, resolved_every=100, seed=4),
        {"bootstrap.servers": kafka_bootstrap},
    )
    return source


def test_registry_avro_decodes_with_confluent_and_equals_the_source_rows(
    kafka_bootstrap: str, schema_registry_url: str, unique_name, spark, history: str
) -> None:
    as_avro = config_for(
        kafka_bootstrap,
        unique_name("avro"),
        history,
        format="avro",
        schema_registry={"url": schema_registry_url},
    )
    run_to_end(as_avro, spark)
    topic = as_avro.output_topic(as_avro.sources[0])
    messages = consume_avro(kafka_bootstrap, topic, schema_registry_url)
    rows = [m for m in messages if m.key() is not None]
    markers = [m for m in messages if m.key() is None]
    assert sorted(as_row(m.key(), m.value()) for m in rows) == source_rows(kafka_bootstrap, history)
    assert {m.partition() for m in markers} == {0, 1, 2}, "markers on every partition"
    assert all(m.value().keys() == {"resolved"} and m.value()["resolved"] for m in markers)
    assert all(m.value()["updated"] for m in rows)
    subjects = SchemaRegistryClient({"url": schema_registry_url}).get_subjects()
    assert {f"{topic}-key", f"{topic}-value"} <= set(subjects)


def test_registry_free_avro_decodes_with_fastavro_and_the_schema_topic(
    kafka_bootstrap: str, unique_name, spark, history: str
) -> None:
    as_avro = config_for(
        kafka_bootstrap, unique_name("avro"), history, format="avro", schema_topic=unique_name("s")
    )
    run_to_end(as_avro, spark)
    schemas = {
        bytes.fromhex(m.key.decode()): parse_schema(json.loads(m.value))
        for m in consume_all(kafka_bootstrap, as_avro.encoder.schema_topic)
    }

    def decode(data: bytes) -> dict:
        assert data[:2] == b"\xc3\x01", "single-object encoding"
        return schemaless_reader(io.BytesIO(data[10:]), schemas[data[2:10]], None)

    records = consume_all(kafka_bootstrap, as_avro.output_topic(as_avro.sources[0]))
    rows = [(decode(m.key), decode(m.value)) for m in records if m.key is not None]
    markers = [decode(m.value) for m in records if m.key is None]
    assert sorted(as_row(k, v) for k, v in rows) == source_rows(kafka_bootstrap, history)
    assert markers
    assert all(set(m) == {"resolved"} for m in markers)


def test_schema_change_registers_a_version_or_is_refused_naming_the_subject(
    kafka_bootstrap: str, schema_registry_url: str, unique_name, spark, history: str
) -> None:
    name = unique_name("avro")
    registry = {"url": schema_registry_url}
    first = config_for(kafka_bootstrap, name, history, format="avro", schema_registry=registry)
    run_to_end(first, spark)
    topic = first.output_topic(first.sources[0])
    client = SchemaRegistryClient(registry)
    before = client.get_versions(f"{topic}-value")

    grown = copy.deepcopy(ORDERS)
    grown["fields"].append({"name": "channel", "type": ["null", "string"], "default": None})
    write(  # new changes carry the new column
        GeneratorSpec(topic=history, rows=50, partitions=2, resolved_every=25, first_order_id=9000),
        {"bootstrap.servers": kafka_bootstrap},
    )
    second = config_for(
        kafka_bootstrap, name, history, grown, format="avro", schema_registry=registry
    )
    run_to_end(second, spark)  # resumes from the checkpoint with the added column
    after = client.get_versions(f"{topic}-value")
    assert len(after) == len(before) + 1, "one new compatible version of the envelope"
    rows = [m.value() for m in consume_avro(kafka_bootstrap, topic, schema_registry_url) if m.key()]
    # The second run's rows (orders from 9000 on) carry the column; deletes have no after.
    grown_rows = [v["after"] for v in rows if v["after"] and v["after"]["order_id"] >= 9000]
    assert grown_rows
    assert all("channel" in after for after in grown_rows)

    incompatible = copy.deepcopy(ORDERS)
    key_field = next(f for f in incompatible["fields"] if f["name"] == "order_id")
    key_field["type"] = "string"  # old keys (longs) could not be read any more
    third = config_for(
        kafka_bootstrap, name, history, incompatible, format="avro", schema_registry=registry
    )
    with pytest.raises(SchemaError) as refused:
        Changefeed(third, spark).run()
    assert f"subject '{topic}-key'" in str(refused.value)
    assert "ncompatible" in str(refused.value)  # the registry's own reason


def test_values_that_do_not_fit_the_avro_types_go_where_on_error_says(
    kafka_bootstrap: str, unique_name, spark
) -> None:
    source = unique_name("src")
    good = {"region": "eu", "order_id": 1, "amount": 5.0}
    misfit = {"region": "eu", "order_id": 2, "amount": "lots"}
    produce(
        kafka_bootstrap,
        source,
        [
            (0, ["eu", 1], {"after": good, "updated": "1700000000000000001.0000000000"}),
            (0, ["eu", 2], {"after": misfit, "updated": "1700000000000000002.0000000000"}),
            (0, None, {"resolved": "1700000000000000002.0000000000"}),
        ],
    )
    config = config_for(
        kafka_bootstrap, unique_name("avro"), source, format="avro", schema_topic=unique_name("s")
    ).model_copy(update={"on_error": "dlq"})
    run_to_end(config, spark)
    rows = [
        m for m in consume_all(kafka_bootstrap, config.output_topic(config.sources[0])) if m.key
    ]
    assert len(rows) == 1
    (dead,) = consume_all(kafka_bootstrap, config.effective_dlq_topic)
    assert json.loads(dead.value)["after"] == misfit
    reason = dict(dead.headers)["highwater.error"].decode()
    assert reason.startswith("value does not fit the declared schema of table 'orders'")
    assert dict(dead.headers)["highwater.source"] == f"{source}/0@1".encode()


def segment_batches(bootstrap: str, topic: str) -> list[tuple[int, str]]:
    """``topic``'s data batches as Kafka's own tools read its log: (records, compression)."""
    described = run_tool("log-dirs", ["--describe", "--topic-list", topic], bootstrap).stdout
    report = json.loads(next(line for line in described.splitlines() if line.startswith("{")))
    files = [
        f"{log_dir['logDir']}/{part['partition']}/{0:020d}.log"
        for broker in report["brokers"]
        for log_dir in broker["logDirs"]
        for part in log_dir["partitions"]
    ]
    dumped = run_tool("dump-log", ["--files", ",".join(files)], None).stdout
    batches = [line for line in dumped.splitlines() if "isControl: false" in line]
    assert batches, dumped[-2000:]
    return [
        (int(line.split("count: ")[1].split()[0]), line.split("compresscodec: ")[1].split()[0])
        for line in batches
    ]


def test_cockroachdb_names_prefix_the_subjects_and_reach_the_producers(
    kafka_bootstrap: str, schema_registry_url: str, unique_name, spark, history: str
) -> None:
    """`avro_schema_prefix` and `kafka_sink_config`, as a CockroachDB user brings them."""
    from pipeline.control.changefeeds import Changefeeds  # noqa: PLC0415
    from pipeline.control.context import OperatorContext  # noqa: PLC0415

    prefix = f"moved_{uuid.uuid4().hex[:8]}"
    name = unique_name("crdb")
    sink_config = {
        "Flush": {"Frequency": "20ms", "Bytes": 131072},
        "Compression": "ZSTD",
        "CompressionLevel": 5,
        "ClientID": "moved-from-cockroachdb",
        "RequiredAcks": "ALL",
        "Version": "2.7.0",
    }
    config = changefeed_config(
        kafka_bootstrap,
        name,
        [{"topic": history, "table": "orders", "table_schema": ORDERS, "primary_key": KEY}],
        encoder={
            **ENCODER,
            "format": "avro",
            "schema_registry": {"url": schema_registry_url},
            "avro_schema_prefix": prefix,
        },
        sink={"kafka_sink_config": json.dumps(sink_config)},  # CockroachDB's JSON text
    )
    run_to_end(config, spark)
    topic = config.output_topic(config.sources[0])
    messages = consume_avro(kafka_bootstrap, topic, schema_registry_url)
    rows = [m for m in messages if m.key() is not None]
    assert sorted(as_row(m.key(), m.value()) for m in rows) == source_rows(kafka_bootstrap, history)
    assert {m.partition() for m in messages if m.key() is None} == {0, 1, 2}
    # the subjects carry the prefix, the records its namespace
    registry = SchemaRegistryClient({"url": schema_registry_url})
    subjects = set(registry.get_subjects())
    assert {f"{prefix}{topic}-key", f"{prefix}{topic}-value"} <= subjects
    assert not {f"{topic}-key", f"{topic}-value"} & subjects
    for side in ("key", "value"):
        schema = json.loads(
            registry.get_latest_version(f"{prefix}{topic}-{side}").schema.schema_str
        )
        assert schema["namespace"] == prefix
    # the producers took Compression: Kafka's tool reads zstd batches of rows on the output,
    # and the generator's lz4 on the source (the reading tells them apart)
    # (the markers' batches of one record, the driver's, are not compressed)
    written = segment_batches(kafka_bootstrap, topic)
    assert {codec for count, codec in written if count > 1} == {"zstd"}
    assert {codec for count, codec in written if count == 1} <= {"zstd", "none"}
    assert {codec for _, codec in segment_batches(kafka_bootstrap, history)} == {"lz4"}
    # what has no Java producer equivalent is named in the job's status
    found = Changefeeds(OperatorContext({"bootstrap.servers": kafka_bootstrap})).get(name)
    assert found.status is not None
    named = [w.split(" ")[0] for w in found.status.warnings if w.startswith("sink.")]
    assert named == ["sink.kafka_sink_config.Version"]
