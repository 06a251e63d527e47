"""Confluent's wire format: writer schemas that reference others, and registries that refuse.

The real Apicurio converter registers a Debezium envelope's records (``Value``, ``Source``,
``block``) as schemas of their own and refers to them by name
(``tests/integration/test_debezium_avro_capture.py`` reads such a capture); here the rules of
writing them in, and what a registry's answers mean for a record.
"""

from __future__ import annotations

import io
import json
from types import SimpleNamespace
from typing import Any

import fastavro
import pytest

from pipeline.core.sources import BadRecord, Change, SourceUnavailable
from pipeline.core.sources.debezium import DebeziumAdapter
from pipeline.core.sources.wire import (
    WireReader,
    connect_column,
    whole_schema,
    without_logical_types,
)
from schemas.connect import derived_table
from tests.support.debezium_avro import avro_envelope

VALUE = {
    "type": "record",
    "name": "Value",
    "namespace": "pg.public.items",
    "fields": [{"name": "id", "type": "int"}, {"name": "note", "type": ["null", "string"]}],
}
SOURCE = {
    "type": "record",
    "name": "Source",
    "namespace": "io.debezium.connector.postgresql",
    "fields": [{"name": "lsn", "type": ["null", "long"]}, {"name": "block", "type": "block"}],
}
BLOCK = {"type": "record", "name": "block", "fields": [{"name": "n", "type": "long"}]}
ENVELOPE = {
    "type": "record",
    "name": "Envelope",
    "namespace": "pg.public.items",
    "fields": [
        {"name": "before", "type": ["null", "pg.public.items.Value"]},
        {"name": "after", "type": ["null", "Value"]},  # the short name, in its namespace
        {"name": "source", "type": "io.debezium.connector.postgresql.Source"},
        {"name": "op", "type": "string"},
    ],
}


def ref(name: str, subject: str) -> Any:
    return SimpleNamespace(name=name, subject=subject, version=1)


SUBJECTS = {
    "value": (json.dumps(VALUE), []),
    "source": (json.dumps(SOURCE), [ref("block", "block")]),
    "block": (json.dumps(BLOCK), []),
}
REFS = [
    ref("pg.public.items.Value", "value"),
    ref("io.debezium.connector.postgresql.Source", "source"),
]


def test_referenced_schemas_are_written_in_at_their_first_use_and_named_after() -> None:
    whole = whole_schema(json.dumps(ENVELOPE), REFS, lambda subject, _: SUBJECTS[subject])
    fields = {f["name"]: f["type"] for f in whole["fields"]}
    assert fields["before"][1]["name"] == "Value"  # defined where first used
    assert fields["after"] == ["null", "Value"]  # then referred to by name
    assert fields["source"]["fields"][1]["type"]["name"] == "block"  # its own reference too
    parsed = fastavro.parse_schema(whole)
    record = {
        "before": None,
        "after": {"id": 7, "note": "ü 𝄞"},
        "source": {"lsn": 24023984, "block": {"n": 3}},
        "op": "c",
    }
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, record)
    assert fastavro.schemaless_reader(io.BytesIO(out.getvalue()), parsed, None) == record


class Refused(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}: Failed to discover artifact type from content.")
        self.http_status_code = status


def reader(fetch: Any) -> WireReader:
    return WireReader(f"http://registry-{id(fetch)}", fetch)


def record(schema_id: int) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + b"\x02"


@pytest.mark.parametrize("status", [400, 404, 422])
def test_a_schema_the_registry_refuses_makes_a_bad_record_not_a_wedged_batch(status: int) -> None:
    def refuse(_: int) -> str:
        raise Refused(status)

    with pytest.raises(BadRecord, match="schema id 3"):
        reader(refuse).read(record(3))


