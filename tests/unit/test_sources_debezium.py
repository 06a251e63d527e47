"""Debezium's change events (``pipeline/core/sources/debezium.py``).

The records are shaped as Debezium's PostgreSQL connector writes them through Kafka Connect's
``JsonConverter``, with and without ``schemas.enable``, and its ``AvroConverter`` (Confluent's
wire format): a table with NUMERIC of fixed and of
variable scale (``decimal.handling.mode=precise``), dates, times, timestamps with and without
a zone, text of any characters; transaction metadata on.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import uuid
from dataclasses import replace
from decimal import Context, Decimal
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.sources import BadRecord, Change, SourceUnavailable
from pipeline.core.sources.debezium import DebeziumAdapter, decimal_number
from pipeline.core.sources.wire import WireReader, _raw
from schemas.hlc import Hlc
from schemas.jsontext import Number
from tests.support.debezium_avro import AVRO_KEY, AVRO_VALUE
from tests.unit.test_batch import SRC, arrow, run
from tests.unit.test_batch import plan as batch_plan

pytestmark = pytest.mark.unit


def b64(unscaled: int) -> str:
    size = max(1, (unscaled.bit_length() + 8) // 8)
    return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()


def column(name: str, kind: str, semantic: str | None = None, **parameters: str) -> dict[str, Any]:
    out: dict[str, Any] = {"type": kind, "optional": True, "field": name}
    if semantic is not None:
        out["name"] = semantic
    if parameters:
        out["parameters"] = parameters
    return out


COLUMNS = [
    column("id", "int32"),
    column("amount", "bytes", "org.apache.kafka.connect.data.Decimal", scale="2"),
    {
        "type": "struct",
        "optional": True,
        "name": "io.debezium.data.VariableScaleDecimal",
        "field": "ratio",
        "fields": [{"type": "int32", "field": "scale"}, {"type": "bytes", "field": "value"}],
    },
    column("day", "int32", "io.debezium.time.Date"),
    column("at", "int64", "io.debezium.time.MicroTimestamp"),
    column("at_ms", "int64", "org.apache.kafka.connect.data.Timestamp"),
    column("clock", "int64", "io.debezium.time.MicroTime"),
    column("zoned", "string", "io.debezium.time.ZonedTimestamp"),
    column("note", "string"),
]
SCHEMA = {
    "type": "struct",
    "name": "pg.public.orders.Envelope",
    "fields": [
        {"type": "struct", "fields": COLUMNS, "optional": True, "field": "before"},
        {"type": "struct", "fields": COLUMNS, "optional": True, "field": "after"},
        {"type": "struct", "fields": [], "optional": False, "field": "source"},
        {"type": "string", "optional": False, "field": "op"},
    ],
}
SOURCE = {
    "version": "3.3.1.Final",
    "connector": "postgresql",
    "name": "pg",
    "ts_ms": 1_700_000_000_123,
    "ts_us": 1_700_000_000_123_456,
    "ts_ns": 1_700_000_000_123_456_000,
    "snapshot": "false",
    "db": "shop",
    "schema": "public",
    "table": "orders",
    "txId": 771,
    "lsn": 24023984,
}
ROW = {
    "id": 7,
    "amount": b64(-123456),  # -1234.56
    "ratio": {"scale": 30, "value": b64(12345678901234567890123456789012345)},
    "day": 19782,  # 2024-02-29
    "at": 1_709_251_199_999_999,  # 2024-02-29T23:59:59.999999
    "at_ms": 1_709_251_199_120,
    "clock": 45_296_000_001,  # 12:34:56.000001
    "zoned": "2024-02-29T23:59:59.999999Z",
    "note": 'ü 𝄞 "quoted" \\ \u2028',
}
TYPED = {
    "id": 7,
    "amount": Number("-1234.56"),
    "ratio": Number("12345.678901234567890123456789012345"),
    "day": "2024-02-29",
    "at": "2024-02-29T23:59:59.999999",
    "at_ms": "2024-02-29T23:59:59.120",
    "clock": "12:34:56.000001",
    "zoned": "2024-02-29T23:59:59.999999Z",
    "note": ROW["note"],
}
TX = {"id": "771:24023984", "total_order": 2, "data_collection_order": 1}


def payload(op: str, after: Any = None, before: Any = None, **extra: Any) -> dict[str, Any]:
    return {
        "before": before,
        "after": after,
        "source": SOURCE,
        "op": op,
        "ts_ms": 1_700_000_000_200,
        "transaction": TX,
        **extra,
    }


def decode(key: Any, value: Any, *, schema: bool = True, exact: bool | None = None) -> Any:
    def enc(body: Any, body_schema: Any) -> bytes | None:
        if body is None:
            return None
        wrapped = {"schema": body_schema, "payload": body} if schema else body
        return json.dumps(wrapped, ensure_ascii=False).encode()

    return DebeziumAdapter().decode(enc(key, {"type": "struct"}), enc(value, SCHEMA), exact)


@pytest.mark.parametrize("exact", [None, False, True])
def test_an_insert_with_a_schema_reads_every_semantic_type_exactly(exact: bool | None) -> None:
    # exact=True: the batch's exact reader, which keeps 19-digit ts_ns as its text (seen on a
    # real feed: it read as "not an integer")
    change = decode({"id": 7}, payload("c", after=ROW), exact=exact)
    assert change == Change(
        [7], TYPED, None, "insert", Hlc(1_700_000_000_123_456_000, 2), None, ("771", 2)
    )


def test_updates_deletes_and_snapshot_reads() -> None:
    old = {**ROW, "note": "old"}
    update = decode({"id": 7}, payload("u", after=ROW, before=old))
    assert (update.op, update.after, update.before) == ("update", TYPED, {**TYPED, "note": "old"})
    delete = decode({"id": 7}, payload("d", before=ROW))
    assert (delete.op, delete.after, delete.before) == ("delete", None, TYPED)
    read = decode({"id": 7}, payload("r", after=ROW, transaction=None))
    assert (read.op, read.ts) == ("insert", Hlc(1_700_000_000_123_456_000, 0))


def test_tombstones_carry_nothing() -> None:
    assert DebeziumAdapter().decode(b'{"id":7}', None) is None
    assert decode({"id": 7}, None) is None
    tombstone = json.dumps({"schema": None, "payload": None}).encode()
    assert DebeziumAdapter().decode(b'{"id":7}', tombstone) is None


def test_without_a_schema_the_payload_is_kept_as_sent() -> None:
    sent = {**ROW, "amount": "-1234.56000000000000000001"}  # decimal.handling.mode=string
    change = decode({"id": 7, "region": "eu"}, payload("c", after=sent), schema=False)
    assert change.key == [7, "eu"]
    assert change.after == sent


def test_the_commit_time_falls_back_to_micro_then_milliseconds() -> None:
    micro = {k: v for k, v in SOURCE.items() if k != "ts_ns"}
    milli = {k: v for k, v in micro.items() if k != "ts_us"}
    assert (
        decode({"id": 1}, payload("c", after={}, source=micro)).ts.wall == 1_700_000_000_123_456_000
    )
    assert (
        decode({"id": 1}, payload("c", after={}, source=milli)).ts.wall == 1_700_000_000_123_000_000
    )


def test_two_versions_of_a_key_in_one_transaction_keep_their_order() -> None:
    first = decode({"id": 1}, payload("c", after={"id": 1}, transaction={**TX, "total_order": 1}))
    second = decode({"id": 1}, payload("u", after={"id": 1}, transaction={**TX, "total_order": 2}))
    assert first.ts < second.ts


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (None, payload("c", after=ROW), "no record key"),
        ({}, payload("c", after=ROW), "key has no fields"),
        ({"id": 7}, payload("t"), "TRUNCATE"),
        ({"id": 7}, payload("x", after=ROW), "'op' 'x'"),
        ({"id": 7}, payload("c"), "op 'c' with no 'after'"),
        ({"id": 7}, payload("d", after=ROW), "op 'd' with 'after'"),
        ({"id": 7}, payload("c", after=ROW, source=None), "no 'source'"),
        ({"id": 7}, payload("c", after=ROW, source={"ts_ms": "x"}), "'source.ts_ms'"),
        ({"id": 7}, payload("c", after=ROW, source={}), "commit time is needed"),
        ({"id": 7}, payload("c", after={**ROW, "amount": "%%%"}), "after.amount"),
        ({"id": 7}, payload("c", after={**ROW, "day": "today"}), "after.day"),
        ({"id": 7}, payload("c", after=[1]), "'after' is not an object"),
    ],
)
def test_what_cannot_be_read_is_a_bad_record_saying_why(key: Any, value: Any, reason: str) -> None:
    if key is None:
        with pytest.raises(BadRecord) as caught:
            DebeziumAdapter().decode(None, json.dumps(value).encode())
    else:
        with pytest.raises(BadRecord) as caught:
            decode(key, value)
    assert reason in str(caught.value)


@settings(max_examples=300, deadline=None)
@given(st.integers(-(10**40), 10**40), st.integers(-5, 40))
def test_decimals_decode_to_their_exact_value(unscaled: int, scale: int) -> None:
    number = decimal_number(b64(unscaled), scale)
    text = number.text if isinstance(number, Number) else str(number)
    assert Decimal(text) == Decimal(unscaled).scaleb(-scale, Context(prec=100))
    if scale > 0:
        assert len(text.split(".")[1]) == scale  # the declared scale's digits, trailing zeros too


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.binary(max_size=200) | st.none())
def test_no_bytes_crash_the_adapter(key: bytes, value: bytes | None) -> None:
    with contextlib.suppress(BadRecord):
        DebeziumAdapter().decode(key, value)


class NotFound(Exception):
    http_status_code = 404


def wire(schema_id: int, schema: Any, record: Any) -> bytes:
    """``record`` in Confluent's wire format, its values as stored (logical types raw)."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(_raw(schema)), record)
    return b"\x00" + schema_id.to_bytes(4, "big") + out.getvalue()


