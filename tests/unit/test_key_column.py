"""`key_column` (with `unordered`): records keyed by another column than the primary key.

The key is that column's value (JSON: a one-element array; Avro: a record of that column),
from the row's new version or a delete's old one; a delete that carries neither is a bad
record, never keyed by a guess. ``key_in_value`` keeps the primary key, so a consumer still
knows the row. The JVM walk keys them too (JSON: ``KeyColumn.java``; Avro: ``Avro.java``, by
the walk spec's ``key_column``); appliers, which upsert by the records' keys, refuse such an
output.
"""

from __future__ import annotations

import json

import pytest

from encoders.avro import AvroEncoder, Framing
from encoders.base import ChangeRow
from encoders.json import JsonEncoder
from highwater_consumer.decoding import ConsumerError
from highwater_consumer.output import Output
from pipeline.config import EncoderConfig, parse_config
from schemas.avro import OutputSchemas
from schemas.errors import EncodingError, SchemaError
from tests.unit.test_avro import AFTER, CTX, ORDERS, TS, decode
from tests.unit.test_config import minimal, problems

JSON = EncoderConfig(
    updated=True, diff=True, key_in_value=True, key_column="status", unordered=True
)
AVRO = EncoderConfig(
    format="avro", updated=True, key_in_value=True, key_column="status", unordered=True
)
BEFORE = {**AFTER, "status": "old"}


def rows() -> tuple[ChangeRow, ChangeRow, ChangeRow]:
    update = ChangeRow("orders", ["eu", 7], AFTER, BEFORE, TS, TS)
    delete = ChangeRow("orders", ["eu", 7], None, BEFORE, TS, TS)
    bare_delete = ChangeRow("orders", ["eu", 7], None, None, TS, TS)
    return update, delete, bare_delete


def test_json_keys_by_the_column_from_the_new_version_or_the_deleted_one() -> None:
    encoder = JsonEncoder(JSON)
    update, delete, bare_delete = rows()
    assert encoder.key(update, CTX) == b'["new"]'
    assert encoder.key(delete, CTX) == b'["old"]'
    with pytest.raises(EncodingError, match="a delete without its before image"):
        encoder.key(bare_delete, CTX)
    assert json.loads(encoder.value(update, CTX) or b"")["key"] == ["eu", 7]  # the row's own
    assert encoder.walk is None  # key_in_value: the Python loop's alone
    assert encoder.scan_walk is None
    assert JsonEncoder(EncoderConfig(updated=True)).walk is not None  # the control
    # the source's own members: the walk keys them by the column (KeyColumn.java)
    walked = JsonEncoder(EncoderConfig(updated=True, key_column="status", unordered=True))
    assert walked.walk == {
        "kind": "verbatim",
        "members": ["after", "updated"],
        "key_column": "status",
    }
    assert walked.scan_walk is None  # an initial scan under key_column: the Python scan's


def test_avro_keys_by_a_record_of_the_column_and_keeps_the_primary_key_in_the_value() -> None:
    schemas = OutputSchemas.of(ORDERS, AVRO)
    assert [f["name"] for f in schemas.key["fields"]] == ["status"]
    encoder = AvroEncoder(schemas, Framing.confluent(1, 2, 3), AVRO, "orders")
    update, delete, bare_delete = rows()
    assert decode(encoder.key(update, CTX), 5, schemas.key) == {"status": "new"}
    assert decode(encoder.key(delete, CTX), 5, schemas.key) == {"status": "old"}
    with pytest.raises(EncodingError, match="key_column 'status'"):
        encoder.key(bare_delete, CTX)
    value = decode(encoder.value(update, CTX) or b"", 5, schemas.value)
    assert value["key"] == {"region": "eu", "order_id": 7}
    assert encoder.key_columns == ("region", "order_id")  # the primary key, for schema changes
    # the walk reads the primary key from the source's key (the value's key), and keys the
    # record by the row record's column at that place, written as the key record's field
    walk = encoder.walk or {}
    assert [f[0] for f in walk["key"]] == ["region", "order_id"]
    place = [f[0] for f in walk["columns"]].index("status")
    assert walk["key_column"] == {"column": place, "field": ["status", "string", True]}
    with pytest.raises(SchemaError, match="not a column"):
        OutputSchemas.of(ORDERS, EncoderConfig(format="avro", key_column="x", unordered=True))


def test_the_config_needs_unordered_and_a_declared_column() -> None:
    assert (
        "must be true with key_column"
        in problems(minimal(encoder={"key_column": "status"}))["encoder.unordered"]
    )
    key_only = problems(
        minimal(encoder={"key_column": "status", "unordered": True, "envelope": "key_only"})
    )
    assert "key_only" in key_only["encoder.key_column"]
    declared = [
        {
            "topic": "src.orders",
            "table": "orders",
            "table_schema": dict(ORDERS.record),
            "primary_key": ["region", "order_id"],
        }
    ]
    found = problems(minimal(sources=declared, encoder={"key_column": "colour", "unordered": True}))
    assert "has no column 'colour'" in found["sources[0].table_schema"]
    config = parse_config(
        minimal(sources=declared, encoder={"key_column": "status", "unordered": True}), env={}
    )
    assert config.output_description()["key_column"] == "status"


def test_an_applier_refuses_records_keyed_by_another_column() -> None:
    keyed = Output("127.0.0.1:9092", {"o": "orders"}, key_column="status")
    with pytest.raises(ConsumerError, match="key_column"):
        keyed.keyed_by_rows()
    Output("127.0.0.1:9092", {"o": "orders"}).keyed_by_rows()  # the control: no refusal
