"""CockroachDB's option names: `kafka_sink_config` as producer settings, `avro_schema_prefix`.

The config is what users bring from `CREATE CHANGEFEED ... WITH kafka_sink_config='{...}'`:
each key's producer setting, the keys refused by their path, the keys taken without an
equivalent named in the run's warnings, and the reference naming every CockroachDB option.
"""

import json
from typing import Any

import pytest

from pipeline.config import parse_config
from pipeline.dev.reference.config import cockroachdb_names, render
from schemas.avro import OutputSchemas
from schemas.errors import ConfigError
from schemas.tables import TableSchema
from tests.unit.test_config import minimal, problems

MOVED = {
    "Flush": {"Frequency": "1s", "Bytes": 1048576, "Messages": 100, "MaxMessages": 1000},
    "Compression": "ZSTD",
    "CompressionLevel": 3,
    "ClientID": "orders-feed",
    "RequiredAcks": "ALL",
    "Version": "2.7.0",
}


def sink(kafka_sink_config: Any, **more: Any) -> dict[str, Any]:
    return minimal(sink={"kafka_sink_config": kafka_sink_config, **more})


def test_kafka_sink_config_as_cockroachdb_writes_it_becomes_the_producer_settings() -> None:
    for written in (MOVED, json.dumps(MOVED)):  # a mapping, or the JSON text CockroachDB takes
        config = parse_config(sink(written), env={})
        assert config.sink.producer_settings == {
            "linger.ms": "1000",
            "batch.size": "1048576",
            "compression.type": "zstd",
            "compression.zstd.level": "3",
            "client.id": "orders-feed",
        }


def test_the_keys_without_a_java_equivalent_are_taken_and_named_in_the_warnings() -> None:
    config = parse_config(sink(MOVED), env={})
    assert config.sink.kafka_sink_config is not None
    warned = config.sink.kafka_sink_config.warnings()
    assert [w.split(" ")[0] for w in warned] == [
        "sink.kafka_sink_config.Flush.Messages",
        "sink.kafka_sink_config.Flush.MaxMessages",
        "sink.kafka_sink_config.Version",
    ]
    assert (
        parse_config(sink({"Compression": "lz4"}), env={}).sink.kafka_sink_config.warnings() == []
    )  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("written", "path", "words"),
    [
        ({"Flush": {"Frequncy": "1s"}}, "sink.kafka_sink_config.Flush.Frequncy", "'Frequency'"),
        ({"Acks": "ALL"}, "sink.kafka_sink_config.Acks", "known keys: ClientID"),
        ({"RequiredAcks": "ONE"}, "sink.kafka_sink_config.RequiredAcks", "acks=all"),
        ({"RequiredAcks": "NONE"}, "sink.kafka_sink_config.RequiredAcks", "acks=all"),
        ({"RequiredAcks": "MOST"}, "sink.kafka_sink_config.RequiredAcks", "'ALL'"),
        ({"Compression": "BROTLI"}, "sink.kafka_sink_config.Compression", "'ZSTD'"),
        ({"CompressionLevel": 3}, "sink.kafka_sink_config.CompressionLevel", "GZIP, LZ4 or ZSTD"),
        (
            {"Compression": "SNAPPY", "CompressionLevel": 3},
            "sink.kafka_sink_config.CompressionLevel",
            "SNAPPY",
        ),
        ({"Flush": {"Frequency": "soon"}}, "sink.kafka_sink_config.Flush.Frequency", "duration"),
        ({"Flush": {"Bytes": 0}}, "sink.kafka_sink_config.Flush.Bytes", "greater than 0"),
        ('{"Flush": ', "sink.kafka_sink_config", "not a JSON object"),
    ],
)
def test_a_wrong_key_or_value_is_refused_by_its_key_path(
    written: Any, path: str, words: str
) -> None:
    found = problems(sink(written))
    assert path in found, found
    assert words in found[path], found[path]


