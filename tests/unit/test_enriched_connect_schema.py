"""`enriched_properties: [schema]` in JSON: each key and value beside its Kafka Connect schema.

CockroachDB's shape: ``{"payload": <the enriched envelope>, "schema": <a Connect struct>}``,
the key ``{"payload": <the key object>, "schema": <table>.key}``, resolved markers as they
are; the schema derived from the declared table, each column's Connect type, its members in
alphabetical order; a row with a column the table lacks is a schema change, never a column
its schema does not describe. (Kafka Connect's own JsonConverter reads the records in
tests/integration/test_enriched.py.)
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from encoders.enriched import EnrichedJsonEncoder
from pipeline.config import EncoderConfig
from schemas.connect_schema import SOURCE, enriched_schema, key_schema, node
from schemas.errors import SchemaChange
from schemas.tables import TableSchema
from tests.unit.test_config import minimal, problems
from tests.unit.test_enriched import CTX, TS, change

TABLE = TableSchema.of(
    {
        "type": "record",
        "name": "orders",
        "fields": [
            {"name": "region", "type": "string"},
            {"name": "id", "type": "long"},
            {"name": "n", "type": ["null", "double"], "default": None},
        ],
    },
    ["region", "id"],
)
SCHEMA = EncoderConfig(
    envelope="enriched",
    enriched_properties=["source", "schema"],
    updated=True,
    diff=True,
    key_in_value=True,
)
COLUMNS = [
    {"field": "region", "optional": False, "type": "string"},
    {"field": "id", "optional": False, "type": "int64"},
    {"field": "n", "optional": True, "type": "double"},
]


def test_the_value_is_its_payload_beside_cockroachdbs_schema() -> None:
    encoder = EnrichedJsonEncoder(SCHEMA, "cf", TABLE)
    plain = EnrichedJsonEncoder(SCHEMA.model_copy(update={"enriched_properties": ["source"]}), "cf")
    row = change("update", {"region": "eu", "id": 7, "n": 1.5}, {"region": "eu", "id": 7})
    value = json.loads(encoder.value(row, CTX))
    assert list(value) == ["payload", "schema"]
    without = json.loads(plain.value(row, CTX))
    assert {**value["payload"], "ts_ns": 0} == {**without, "ts_ns": 0}
    schema = value["schema"]
    assert (schema["name"], schema["type"], schema["optional"]) == (
        "highwater.envelope",
        "struct",
        False,
    )
    fields = schema["fields"]
    assert [f["field"] for f in fields] == ["before", "after", "source", "key", "ts_ns", "op"]
    before, after, source, key = fields[:4]
    assert (before["name"], before["fields"]) == ("orders.before.value", COLUMNS)
    assert (after["name"], after["fields"], after["optional"]) == (
        "orders.after.value",
        COLUMNS,
        True,  # a delete's after is null (CockroachDB says not optional; Connect would refuse)
    )
    # every field of the block, as CockroachDB lists them (mvcc_timestamp: only its option)
    assert [f["field"] for f in source["fields"]] == [name for name, _, _ in SOURCE]
    assert set(value["payload"]["source"]) == {name for name, _, _ in SOURCE} - {"mvcc_timestamp"}
    assert (key["name"], key["fields"]) == ("orders.key", COLUMNS[:2])
    assert fields[4:] == [
        {"field": "ts_ns", "optional": False, "type": "int64"},
        {"field": "op", "optional": False, "type": "string"},
    ]
    _alphabetical(schema)


def _alphabetical(node_: Any) -> None:
    """Every node's members in order, as CockroachDB prints its JSON."""
    if isinstance(node_, dict):
        assert list(node_) == sorted(node_), node_
        for child in node_.values():
            _alphabetical(child)
    elif isinstance(node_, list):
        for child in node_:
            _alphabetical(child)


