"""Avro schemas derived from a declared table, and the Avro encoder's bytes."""

import io
import json
import struct
from pathlib import Path

import pytest
from fastavro import parse_schema, schemaless_reader
from fastavro.schema import fingerprint, to_parsing_canonical_form

from encoders.avro import AvroEncoder, Framing
from encoders.base import ChangeRow, Context
from pipeline.config import EncoderConfig
from schemas.avro import OutputSchemas, envelope_schema, resolved_schema
from schemas.errors import EncodingError
from schemas.hlc import Hlc
from schemas.tables import TableSchema

ORDERS = TableSchema.of(
    json.loads((Path(__file__).parents[2] / "schemas" / "avro" / "orders.avsc").read_text()),
    ["region", "order_id"],
)
OPTIONS = EncoderConfig(format="avro", updated=True, diff=True, mvcc_timestamp=True)
AFTER = {"region": "eu", "order_id": 7, "amount": 9.5, "status": "new", "items": 2}
TS = Hlc(1700000000000000000, 3)
ROW = ChangeRow("orders", ["eu", 7], AFTER, None, TS, TS)
CTX = Context("hw.orders")


def decode(data: bytes, header_len: int, schema: dict) -> dict:
    return schemaless_reader(io.BytesIO(data[header_len:]), parse_schema(schema), None)


def test_confluent_framing_and_round_trip() -> None:
    schemas = OutputSchemas.of(ORDERS, OPTIONS)
    encoder = AvroEncoder(schemas, Framing.confluent(11, 12, 13), OPTIONS, "orders")
    key, value = encoder.key(ROW, CTX), encoder.value(ROW, CTX)
    assert value is not None
    assert key[:5] == b"\x00" + struct.pack(">I", 11)
    assert value[:5] == b"\x00" + struct.pack(">I", 12)
    assert decode(key, 5, schemas.key) == {"region": "eu", "order_id": 7}
    got = decode(value, 5, schemas.value)
    assert got["after"] == {**dict.fromkeys(f["name"] for f in ORDERS.record["fields"]), **AFTER}
    assert (got["before"], got["updated"], got["mvcc_timestamp"]) == (None, str(TS), str(TS))
    marker = encoder.resolved(TS, CTX)
    assert marker[:5] == b"\x00" + struct.pack(">I", 13)
    assert decode(marker, 5, schemas.resolved) == {"resolved": str(TS)}


def test_single_object_framing_carries_the_fingerprint() -> None:
    schemas = OutputSchemas.of(ORDERS, OPTIONS)
    encoder = AvroEncoder(schemas, Framing.single_object(schemas), OPTIONS, "orders")
    value = encoder.value(ROW, CTX)
    assert value is not None
    expected = fingerprint(to_parsing_canonical_form(schemas.value), "CRC-64-AVRO")
    assert value[:2] == b"\xc3\x01"
    assert value[2:10].hex() == expected
    assert decode(value, 10, schemas.value)["after"]["order_id"] == 7


def test_markers_and_rows_read_each_other_so_they_share_a_subject() -> None:
    """Backward and forward: each schema reads data written with the other."""
    envelope, resolved = envelope_schema(ORDERS, OPTIONS), resolved_schema(ORDERS)
    encoder = AvroEncoder(OutputSchemas.of(ORDERS, OPTIONS), Framing(b"", b"", b""), OPTIONS, "t")
    row_bytes, marker_bytes = encoder.value(ROW, CTX), encoder.resolved(TS, CTX)
    assert row_bytes is not None
    as_marker = schemaless_reader(
        io.BytesIO(row_bytes), parse_schema(envelope), parse_schema(resolved)
    )
    assert as_marker == {"resolved": None}
    as_row = schemaless_reader(
        io.BytesIO(marker_bytes), parse_schema(resolved), parse_schema(envelope)
    )
    assert as_row["after"] is None


def test_an_added_column_keeps_old_data_readable() -> None:
    grown = dict(ORDERS.record)
    grown["fields"] = [*ORDERS.record["fields"], {"name": "channel", "type": "string"}]
    new = envelope_schema(TableSchema.of(grown, ["region", "order_id"]), OPTIONS)
    encoder = AvroEncoder(OutputSchemas.of(ORDERS, OPTIONS), Framing(b"", b"", b""), OPTIONS, "t")
    old_bytes = encoder.value(ROW, CTX)
    assert old_bytes is not None
    read = schemaless_reader(
        io.BytesIO(old_bytes), parse_schema(envelope_schema(ORDERS, OPTIONS)), parse_schema(new)
    )
    assert read["after"]["channel"] is None  # every column is optional with a null default


def test_values_that_do_not_fit_name_the_table() -> None:
    encoder = AvroEncoder(
        OutputSchemas.of(ORDERS, OPTIONS), Framing(b"", b"", b""), OPTIONS, "orders"
    )
    bad = ROW._replace(after={**AFTER, "order_id": "seven"})
    with pytest.raises(EncodingError, match="does not fit the declared schema of table 'orders'"):
        encoder.value(bad, CTX)
    with pytest.raises(EncodingError, match="primary key"):
        encoder.key(ROW._replace(key=["eu"]), CTX)


def test_key_only_values_are_tombstones() -> None:
    options = EncoderConfig(format="avro", envelope="key_only")
    encoder = AvroEncoder(OutputSchemas.of(ORDERS, options), Framing(b"", b"", b""), options, "t")
    assert encoder.value(ROW, CTX) is None
