"""`format: protobuf`: the messages, each value's kind, exact numbers and instants, framing.

Read back with Google's own runtime (the generated module) and confluent-kafka's
``ProtobufDeserializer``, and by the consumer library; every odd value a source carries either
round-trips (numbers by their text) or is a bad record that says why, never a crash.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from hypothesis import given, settings
from hypothesis import strategies as st

from encoders.base import ChangeRow, Context, Origin
from encoders.protobuf import ProtobufEncoder
from highwater_consumer.decoding import Marker
from highwater_consumer.protobuf import ProtobufDecoder
from pipeline.config import EncoderConfig
from schemas import highwater_changefeed_pb2 as pb
from schemas.errors import EncodingError
from schemas.hlc import Hlc, parse_packed
from schemas.jsontext import Number, loads_exact
from schemas.protobuf import (
    KEY_INDEX,
    MESSAGE_INDEX,
    PROTO,
    columns,
    header,
    instant,
    instant_text,
    python,
    value_of,
)
from schemas.tables import TableSchema
from tests.unit.test_config import minimal, problems

CTX = Context("out.orders")
TS = Hlc(1_700_000_000_000_000_000, 3)
MVCC = Hlc(1_700_000_000_000_000_000, 1)
ORIGIN = Origin("src.orders", 2, 41, (24_023_800, 24_023_984), "771", ("region", "id"))
TABLE = TableSchema.of(
    {
        "type": "record",
        "name": "orders",
        "fields": [
            {"name": "region", "type": "string"},
            {"name": "id", "type": "long"},
            {"name": "ratio", "type": ["null", "double"], "default": None},
            {
                "name": "price",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2},
            },
            {"name": "at", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
            {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}]},
        ],
    },
    ["region", "id"],
)
EVERY = EncoderConfig(
    format="protobuf",
    updated=True,
    diff=True,
    key_in_value=True,
    mvcc_timestamp=True,
    topic_in_value=True,
)
AFTER = {
    "region": "eu",
    "id": 7,
    "ratio": 0.5,
    "price": Number("12.50"),
    "at": "2024-02-29T23:59:59.123456789Z",
}


def change(after: Any, before: Any = None, op: str | None = None) -> ChangeRow:
    return ChangeRow("orders", ["eu", 7], after, before, TS, MVCC, None, op, ORIGIN)


def parse(data: bytes | None, kind: Any = pb.Message) -> Any:
    assert data is not None
    message = kind()
    message.ParseFromString(data)
    return message


def test_the_generated_module_is_what_protoc_makes_of_the_proto(tmp_path: Path) -> None:
    """``make proto``'s output, committed: it may not drift from the .proto."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{PROTO.parent}",
            f"--python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            str(PROTO),
        ],
        check=True,
    )
    for name in ("highwater_changefeed_pb2.py", "highwater_changefeed_pb2.pyi"):
        assert (tmp_path / name).read_text() == (PROTO.parent / name).read_text(), (
            f"make proto: {name}"
        )


@pytest.mark.parametrize(
    ("value", "kind", "field", "held"),
    [
        (True, None, "bool_value", True),
        (7, None, "int64_value", 7),
        (-(2**63), None, "int64_value", -(2**63)),
        (2**63, None, "decimal_value", "9223372036854775808"),  # beyond 64 bits: its digits
        (Number("18446744073709551617"), None, "decimal_value", "18446744073709551617"),
        (Number("-0"), None, "decimal_value", "-0"),
        (Number("1.10"), None, "decimal_value", "1.10"),  # trailing zeros kept
        (Number("1E+2"), None, "decimal_value", "1E+2"),
        (1.5, None, "decimal_value", "1.5"),  # a fraction is one kind however written
        (Number("12.50"), "decimal", "decimal_value", "12.50"),
        (3, "decimal", "decimal_value", "3"),
        (Number("0.1"), "double", "double_value", 0.1),
        (2, "double", "double_value", 2.0),
        ("x ü \u2028 😀", None, "string_value", "x ü \u2028 😀"),
        ("2024-01-02", "date", "date_value", "2024-01-02"),
        ("12:30:00.5", "time-micros", "time_value", "12:30:00.5"),
        ("7b4c…", "uuid", "uuid_value", "7b4c…"),
        (b"\x00\xff", None, "bytes_value", b"\x00\xff"),
        ({"a": [1, Number("2.50")]}, None, "string_value", '{"a":[1,2.50]}'),  # JSON: its text
    ],
)
def test_each_value_has_its_kind(value: Any, kind: str | None, field: str, held: Any) -> None:
    found = value_of(value, kind)
    assert found.WhichOneof("value") == field
    inner = getattr(found, field)
    assert (inner.value if field == "decimal_value" else inner) == held


