"""`envelope: enriched` in Avro: CockroachDB's value record, the key and markers as wrapped.

The value record ``<table>_envelope`` holds ``before`` (diff: record ``<table>_before``),
``after``, ``source`` (record ``source``, every field, null where not given), ``key``
(key_in_value), ``ts_ns`` and ``op``, each a nullable union with a null default, so it and the
resolved marker read each other under one subject. Read back by fastavro, by the consumer
library (its commit time: ``source.ts_hlc``), in both of the encoder's ways (compiled, and
fastavro's for logical types in a namespace).
"""

from __future__ import annotations

import copy
import io
import time
from typing import Any

from fastavro import parse_schema, schemaless_reader

from encoders.avro import Framing
from encoders.base import ChangeRow, Context, Origin
from encoders.enriched import EnrichedAvroEncoder
from highwater_consumer.decoding import AvroDecoder, Marker
from pipeline.config import EncoderConfig
from schemas.avro import SOURCE_FIELDS, OutputSchemas
from schemas.hlc import Hlc, parse_packed
from schemas.tables import TableSchema
from tests.unit.test_avro import AFTER, ORDERS

CTX = Context("out.orders")
TS = Hlc(1_700_000_000_000_000_000, 3)
MVCC = Hlc(1_700_000_000_000_000_000, 1)
ORIGIN = Origin("src.orders", 2, 41, (24_023_800, 24_023_984), "771", ("region", "order_id"))
EVERY = EncoderConfig(
    format="avro",
    envelope="enriched",
    enriched_properties=["source", "schema"],
    updated=True,
    diff=True,
    key_in_value=True,
    mvcc_timestamp=True,
)
BEFORE = {**AFTER, "status": "paid"}


def change(op: str | None, after: dict | None, before: dict | None) -> ChangeRow:
    return ChangeRow("orders", ["eu", 7], after, before, TS, MVCC, None, op, ORIGIN)


def encoder(options: EncoderConfig, table: TableSchema = ORDERS) -> EnrichedAvroEncoder:
    schemas = OutputSchemas.of(table, options)
    return EnrichedAvroEncoder(schemas, Framing(b"K", b"V", b"R"), options, "orders", "cf-1")


def read(schema: dict[str, Any], data: bytes | None, header: int = 1) -> Any:
    assert data is not None
    return schemaless_reader(io.BytesIO(data[header:]), parse_schema(schema), None)


def test_the_value_record_has_cockroachdbs_fields_each_optional() -> None:
    value = OutputSchemas.of(ORDERS, EVERY).value
    assert value["name"] == "orders_envelope"
    fields = value["fields"]
    assert [f["name"] for f in fields] == ["before", "after", "source", "key", "ts_ns", "op"]
    assert all(f["type"][0] == "null" and f["default"] is None for f in fields)
    before, after, source = (f["type"][1] for f in fields[:3])
    assert (before["name"], after["name"], source["name"]) == ("orders_before", "orders", "source")
    assert [f["name"] for f in before["fields"]] == [f["name"] for f in after["fields"]]
    assert [f["name"] for f in source["fields"]] == [name for name, _ in SOURCE_FIELDS]
    assert all(f["type"][0] == "null" for f in source["fields"])
    bare = OutputSchemas.of(ORDERS, EncoderConfig(format="avro", envelope="enriched")).value
    assert [f["name"] for f in bare["fields"]] == ["after", "ts_ns", "op"]


def test_a_row_of_every_member_reads_back_whole() -> None:
    avro = encoder(EVERY)
    started = time.time_ns()
    data = avro.value(change("update", AFTER, BEFORE), CTX)
    assert data is not None
    assert data[:1] == b"V"
    value = read(avro.schemas.value, data)
    nulls = dict.fromkeys(value["after"])
    assert (value["after"], value["before"]) == ({**nulls, **AFTER}, {**nulls, **BEFORE})
    assert value["key"] == {"region": "eu", "order_id": 7}
    assert value["op"] == "u"
    assert started <= value["ts_ns"] <= time.time_ns()
    assert value["source"] == {
        "changefeed_sink": "kafka",
        "db_position": [24_023_800, 24_023_984],
        "job_id": "cf-1",
        "mvcc_timestamp": str(MVCC),
        "origin": "highwater",
        "primary_keys": ["region", "order_id"],
        "source_offset": 41,
        "source_partition": 2,
        "source_topic": "src.orders",
        "table_name": "orders",
        "transaction_id": "771",
        "ts_hlc": str(TS),
        "ts_ns": TS.wall,
    }
    # the key and the marker are the wrapped envelope's
    assert read(avro.schemas.key, avro.key(change("update", AFTER, None), CTX)) == {
        "region": "eu",
        "order_id": 7,
    }
    assert read(avro.schemas.resolved, avro.resolved(TS, CTX)) == {"resolved": str(TS)}