def test_a_setting_given_twice_is_refused_naming_it() -> None:
    found = problems(sink({"Compression": "GZIP"}, producer={"compression.type": "lz4"}))
    assert "compression.type" in found["sink.kafka_sink_config"]
    # apart, both count: producer's own settings beside the mapped ones
    both = parse_config(sink({"ClientID": "x"}, producer={"linger.ms": "20"}), env={})
    assert both.sink.producer_settings == {"client.id": "x", "linger.ms": "20"}


def test_avro_schema_prefix_is_the_records_namespace_and_needs_avro() -> None:
    record = {
        "type": "record",
        "name": "orders",
        "fields": [{"name": "id", "type": "long"}, {"name": "note", "type": "string"}],
    }
    table = TableSchema.of(record, ("id",))
    declared = [
        {"topic": "src.orders", "table": "orders", "table_schema": record, "primary_key": ["id"]}
    ]

    def avro(**encoder: Any) -> dict[str, Any]:
        return minimal(sources=declared, encoder={"format": "avro", **encoder})

    config = parse_config(avro(diff=True, avro_schema_prefix="moved.crdb"), env={})
    schemas = OutputSchemas.of(table, config.encoder)
    assert {s["namespace"] for s in (schemas.key, schemas.value, schemas.resolved)} == {
        "moved.crdb"
    }
    plain = OutputSchemas.of(table, parse_config(avro(), env={}).encoder)
    assert "namespace" not in plain.value
    assert problems(minimal(encoder={"avro_schema_prefix": "crdb"}))["encoder.avro_schema_prefix"]
    assert (
        "pattern"
        in problems(minimal(encoder={"format": "avro", "avro_schema_prefix": "9x"}))[
            "encoder.avro_schema_prefix"
        ]
    )


def test_the_reference_names_each_cockroachdb_option_beside_highwaters() -> None:
    names = cockroachdb_names()
    assert names["kafka_sink_config"] == "sink.kafka_sink_config"
    assert names["avro_schema_prefix"] == "encoder.avro_schema_prefix"
    assert names["resolved"] == "resolved.interval"
    assert names["confluent_schema_registry"] == "encoder.schema_registry"
    text = render()
    assert "| `avro_schema_prefix` | `avro_schema_prefix` |" in text
    assert "| `interval` | `resolved` |" in text


def test_an_unmapped_config_still_parses_without_the_new_options() -> None:
    config = parse_config(minimal(), env={})
    assert config.sink.kafka_sink_config is None
    assert config.sink.producer_settings == {}
    with pytest.raises(ConfigError):
        parse_config(sink(["Flush"]), env={})


def test_extra_headers_become_our_interceptors_settings_after_the_users_own() -> None:
    from pipeline.core.batch.kafka_clients import writer_options  # noqa: PLC0415

    written = '{"zone": "eu-west-1", "app": "örders ✓"}'  # CockroachDB's JSON text
    config = parse_config(
        sink({"ClientID": "x"}, extra_headers=written, producer={"interceptor.classes": "a.B"}),
        env={},
    )
    assert config.sink.extra_headers == {"zone": "eu-west-1", "app": "örders ✓"}
    options = writer_options(
        config.sink_kafka, config.sink.producer_settings, config.sink.extra_headers
    )
    assert options["kafka.interceptor.classes"] == "a.B,dev.highwater.sink.ExtraHeaders"
    assert json.loads(options["kafka.highwater.extra.headers"]) == config.sink.extra_headers
    plain = writer_options(config.sink_kafka, {}, None)
    assert not any("interceptor" in k or "extra" in k for k in plain)


@pytest.mark.parametrize(
    ("written", "path", "words"),
    [
        ({"highwater.error": "x"}, "sink.extra_headers", "Highwater's own"),
        ({"zone": 1}, "sink.extra_headers.zone", "string"),
        ({"": "x"}, "sink.extra_headers", "at least 1"),
        ('["zone"]', "sink.extra_headers", "dictionary"),
        ('{"zone": ', "sink.extra_headers", "not a JSON object"),
    ],
)
def test_wrong_extra_headers_are_refused_by_key_path(written: Any, path: str, words: str) -> None:
    found = problems(minimal(sink={"extra_headers": written}))
    assert any(p.startswith(path) and words in r for p, r in found.items()), found