def test_null_is_nothing_set_and_arrays_keep_their_nulls() -> None:
    assert value_of(None).WhichOneof("value") is None
    array = value_of([1, None, "a", [True]])
    assert python(array) == [1, None, "a", [True]]
    record = value_of({"a": 1, "b": None}, "record")
    assert python(record) == {"a": 1, "b": None}


@pytest.mark.parametrize(
    ("text", "seconds", "nanos"),
    [
        ("1970-01-01T00:00:00Z", 0, 0),
        ("2024-02-29T23:59:59.123456789Z", 1709251199, 123456789),
        ("2024-02-29 23:59:59.5", 1709251199, 500000000),  # no zone: UTC, a space as psql
        ("2024-03-01T01:59:59.5+02:00", 1709251199, 500000000),
        ("2024-02-29T22:59:59-0100", 1709251199, 0),
        ("1900-01-01T00:00:00Z", -2208988800, 0),
    ],
)
def test_instants_to_the_nanosecond_in_utc(text: str, seconds: int, nanos: int) -> None:
    assert instant(text) == (seconds, nanos)
    found = value_of(text, "timestamp-micros").timestamp_value
    assert (found.seconds, found.nanos) == (seconds, nanos)
    assert instant(instant_text(seconds, nanos)) == (seconds, nanos)


def test_empty_things_are_still_there() -> None:
    """An empty array or record, the epoch, an empty row: present, not null or a delete."""
    assert python(value_of([])) == []
    assert python(value_of({}, "record")) == {}
    assert python(value_of(0, "timestamp-micros")) == "1970-01-01T00:00:00Z"
    encoder = ProtobufEncoder(EncoderConfig(format="protobuf", updated=True), "cf", TABLE)
    assert parse(encoder.value(change({}), CTX)).wrapped.HasField("after")


def test_epoch_units_are_instants_too() -> None:
    found = value_of(1_709_251_199_123_456, "timestamp-micros").timestamp_value
    assert (found.seconds, found.nanos) == (1_709_251_199, 123_456_000)
    found = value_of(-1, "timestamp-millis").timestamp_value
    assert (found.seconds, found.nanos) == (-1, 999_000_000)


def test_the_wrapped_envelope_with_every_option() -> None:
    encoder = ProtobufEncoder(EVERY, "cf", TABLE)
    row = change(AFTER, {**AFTER, "ratio": None})
    message = parse(encoder.value(row, CTX))
    assert message.WhichOneof("data") == "wrapped"
    wrapped = message.wrapped
    after = columns(wrapped.after.values)
    assert after == {**AFTER, "ratio": 0.5, "at": "2024-02-29T23:59:59.123456789Z"}
    assert wrapped.after.values["price"].decimal_value.value == "12.50"  # declared decimal
    assert wrapped.after.values["at"].timestamp_value.nanos == 123456789
    assert wrapped.before.values["ratio"].WhichOneof("value") is None  # null: an entry, empty
    assert (wrapped.updated, wrapped.mvcc_timestamp, wrapped.topic) == (
        str(TS),
        str(MVCC),
        CTX.topic,
    )
    assert columns(wrapped.key.key) == {"region": "eu", "id": 7}
    deleted = parse(encoder.value(change(None, AFTER), CTX)).wrapped
    assert not deleted.HasField("after")
    assert columns(deleted.before.values)["id"] == 7
    assert parse(encoder.resolved(TS, CTX)).resolved.resolved == str(TS)


def test_keys_are_deterministic_whatever_the_names_order() -> None:
    encoder = ProtobufEncoder(EVERY, "cf", None)
    one = encoder.key(change(AFTER), CTX)
    swapped = change(AFTER)._replace(
        key=[7, "eu"], origin=ORIGIN._replace(key_names=("id", "region"))
    )
    assert encoder.key(swapped, CTX) == one  # map entries sorted: one key, one byte string
    assert columns(parse(one, pb.Key).key) == {"region": "eu", "id": 7}
    unnamed = change(AFTER)._replace(origin=None)
    with pytest.raises(EncodingError, match="names of 2 key value"):
        encoder.key(unnamed, CTX)
    keyed = ProtobufEncoder(EVERY.model_copy(update={"key_column": "ratio"}), "cf", TABLE)
    assert columns(parse(keyed.key(change(AFTER), CTX), pb.Key).key) == {"ratio": 0.5}


