"""Avro schemas derived from a declared table, and the Avro encoder's bytes."""

import copy
import io
import json
import struct
from pathlib import Path

import pytest
from fastavro import parse_schema, schemaless_reader
from fastavro.schema import fingerprint, to_parsing_canonical_form
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark import cloudpickle

from encoders.avro import AvroEncoder, Framing
from encoders.avro_writer import NotCompiled, compile_writer
from encoders.base import ChangeRow, Context
from pipeline.config import EncoderConfig
from pipeline.core.sources import NativeAdapter
from schemas.avro import OutputSchemas, envelope_schema, resolved_schema
from schemas.errors import EncodingError, SchemaChange
from schemas.hlc import Hlc
from schemas.tables import TableSchema

ORDERS = TableSchema.of(
    json.loads((Path(__file__).parents[2] / "examples" / "orders.avsc").read_text()),
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


def test_a_row_of_another_shape_is_a_schema_change_never_a_column_dropped() -> None:
    """A column added upstream: the encoder names it (a column gone is null: all optional)."""
    encoder = AvroEncoder(
        OutputSchemas.of(ORDERS, OPTIONS), Framing(b"", b"", b""), OPTIONS, "orders"
    )
    wider = ROW._replace(after={**AFTER, "vip": True, "tier": "gold"})
    with pytest.raises(SchemaChange, match=r"'orders' changed shape: column\(s\) tier, vip not in"):
        encoder.value(wider, CTX)
    with pytest.raises(SchemaChange, match="vip"):  # the before image too (diff)
        encoder.value(ROW._replace(before={**AFTER, "vip": None}), CTX)
    fewer = ROW._replace(after={"region": "eu", "order_id": 7})
    got = decode(encoder.value(fewer, CTX) or b"", 0, OutputSchemas.of(ORDERS, OPTIONS).value)
    assert got["after"]["amount"] is None


def test_key_only_values_are_tombstones() -> None:
    options = EncoderConfig(format="avro", envelope="key_only")
    encoder = AvroEncoder(OutputSchemas.of(ORDERS, options), Framing(b"", b"", b""), options, "t")
    assert encoder.value(ROW, CTX) is None


COLUMN_TYPES = {
    "boolean": st.booleans(),
    "int": st.integers(-(2**31), 2**31 - 1),
    "long": st.integers(-(2**63), 2**63 - 1),
    "double": st.floats(allow_nan=False),
    "string": st.text(),
    "bytes": st.binary(),
}
ARRAYS = {  # arrays of any length (a count past one varint byte too), of nullable items
    "longs": st.lists(st.integers(-(2**63), 2**63 - 1), max_size=70),
    "names": st.lists(st.none() | st.text(), max_size=5),
}
WIDE = {
    "type": "record",
    "name": "wide",
    "fields": [{"name": f"c_{t}", "type": ["null", t], "default": None} for t in COLUMN_TYPES]
    + [
        {"name": "c_longs", "type": ["null", {"type": "array", "items": "long"}], "default": None},
        {"name": "c_names", "type": {"type": "array", "items": ["null", "string"]}},
        {"name": "req", "type": "long"},
    ],
}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    row=st.fixed_dictionaries(
        {"req": st.integers(-(2**63), 2**63 - 1), "c_names": ARRAYS["names"]},
        optional={f"c_{t}": st.none() | s for t, s in COLUMN_TYPES.items()}
        | {"c_longs": st.none() | ARRAYS["longs"]},
    )
)
def test_compiled_writer_writes_what_fastavro_reads(row: dict) -> None:
    out = bytearray()
    compile_writer(WIDE)(out, row)
    read = schemaless_reader(io.BytesIO(bytes(out)), parse_schema(WIDE), None)
    assert read == {**{f["name"]: None for f in WIDE["fields"]}, **row}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("c_long", "7"),
        ("c_long", 2**64),
        ("c_int", 1.5),
        ("c_int", 2**31),  # a long's varint in an int: readers of the schema refuse it
        ("c_boolean", 1),
        ("c_string", 5),
        ("c_double", "x"),
        ("req", None),
        ("c_longs", "12"),
    ],
)
def test_compiled_writer_refuses_values_of_the_wrong_type(field: str, value: object) -> None:
    """A refusal says what it refused (an accident such as AttributeError does not count)."""
    with pytest.raises((TypeError, ValueError)) as refused:
        compile_writer(WIDE)(bytearray(), {"req": 1, "c_names": [], field: value})
    assert type(refused.value) in {TypeError, ValueError}
    assert repr(value) in str(refused.value) or str(value) in str(refused.value)