def test_avro_events_in_confluents_wire_format_read_as_their_json_twins() -> None:
    registry = {1: AVRO_KEY, 2: AVRO_VALUE}
    asked: list[int] = []

    def fetch(schema_id: int) -> str:
        asked.append(schema_id)
        if schema_id not in registry:
            raise NotFound
        return json.dumps(registry[schema_id])

    reader = WireReader(f"test-{uuid.uuid4()}", fetch)
    stored = {k: base64.b64decode(v) if k == "amount" else v for k, v in ROW.items()}
    stored["ratio"] = {"scale": 30, "value": base64.b64decode(ROW["ratio"]["value"])}
    source = {"ts_ms": SOURCE["ts_ms"], "ts_ns": SOURCE["ts_ns"], "lsn": SOURCE["lsn"]}
    event = {**payload("u", after=stored, before=stored), "source": source}
    adapter = DebeziumAdapter(reader)
    change = adapter.decode(wire(1, AVRO_KEY, {"id": 7}), wire(2, AVRO_VALUE, event))
    assert change == Change(
        [7], TYPED, TYPED, "update", Hlc(1_700_000_000_123_456_000, 2), None, ("771", 2)
    )
    adapter.decode(wire(1, AVRO_KEY, {"id": 7}), wire(2, AVRO_VALUE, event))
    assert asked == [1, 2]  # each writer schema fetched once
    with pytest.raises(BadRecord, match="name the registry"):
        DebeziumAdapter().decode(wire(1, AVRO_KEY, {"id": 7}), None)
    with pytest.raises(BadRecord, match="schema id 9 is not in the registry"):
        adapter.decode(wire(1, AVRO_KEY, {"id": 7}), b"\x00\x00\x00\x00\x09junk")
    with pytest.raises(BadRecord, match="Avro of schema id 2 cannot be read"):
        adapter.decode(wire(1, AVRO_KEY, {"id": 7}), wire(2, AVRO_VALUE, event)[:20])


def test_a_registry_out_of_reach_fails_the_batch_rather_than_judge_a_record_bad() -> None:
    """An outage is not the record's fault: nothing is dead-lettered for it."""
    record = wire(1, AVRO_KEY, {"id": 7})
    plan = replace(
        batch_plan(dlq=True),
        formats={SRC: "debezium"},
        registries={SRC: {"url": "http://127.0.0.1:9", "max.retries": 0}},  # no one there
    )
    with pytest.raises(SourceUnavailable, match="did not answer for schema id 1"):
        run(plan, arrow([(record, record)]))

    def fetch(_id: int) -> str:
        raise OSError("connection refused")

    with pytest.raises(SourceUnavailable, match="connection refused"):
        DebeziumAdapter(WireReader(f"test-{uuid.uuid4()}", fetch)).decode(record, record)