def test_bare_and_enriched() -> None:
    bare = ProtobufEncoder(
        EncoderConfig(format="protobuf", envelope="bare", updated=True), "cf", TABLE
    )
    message = parse(bare.value(change(AFTER), CTX)).bare
    assert columns(message.values)["price"] == Number("12.50")
    assert message.meta.updated == str(TS)
    assert bare.value(change(None, AFTER), CTX) is None  # a tombstone, as bare JSON
    assert parse(bare.resolved(TS, CTX)).bare_resolved.meta.resolved == str(TS)
    options = EncoderConfig(
        format="protobuf",
        envelope="enriched",
        enriched_properties=["source"],
        updated=True,
        diff=True,
    )
    enriched = parse(
        ProtobufEncoder(options, "cf-1", TABLE).value(change(AFTER, AFTER, "update"), CTX)
    )
    assert enriched.enriched.op == pb.OP_UPDATE
    source = enriched.enriched.source
    assert (source.job_id, source.origin, source.ts_hlc, source.ts_ns) == (
        "cf-1",
        "highwater",
        str(TS),
        TS.wall,
    )
    assert (source.source_topic, source.source_partition, source.source_offset) == (
        "src.orders",
        2,
        41,
    )
    assert (list(source.db_position), source.transaction_id) == ([24_023_800, 24_023_984], "771")
    assert list(source.primary_keys) == ["region", "id"]
    scanned = change(AFTER)._replace(origin=Origin(None, None, None))
    block = parse(ProtobufEncoder(options, "cf", TABLE).value(scanned, CTX)).enriched.source
    assert not block.HasField("source_offset")  # an initial scan's row: no source record
    assert list(block.primary_keys) == ["region", "id"]


def test_confluent_framing_is_what_confluent_kafkas_deserializer_reads() -> None:
    encoder = ProtobufEncoder(
        EVERY, "cf", TABLE, key_header=header(7, KEY_INDEX), value_header=header(8, MESSAGE_INDEX)
    )
    row = change(AFTER)
    key, value = encoder.key(row, CTX), encoder.value(row, CTX)
    assert key[:5] == b"\x00\x00\x00\x00\x07"
    assert value is not None
    assert value[:6] == b"\x00\x00\x00\x00\x08\x00"
    conf = {"use.deprecated.format": False}
    read_value = ProtobufDeserializer(pb.Message, conf)(
        value, SerializationContext("t", MessageField.VALUE)
    )
    read_key = ProtobufDeserializer(pb.Key, conf)(key, SerializationContext("t", MessageField.KEY))
    assert read_value.wrapped.updated == str(TS)
    assert columns(read_key.key) == {"region": "eu", "id": 7}


@pytest.mark.parametrize("framed", [False, True])
def test_the_consumer_library_reads_rows_and_markers(framed: bool) -> None:
    heads = (
        {"key_header": header(1, KEY_INDEX), "value_header": header(2, MESSAGE_INDEX)}
        if framed
        else {}
    )
    decoder = ProtobufDecoder()
    for options in (
        EVERY,
        EncoderConfig(
            format="protobuf",
            envelope="enriched",
            enriched_properties=["source"],
            updated=True,
            diff=True,
        ),
    ):
        encoder = ProtobufEncoder(options, "cf", TABLE, **heads)
        row = change(AFTER, {**AFTER, "id": 7, "ratio": None}, "update")
        key, value = encoder.key(row, CTX), encoder.value(row, CTX) or b""
        assert decoder.read(key, value) == parse_packed(str(TS))
        read = decoder.change(key, value)
        assert (read.updated, read.key) == (TS, {"region": "eu", "id": 7})
        assert read.after == {**AFTER, "at": "2024-02-29T23:59:59.123456789Z"}
        assert read.before is not None
        assert read.before["ratio"] is None
        assert decoder.read(None, encoder.resolved(TS, CTX)) == Marker(TS)
    timeless = ProtobufEncoder(EncoderConfig(format="protobuf"), "cf", TABLE, **heads)
    with pytest.raises(ValueError, match="no commit time"):
        decoder.read(b"k", timeless.value(change(AFTER), CTX))
    with pytest.raises(ValueError, match="not a protobuf Message"):
        decoder.read(b"k", b"\x0a\xff")