def test_the_key_is_its_object_beside_its_schema_and_markers_are_as_they_are() -> None:
    encoder = EnrichedJsonEncoder(SCHEMA, "cf", TABLE)
    row = change("insert", {"region": "eu", "id": 7}, None)
    assert json.loads(encoder.key(row, CTX)) == {
        "payload": {"region": "eu", "id": 7},
        "schema": {
            "fields": COLUMNS[:2],
            "name": "orders.key",
            "optional": False,
            "type": "struct",
        },
    }
    assert json.loads(encoder.resolved(TS, CTX)) == {"resolved": str(TS)}
    keyed = EnrichedJsonEncoder(SCHEMA.model_copy(update={"key_column": "n"}), "cf", TABLE)
    assert json.loads(keyed.key(change("insert", {"region": "eu", "id": 7, "n": 2.5}, None), CTX))[
        "schema"
    ]["fields"] == [COLUMNS[2]]


def test_a_column_the_declared_table_lacks_is_a_schema_change() -> None:
    encoder = EnrichedJsonEncoder(SCHEMA, "cf", TABLE)
    with pytest.raises(SchemaChange, match="added"):
        encoder.value(change("insert", {"region": "eu", "id": 7, "added": 1}, None), CTX)
    with pytest.raises(SchemaChange):  # in the version before too
        encoder.value(change("delete", None, {"region": "eu", "id": 7, "added": 1}), CTX)


@pytest.mark.parametrize(
    ("avro", "connect"),
    [
        (
            {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2},
            {
                "name": "decimal",
                "optional": False,
                "parameters": {"precision": "12", "scale": "2"},
                "type": "double",
            },
        ),
        (
            {"type": "int", "logicalType": "date"},
            {"name": "date", "optional": False, "type": "string"},
        ),
        (
            ["null", {"type": "long", "logicalType": "timestamp-micros"}],
            {"name": "timestamp", "optional": True, "type": "string"},
        ),
        ({"type": "string", "logicalType": "uuid"}, {"optional": False, "type": "string"}),
        ({"type": "enum", "name": "tier", "symbols": ["A"]}, {"optional": False, "type": "string"}),
        ("float", {"optional": False, "type": "float"}),
        ("int", {"optional": False, "type": "int32"}),
        ("boolean", {"optional": False, "type": "boolean"}),
        ({"type": "fixed", "name": "h", "size": 4}, {"optional": False, "type": "bytes"}),
        (
            {"type": "array", "items": ["null", "long"]},
            {"items": {"optional": True, "type": "int64"}, "optional": False, "type": "array"},
        ),
        (
            {"type": "map", "values": "string"},
            {
                "keys": {"optional": False, "type": "string"},
                "optional": False,
                "type": "map",
                "values": {"optional": False, "type": "string"},
            },
        ),
        (
            {"type": "record", "name": "addr", "fields": [{"name": "city", "type": "string"}]},
            {
                "fields": [{"field": "city", "optional": False, "type": "string"}],
                "name": "addr",
                "optional": False,
                "type": "struct",
            },
        ),
    ],
)
def test_each_avro_type_has_its_connect_schema(avro: Any, connect: dict[str, Any]) -> None:
    assert node(avro, {}) == connect


def test_a_named_type_used_again_is_written_out_again() -> None:
    """Connect has no references: a record named by a later column is spelled out there."""
    record = {"type": "record", "name": "addr", "fields": [{"name": "city", "type": "string"}]}
    table = TableSchema.of(
        {
            "type": "record",
            "name": "t",
            "fields": [
                {"name": "id", "type": "long"},
                {"name": "home", "type": record},
                {"name": "work", "type": ["null", "addr"]},
            ],
        },
        ["id"],
    )
    after = enriched_schema(table, EncoderConfig(envelope="enriched"))["fields"][0]["fields"]
    assert after[2] == {**after[1], "field": "work", "optional": True}
    assert key_schema(table, ["id"])["fields"] == [
        {"field": "id", "optional": False, "type": "int64"}
    ]


def test_json_needs_each_sources_declared_table_for_the_schema() -> None:
    encoder = {"envelope": "enriched", "enriched_properties": ["schema"]}
    found = problems(minimal(encoder=encoder))
    assert "is needed with enriched_properties: [schema]" in found["sources[0].table_schema"]