def test_what_the_options_and_the_source_do_not_give_is_null() -> None:
    options = EncoderConfig(format="avro", envelope="enriched", enriched_properties=["source"])
    avro = encoder(options)
    scanned = change("insert", AFTER, None)._replace(origin=Origin(None, None, None))
    value = read(avro.schemas.value, avro.value(scanned, CTX))
    assert list(value) == ["after", "source", "ts_ns", "op"]
    source = value["source"]
    nulls = ("db_position", "mvcc_timestamp", "source_offset", "source_partition", "source_topic")
    assert all(source[name] is None for name in (*nulls, "transaction_id", "ts_hlc", "ts_ns"))
    assert source["primary_keys"] == ["region", "order_id"]  # the declared table's key
    deleted = read(avro.schemas.value, avro.value(change("delete", None, BEFORE), CTX))
    assert (deleted["after"], deleted["op"]) == (None, "d")


def test_marker_and_row_records_read_each_other_under_one_subject() -> None:
    avro = encoder(EVERY)
    value, marker = parse_schema(avro.schemas.value), parse_schema(avro.schemas.resolved)
    row_bytes = avro.value(change("insert", AFTER, None), CTX) or b""
    assert schemaless_reader(io.BytesIO(row_bytes[1:]), value, marker) == {"resolved": None}
    as_row = schemaless_reader(io.BytesIO(avro.resolved(TS, CTX)[1:]), marker, value)
    assert (as_row["after"], as_row["op"], as_row["source"]) == (None, None, None)


def _with_named_and_logical_columns() -> TableSchema:
    """ORDERS with an enum column (a named type: defined once, in before) and a decimal."""
    record = copy.deepcopy(ORDERS.record)
    record["fields"] += [
        {"name": "tier", "type": ["null", {"type": "enum", "name": "tier", "symbols": ["A", "B"]}]},
        {
            "name": "price",
            "type": [
                "null",
                {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
            ],
        },
    ]
    return TableSchema.of(record, ["region", "order_id"])


def test_named_column_types_and_fastavros_way_in_a_namespace() -> None:
    """Both images of a table with an enum and a decimal, in avro_schema_prefix's namespace.

    The decimal makes fastavro write the records (its tuple notation names each by its full
    name); the enum is defined in ``before`` and named in ``after``.
    """
    options = EVERY.model_copy(update={"avro_schema_prefix": "acme.cdc"})
    avro = encoder(options, _with_named_and_logical_columns())
    after = {**AFTER, "tier": "B", "price": "12.50"}
    value = read(
        avro.schemas.value, avro.value(change("update", after, {**after, "tier": "A"}), CTX)
    )
    assert (value["after"]["tier"], value["before"]["tier"]) == ("B", "A")
    assert str(value["after"]["price"]) == "12.50"
    assert value["source"]["ts_hlc"] == str(TS)


def test_the_consumer_library_reads_an_enriched_avro_output() -> None:
    """Confluent's framing; the window time is the source block's ``ts_hlc``."""
    schemas = OutputSchemas.of(ORDERS, EVERY)
    avro = EnrichedAvroEncoder(schemas, Framing.confluent(1, 2, 3), EVERY, "orders", "cf-1")
    by_id = {1: schemas.key, 2: schemas.value, 3: schemas.resolved}
    decoder = AvroDecoder(lambda header: by_id.get(int.from_bytes(header[1:], "big")))
    row = change("update", AFTER, BEFORE)
    key, value = avro.key(row, CTX), avro.value(row, CTX)
    assert decoder.read(key, value) == parse_packed(str(TS))
    changed = decoder.change(key, value or b"")
    assert (changed.updated, changed.key) == (TS, {"region": "eu", "order_id": 7})
    assert changed.after is not None
    assert changed.after["status"] == "new"
    assert decoder.read(None, avro.resolved(TS, CTX)) == Marker(TS)