@pytest.mark.parametrize("status", [401, 403, 408, 429, 500, 503])
def test_a_registry_that_cannot_answer_now_fails_the_batch_which_runs_again(status: int) -> None:
    def refuse(_: int) -> str:
        raise Refused(status)

    with pytest.raises(SourceUnavailable, match="did not answer for schema id 3"):
        reader(refuse).read(record(3))


def test_a_schema_that_is_not_usable_avro_makes_a_bad_record() -> None:
    with pytest.raises(BadRecord, match="not a usable Avro schema"):
        reader(
            lambda _: '{"type": "record", "name": "x", "fields": [{"name": "a", "type": "nope"}]}'
        ).read(record(4))


# A Debezium PostgreSQL envelope as AvroConverter writes its schema (Connect's AvroData):
# plain primitives, int16 said by connect.type, optional unions with defaults, semantic types
# in connect.name/connect.parameters, Decimal with its logical type, a named record defined in
# ``before`` and named again in ``after`` (short name here, full name in the test's twin)
DECIMAL = {
    "type": "bytes",
    "scale": 4,
    "precision": 20,
    "connect.version": 1,
    "connect.parameters": {"scale": "4", "connect.decimal.precision": "20"},
    "connect.name": "org.apache.kafka.connect.data.Decimal",
    "logicalType": "decimal",
}
ROW_VALUE = {
    "type": "record",
    "name": "Value",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "small", "type": {"type": "int", "connect.type": "int16"}},
        {"name": "owner", "type": "string"},
        {"name": "region", "type": ["null", "string"], "default": None},
        {"name": "visits", "type": "long"},
        {"name": "balance", "type": ["null", DECIMAL], "default": None},
        {"name": "active", "type": ["null", "boolean"], "default": None},
        {"name": "ratio", "type": ["null", "double"], "default": None},
        {"name": "score", "type": ["null", "float"], "default": None},
        {
            "name": "opened",
            "type": [
                "null",
                {
                    "type": "long",
                    "connect.version": 1,
                    "connect.name": "io.debezium.time.MicroTimestamp",
                },
            ],
            "default": None,
        },
        {
            "name": "born",
            "type": {"type": "int", "connect.version": 1, "connect.name": "io.debezium.time.Date"},
        },
        {
            "name": "profile",
            "type": [
                "null",
                {"type": "string", "connect.version": 1, "connect.name": "io.debezium.data.Json"},
            ],
            "default": None,
        },
        {
            "name": "mood",
            "type": [
                "null",
                {
                    "type": "string",
                    "connect.version": 1,
                    "connect.parameters": {"allowed": "sad,ok,happy"},
                    "connect.name": "io.debezium.data.Enum",
                },
            ],
            "default": None,
        },
    ],
    "connect.name": "pg.public.accounts.Value",
}


def envelope(after: str) -> dict[str, Any]:
    """The envelope of :data:`ROW_VALUE`'s columns, ``after`` naming ``before``'s ``Value``."""
    schema = avro_envelope(ROW_VALUE["fields"], "pg.public.accounts")
    for field in schema["fields"]:
        if field["name"] == "after":
            field["type"] = ["null", after]
    return schema