def _decimal_price() -> TableSchema:
    """ORDERS with a decimal ``price``: a logical type, so fastavro writes its records."""
    record = copy.deepcopy(ORDERS.record)
    record["fields"].append(
        {
            "name": "price",
            "type": [
                "null",
                {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
            ],
            "default": None,
        }
    )
    return TableSchema.of(record, ["region", "order_id"])


def test_logical_types_are_written_by_fastavro() -> None:
    table = _decimal_price()
    with pytest.raises(NotCompiled):
        compile_writer(envelope_schema(table, OPTIONS))
    schemas = OutputSchemas.of(table, OPTIONS)
    encoder = AvroEncoder(schemas, Framing(b"", b"", b""), OPTIONS, "orders")
    value = encoder.value(ROW._replace(after={**AFTER, "price": "12.50"}), CTX)
    assert value is not None
    assert str(decode(value, 0, schemas.value)["after"]["price"]) == "12.50"


def test_fastavro_names_the_records_in_the_prefixs_namespace() -> None:
    """avro_schema_prefix with a logical type: each branch by its full name.

    (Before: every row a bad record, "provided union type name orders not found".)
    """
    options = EncoderConfig(**{**OPTIONS.model_dump(), "avro_schema_prefix": "acme.cdc"})
    options = options.model_copy(update={"key_in_value": True})
    schemas = OutputSchemas.of(_decimal_price(), options)
    encoder = AvroEncoder(schemas, Framing(b"", b"", b""), options, "orders")
    row = ROW._replace(after={**AFTER, "price": "12.50"}, before=AFTER)
    read = decode(encoder.value(row, CTX) or b"", 0, schemas.value)
    assert str(read["after"]["price"]) == "12.50"
    assert read["before"] == {**dict.fromkeys(read["before"]), **AFTER}
    assert read["key"] == {"region": "eu", "order_id": 7}


def test_an_encoder_travels_pickled_after_use() -> None:
    """The driver uses the encoder for markers, then ships it to the executors each batch."""
    schemas = OutputSchemas.of(ORDERS, OPTIONS)
    encoder = AvroEncoder(schemas, Framing.confluent(1, 2, 3), OPTIONS, "orders")
    marker = encoder.resolved(TS, CTX)
    copy_ = cloudpickle.loads(cloudpickle.dumps(encoder))
    assert copy_.resolved(TS, CTX) == marker
    assert copy_.value(ROW, CTX) == encoder.value(ROW, CTX)


def _priced(precision: int, scale: int) -> TableSchema:
    record = copy.deepcopy(ORDERS.record)
    decimal = {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}
    record["fields"].append({"name": "price", "type": ["null", decimal], "default": None})
    return TableSchema.of(record, ["region", "order_id"])


@pytest.mark.parametrize(
    ("text", "written"),
    [
        ("12345678901234567.89", "12345678901234567.89"),
        ("1.10", "1.10"),
        ("-0.50", "-0.50"),
        ("1.1000", "1.10"),  # trailing zeros beyond the scale (a NUMERIC(12,4)'s) say nothing
        ("-0.0000", "0.00"),
        ("12345678901234567.8900000000000000000000", "12345678901234567.89"),
        ("7", "7.00"),
    ],
)
def test_a_decimal_column_is_written_exactly_from_the_source_text(text: str, written: str) -> None:
    table = _priced(20, 2)
    schemas = OutputSchemas.of(table, OPTIONS)
    encoder = AvroEncoder(schemas, Framing(b"", b"", b""), OPTIONS, "orders")
    source = f'{{"after": {{"region": "eu", "order_id": 7, "price": {text}}}, "updated": "1.0"}}'
    change = NativeAdapter().decode(b'["eu", 7]', source.encode())
    value = encoder.value(ROW._replace(after=change.after), CTX)
    assert value is not None
    assert str(decode(value, 0, schemas.value)["after"]["price"]) == written


def test_a_decimal_that_does_not_fit_its_scale_is_a_bad_record_not_rounded() -> None:
    table = _priced(20, 2)
    schemas = OutputSchemas.of(table, OPTIONS)
    encoder = AvroEncoder(schemas, Framing(b"", b"", b""), OPTIONS, "orders")
    source = b'{"after": {"region": "eu", "order_id": 7, "price": 1.105}, "updated": "1.0"}'
    change = NativeAdapter().decode(b'["eu", 7]', source)
    with pytest.raises(EncodingError, match="does not fit"):
        encoder.value(ROW._replace(after=change.after), CTX)
