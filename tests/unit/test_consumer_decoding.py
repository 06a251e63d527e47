"""The consumer library's reading of output records, and its values' text for PostgreSQL.

Every record is a row change, a marker, or a :class:`BadRecord` naming topic/partition/offset;
nothing else escapes, whatever the bytes. Values keep their exact form: JSON numbers their
text, Avro decimals their digits.
"""

import datetime
import io
import struct
import uuid
from decimal import Decimal
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from highwater_consumer import BadRecord, Change, Marker
from highwater_consumer.decoding import AvroDecoder, Decoder, JsonDecoder
from highwater_consumer.postgres import text
from schemas.errors import RecordRef
from schemas.hlc import Hlc
from schemas.jsontext import Number

JSON = Decoder(JsonDecoder())
T = "1700000000000000001.0000000002"


def test_a_json_row_keeps_every_number_as_written_and_a_marker_is_a_marker() -> None:
    after = '{"a":1.10,"b":1E+2,"c":-0,"d":18446744073709551617,"s":"é\\"\\u0000"}'
    value = f'{{"after":{after},"before":null,"updated":"{T}"}}'
    change = JSON.decode("out", 0, 5, b'["k\\u00e9",1.50]', value.encode())
    assert isinstance(change, Change)
    assert change.updated == Hlc.parse(T)
    assert change.key == ["ké", Number("1.50")]
    assert change.after == {
        "a": Number("1.10"),
        "b": Number("1E+2"),
        "c": Number("-0"),
        "d": Number("18446744073709551617"),
        "s": 'é"\x00',
    }
    assert change.before is None
    assert JSON("out", 0, 6, None, f'{{"resolved":"{T}"}}'.encode()) == Marker(Hlc.parse(T))


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (b"[1]", None, "tombstone"),
        (b"[1]", b"{not json", "Expecting"),
        (b"[1]", b'{"after":{"a":1}}', "updated: true"),
        (b"[1]", b'{"updated":"1.0"}', "'after'"),
        (b"[1]", b'{"after":[1],"updated":"1.0"}', "neither an object"),
        (b"[1]", b'{"after":null,"updated":"soon"}', "HLC"),
        (b"[1]", b'{"after":null,"updated":12}', "HLC"),
        (None, b'{"after":null,"updated":"1.0"}', "without a key"),
        (b'{"k":1}', b'{"after":null,"updated":"1.0"}', "not a JSON array"),
        (b"[1]", b'{"resolved":"later"}', "HLC"),
        (b"[1]", b'{"after":{"a":"\xff"},"updated":"1.0"}', "decode"),
        (b"[1]", b"[" * 100_000 + b"]" * 100_000, ""),
        (b"[1]", b'{"after":NaN,"updated":"1.0"}', "NaN"),
    ],
)
def test_a_bad_record_is_named_by_topic_partition_and_offset(
    key: bytes | None, value: bytes | None, reason: str
) -> None:
    with pytest.raises(BadRecord) as raised:
        JSON("out.orders", 2, 17, key, value)
    assert str(raised.value).startswith("out.orders/2@17: ")
    assert reason in raised.value.reason


@settings(max_examples=300)
@given(
    key=st.one_of(st.none(), st.binary(max_size=40)),
    value=st.one_of(st.none(), st.binary(max_size=200)),
)
def test_any_bytes_are_a_change_a_marker_or_a_bad_record(
    key: bytes | None, value: bytes | None
) -> None:
    for decoder in (JSON, Decoder(AvroDecoder(lambda header: None))):
        try:
            decoded: Any = decoder.decode("t", 0, 1, key, value)
        except BadRecord as bad:
            decoded = bad.record
        assert decoded == RecordRef("t", 0, 1) or isinstance(decoded, (Change, Marker))
        if isinstance(decoded, Change):
            assert decoder("t", 0, 1, key, value) == decoded.updated.packed()


ENVELOPE = {
    "type": "record",
    "name": "orders_envelope",
    "fields": [
        {
            "name": "after",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "orders",
                    "fields": [
                        {
                            "name": "amount",
                            "type": [
                                "null",
                                {
                                    "type": "bytes",
                                    "logicalType": "decimal",
                                    "precision": 20,
                                    "scale": 2,
                                },
                            ],
                        },
                        {"name": "note", "type": ["null", "string"]},
                    ],
                },
            ],
        },
        {"name": "updated", "type": ["null", "string"]},
    ],
}
KEY = {"type": "record", "name": "orders_key", "fields": [{"name": "id", "type": "long"}]}
MARKER = {
    "type": "record",
    "name": "orders_envelope",
    "fields": [{"name": "resolved", "type": ["null", "string"]}],
}
SCHEMAS: dict[int, Any] = {1: KEY, 2: ENVELOPE, 3: MARKER}


def confluent(schema_id: int, datum: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(SCHEMAS[schema_id]), datum)
    return b"\x00" + struct.pack(">I", schema_id) + out.getvalue()


AVRO = Decoder(AvroDecoder(lambda header: SCHEMAS.get(struct.unpack(">I", header[1:5])[0])))


def test_avro_records_by_the_writer_schema_their_header_names() -> None:
    value = confluent(2, {"after": {"amount": Decimal("12.30"), "note": "😀"}, "updated": T})
    assert AVRO("out", 1, 9, confluent(1, {"id": 7}), value) == Hlc.parse(T).packed()
    change = AVRO.decode("out", 1, 9, confluent(1, {"id": 7}), value)
    assert change.updated == Hlc.parse(T)
    assert change.key == {"id": 7}
    assert change.after == {"amount": Decimal("12.30"), "note": "😀"}
    assert change.before is None
    assert AVRO("out", 1, 10, None, confluent(3, {"resolved": T})) == Marker(Hlc.parse(T))


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (confluent(3, {"resolved": T}) + b"\x00", "left over"),
        (b"\x00\x00\x00\x00\x09\x02", "no schema"),
        (confluent(2, {"after": None, "updated": T})[:-3], ""),
        (b"{}", "neither"),
        (confluent(2, {"after": None, "updated": None}), "updated: true"),
    ],
)
def test_an_avro_record_that_is_not_ours_is_a_bad_record(value: bytes, reason: str) -> None:
    with pytest.raises(BadRecord) as raised:
        AVRO("out", 0, 3, confluent(1, {"id": 1}), value)
    assert str(raised.value).startswith("out/0@3: ")
    assert reason in raised.value.reason


@pytest.mark.parametrize(
    ("value", "written"),
    [
        (None, None),
        ("any ' \" \\ é 😀 \x00", "any ' \" \\ é 😀 \x00"),
        (True, "true"),
        (Number("1E+2"), "1E+2"),
        (Number("-0"), "-0"),
        (18446744073709551617, "18446744073709551617"),
        (Decimal("12.30"), "12.30"),
        (0.1, "0.1"),
        (b"\x00\xff", "\\x00ff"),
        (
            datetime.datetime(2026, 11, 27, 1, 2, 3, 4, tzinfo=datetime.timezone.utc),
            "2026-11-27T01:02:03.000004+00:00",
        ),
        (datetime.date(2026, 11, 27), "2026-11-27"),
        (uuid.UUID(int=1), "00000000-0000-0000-0000-000000000001"),
        (
            {"tags": ["a", Number("1.10")], "deep": {"x": None}},
            '{"tags":["a",1.10],"deep":{"x":null}}',
        ),
    ],
)
def test_values_reach_postgresql_as_the_text_of_their_exact_value(
    value: Any, written: str | None
) -> None:
    assert text(value) == written