# the same table's columns as JsonConverter (schemas.enable) describes them
JSON_TWIN = {
    "id": {"type": "int32", "optional": False},
    "small": {"type": "int16", "optional": False},
    "owner": {"type": "string", "optional": False},
    "region": {"type": "string", "optional": True},
    "visits": {"type": "int64", "optional": False},
    "balance": {
        "type": "bytes",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Decimal",
        "parameters": {"scale": "4", "connect.decimal.precision": "20"},
    },
    "active": {"type": "boolean", "optional": True},
    "ratio": {"type": "float64", "optional": True},
    "score": {"type": "float32", "optional": True},
    "opened": {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp"},
    "born": {"type": "int32", "optional": False, "name": "io.debezium.time.Date"},
    "profile": {"type": "string", "optional": True, "name": "io.debezium.data.Json"},
    "mood": {
        "type": "string",
        "optional": True,
        "name": "io.debezium.data.Enum",
        "parameters": {"allowed": "sad,ok,happy"},
    },
}


@pytest.mark.parametrize("after", ["Value", "pg.public.accounts.Value"])
def test_an_avro_converter_schema_derives_the_output_schema_its_json_twin_does(after: str) -> None:
    schemas = {1: {"type": "record", "name": "Key", "fields": [{"name": "id", "type": "int"}]}}
    schemas[2] = envelope(after)
    wire = WireReader(f"test-{after}", lambda schema_id: json.dumps(schemas[schema_id]))
    row = {
        "id": 7,
        "small": -3,
        "owner": "ü 𝄞",
        "region": None,
        "visits": 2**63 - 1,
        "balance": (-1234567).to_bytes(4, "big", signed=True),
        "active": True,
        "ratio": 1.5e300,
        "score": 0.25,
        "opened": 1_700_000_000_123_456,
        "born": 19_000,
        "profile": '{"a": [1]}',
        "mood": "ok",
    }

    def framed(schema_id: int, record: Any) -> bytes:
        out = io.BytesIO()
        parsed = fastavro.parse_schema(without_logical_types(schemas[schema_id]))
        fastavro.schemaless_writer(out, parsed, record)
        return b"\x00" + schema_id.to_bytes(4, "big") + out.getvalue()

    source = {
        "connector": "postgresql",
        "ts_ms": 1,
        "ts_us": None,
        "ts_ns": None,
        "lsn": 90,
        "sequence": '["80","90"]',
    }
    event = {"before": None, "after": row, "source": source, "op": "c", "ts_ms": 1}
    value = framed(2, {**event, "transaction": None})
    shape = DebeziumAdapter(wire).shape(framed(1, {"id": 7}), value)
    assert shape is not None
    columns = {
        name: {k: v for k, v in c.items() if k != "field"} for name, c in shape.columns.items()
    }
    twin = {name: {"parameters": {}, **c} if "name" in c else c for name, c in JSON_TWIN.items()}
    assert columns == twin
    derived = derived_table("accounts", shape.columns, shape.key)
    json_derived = derived_table(
        "accounts", {n: {**c, "field": n} for n, c in JSON_TWIN.items()}, ("id",)
    )
    assert derived.record == json_derived.record
    types = {f["name"]: f["type"] for f in derived.record["fields"]}
    assert types["small"] == "int"
    assert types["region"] == ["null", "string"]
    assert types["visits"] == "long"
    assert types["balance"] == [
        "null",
        {"type": "bytes", "logicalType": "decimal", "precision": 20, "scale": 4},
    ]
    assert types["opened"] == ["null", {"type": "long", "logicalType": "timestamp-micros"}]
    assert types["born"] == {"type": "int", "logicalType": "date"}
    assert types["mood"] == ["null", "string"]
    change = DebeziumAdapter(wire).decode(framed(1, {"id": 7}), value)
    assert isinstance(change, Change)
    assert change.after is not None
    assert change.after["balance"].text == "-123.4567"  # the exact number


def test_connects_own_logical_types_without_connect_names_still_say_their_kind() -> None:
    bare = {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}
    assert connect_column(["null", bare], {}) == {
        "type": "bytes",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Decimal",
        "parameters": {"scale": "2", "connect.decimal.precision": "9"},
    }
    assert connect_column({"type": "int", "logicalType": "date"}, {})["name"] == (
        "org.apache.kafka.connect.data.Date"
    )
    # a union of several types, a recursive record: described as far as Connect can say
    assert connect_column(["null", "int", "string"], {}) == {"type": None, "optional": True}
    node = {
        "type": "record",
        "name": "Node",
        "fields": [{"name": "next", "type": ["null", "Node"]}],
    }
    described = connect_column(node, {"Node": node})
    assert described["fields"][0] == {"type": "struct", "optional": True, "field": "next"}