def _nested(depth: int) -> list[Any]:
    value: list[Any] = [1]
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("after", "reason"),
    [
        ({"x": "\ud800"}, "surrogate"),  # not UTF-8: protobuf strings are
        ({"x": _nested(40)}, "nested deeper"),
        ({"at": "2024-13-01T00:00:00Z"}, "month"),
        ({"at": "yesterday"}, "ISO 8601"),
        ({"at": "0000-01-01T00:00:00Z"}, "year"),
    ],
)
def test_a_value_protobuf_cannot_hold_is_a_bad_record_that_says_why(
    after: dict, reason: str
) -> None:
    encoder = ProtobufEncoder(EVERY, "cf", TABLE)
    with pytest.raises(EncodingError, match=reason):
        encoder.value(change(after), CTX)


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=["Cs"])),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=300, deadline=None)
@given(row=st.dictionaries(st.text(st.characters(exclude_categories=["Cs"])), JSON, max_size=5))
def test_any_json_row_round_trips_through_the_official_runtime(row: dict[str, Any]) -> None:
    """As a source carries them (read exactly), written, parsed by Google's runtime, read back."""
    exact = loads_exact(json.dumps(row).encode())  # the standard library: ints of any size
    encoder = ProtobufEncoder(EncoderConfig(format="protobuf", updated=True), "cf", None)
    message = parse(encoder.value(change(exact), CTX))
    back = columns(message.wrapped.after.values)
    assert back == {name: _expected(v) for name, v in exact.items()}


def _expected(v: Any) -> Any:
    """What a value reads back as: numbers beyond int64 and fractions by their text."""
    if isinstance(v, bool) or v is None or isinstance(v, (str, Number)):
        return v
    if isinstance(v, int):
        return v if -(2**63) <= v < 2**63 else Number(str(v))
    if isinstance(v, float):
        return Number(orjson.dumps(v).decode())
    if isinstance(v, list):
        return [_expected(x) for x in v]
    return orjson.dumps(v, default=lambda n: orjson.Fragment(n.text)).decode()


def test_the_config_names_what_protobuf_cannot_take() -> None:
    for envelope in ("key_only", "row"):
        found = problems(minimal(encoder={"format": "protobuf", "envelope": envelope}))
        assert "has no protobuf message" in found["encoder.envelope"]
    found = problems(minimal(encoder={"format": "protobuf", "headers_json_column_name": "h"}))
    assert "as in CockroachDB" in found["encoder.headers_json_column_name"]
    found = problems(minimal(encoder={"format": "protobuf"}))
    assert "is needed with format: protobuf" in found["sources[0].primary_key"]
    found = problems(minimal(encoder={"schema_registry": {"url": "http://r"}}))
    assert "avro or protobuf" in found["encoder.schema_registry"]


def test_an_initial_scans_rows_are_protobuf_too() -> None:
    """The scan's snapshot row and the change after it, through the same encoder."""
    from dataclasses import replace  # noqa: PLC0415

    from tests.unit.test_batch import SRC, T, row  # noqa: PLC0415
    from tests.unit.test_scan import STATEMENT, scan_plan, sorted_arrow, walk  # noqa: PLC0415

    options = EncoderConfig(
        format="protobuf", envelope="enriched", enriched_properties=["source"], updated=True
    )
    plan = scan_plan()
    encoder = ProtobufEncoder(options, "cf", None)
    plan = replace(
        plan,
        batch=replace(plan.batch, encoders={SRC: encoder}, key_names={SRC: ("order_id",)}),
    )
    records, _ = walk(plan, sorted_arrow([(0, row(1, 2, True)), (1, row(1, 5, True))]))
    values = [parse(r["value"]).enriched for r in records]
    assert [v.op for v in values] == [pb.OP_CREATE, pb.OP_UPDATE]  # the snapshot's row: c
    assert [v.source.ts_hlc for v in values] == [str(T[STATEMENT]), str(T[5])]
    assert [columns(parse(r["key"], pb.Key).key) for r in records] == [{"order_id": 1}] * 2
