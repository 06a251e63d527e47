"""TiCDC Canal-JSON (``format: canal-json``): events shaped as TiCDC documents them.

The shapes follow TiCDC's "TiCDC Canal-JSON Protocol" page (DDL, DML and WATERMARK events,
``enable-tidb-extension=true``), and what Canal itself sends (several rows per event, only
the changed columns in ``old``). Asserted: the changes and markers the adapter gives, and
the bytes a batch writes for them.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.sources import BadRecord, CanalJsonAdapter, Change, Marker
from pipeline.core.sources.canal import connect_type, tso_time
from schemas.hlc import Hlc
from schemas.jsontext import Number
from tests.unit.test_batch import SRC, arrow, plan, run

pytestmark = pytest.mark.unit

COMMIT_TS = 429918007904698368  # a TSO: (physical ms << 18) | logical
COMMIT = tso_time(COMMIT_TS, "commitTs")

# DML, as in TiCDC's documentation (integer columns at their limits)
INSERT: dict[str, Any] = {
    "id": 0,
    "database": "test",
    "table": "tp_int",
    "pkNames": ["id"],
    "isDdl": False,
    "type": "INSERT",
    "es": 1639633141221,
    "ts": 1639633142920,
    "sql": "",
    "sqlType": {"c_bigint": -5, "c_int": 4, "c_mediumint": 4, "c_tinyint": -6, "id": 4},
    "mysqlType": {
        "c_bigint": "bigint",
        "c_int": "int",
        "c_mediumint": "mediumint",
        "c_tinyint": "tinyint",
        "id": "int",
    },
    "data": [
        {
            "c_bigint": "9223372036854775807",
            "c_int": "2147483647",
            "c_mediumint": "8388607",
            "c_tinyint": "127",
            "id": "2",
        }
    ],
    "old": None,
    "_tidb": {"commitTs": COMMIT_TS},
}
WATERMARK: dict[str, Any] = {
    "id": 0,
    "database": "",
    "table": "",
    "pkNames": None,
    "isDdl": False,
    "type": "TIDB_WATERMARK",
    "es": 1640007049196,
    "ts": 1640007050284,
    "sql": "",
    "sqlType": None,
    "mysqlType": None,
    "data": None,
    "old": None,
    "_tidb": {"watermarkTs": COMMIT_TS + 5},
}
DDL: dict[str, Any] = {
    "id": 0,
    "database": "test",
    "table": "",
    "pkNames": None,
    "isDdl": True,
    "type": "QUERY",
    "es": 1639633094670,
    "ts": 1639633095489,
    "sql": "drop database if exists test",
    "sqlType": None,
    "mysqlType": None,
    "data": None,
    "old": None,
    "_tidb": {"commitTs": COMMIT_TS - 1},
}
TYPES = {
    "id": "bigint(20) unsigned",
    "price": "decimal(40,12)",
    "ratio": "double",
    "note": "varchar(255)",
    "born": "datetime",
    "doc": "json",
    "flag": "bit(1)",
}


def event(kind: str, data: list[dict[str, Any]], old: list[dict[str, Any]] | None = None) -> bytes:
    body = {
        **INSERT,
        "table": "items",
        "type": kind,
        "mysqlType": TYPES,
        "sqlType": dict.fromkeys(TYPES, 12),
        "data": data,
        "old": old,
    }
    return json.dumps(body, ensure_ascii=False).encode()


def decode(value: bytes | dict[str, Any]) -> Any:
    data = value if isinstance(value, bytes) else json.dumps(value).encode()
    return CanalJsonAdapter().decode(None, data)


def test_the_tso_is_an_hlc_in_the_same_order() -> None:
    assert Hlc((COMMIT_TS >> 18) * 1_000_000, COMMIT_TS & 0x3FFFF) == COMMIT
    assert tso_time(COMMIT_TS + 1, "t") > COMMIT
    assert tso_time((COMMIT_TS >> 18 << 18) + (1 << 18), "t") > tso_time(COMMIT_TS | 0x3FFFF, "t")


def test_the_documented_insert_is_one_change_with_typed_values() -> None:
    change = decode(INSERT)
    assert change == Change(
        [2],
        {
            "c_bigint": Number("9223372036854775807"),  # as the exact JSON reader keeps it
            "c_int": 2147483647,
            "c_mediumint": 8388607,
            "c_tinyint": 127,
            "id": 2,
        },
        None,
        "insert",
        COMMIT,
    )


def test_a_watermark_is_a_marker_and_ddl_is_nothing() -> None:
    assert decode(WATERMARK) == Marker(tso_time(COMMIT_TS + 5, "w"))
    assert decode(DDL) is None


def test_numbers_keep_their_text_and_the_rest_stays_text() -> None:
    row = {
        "id": "18446744073709551615",  # unsigned bigint beyond 64 signed bits
        "price": "12345678901234567890.123456789000",
        "ratio": "1.7976931348623157e308",
        "note": 'a "quoted" ü 𝄞 \\ line\nbreak',
        "born": "2024-02-29 23:59:59.999999",
        "doc": '{"a": [1, 2.50]}',
        "flag": "1",
    }
    change = decode(event("INSERT", [row]))
    assert change.key == [Number("18446744073709551615")]
    assert change.after == {
        **row,
        "id": Number("18446744073709551615"),
        "price": Number("12345678901234567890.123456789000"),
        "ratio": Number("1.7976931348623157e308"),
        "flag": 1,
    }


def test_an_update_before_is_the_row_with_old_over_it_and_several_rows_are_several_changes() -> (
    None
):
    rows = [{"id": "1", "note": "new", "price": "1.10"}, {"id": "2", "note": None, "price": "0"}]
    old = [{"note": "old"}, {"price": "-0.00"}]  # Canal lists the changed columns only
    first, second = decode(event("UPDATE", rows, old))
    assert first == Change(
        [1],
        {"id": 1, "note": "new", "price": Number("1.10")},
        {"id": 1, "note": "old", "price": Number("1.10")},
        "update",
        COMMIT,
    )
    assert second.before == {"id": 2, "note": None, "price": Number("-0.00")}
    gone = decode(event("DELETE", rows))
    assert [(c.key, c.after, c.before["note"], c.op) for c in gone] == [
        ([1], None, "new", "delete"),
        ([2], None, None, "delete"),
    ]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({**INSERT, "_tidb": None}, "enable-tidb-extension=true"),
        ({**INSERT, "_tidb": {"commitTs": "429918007904698368"}}, "'_tidb.commitTs' is not a TSO"),
        ({**WATERMARK, "_tidb": {}}, "'_tidb.watermarkTs' is not a TSO"),
        ({**INSERT, "type": "REPLACE"}, "'type' 'REPLACE' is not"),
        ({**INSERT, "data": []}, "'data' is not a non-empty array"),
        ({**INSERT, "pkNames": None}, "needs a primary key"),
        ({**INSERT, "data": [{"c_int": "1"}]}, "lacks its primary key columns ['id']"),
        ({**INSERT, "data": [{**INSERT["data"][0], "c_int": "12abc"}]}, "column 'c_int'"),
        ({**INSERT, "data": [{**INSERT["data"][0], "c_int": 12}]}, "column 'c_int'"),
        ({**INSERT, "mysqlType": None}, "no 'mysqlType'"),
        ({**INSERT, "type": "UPDATE", "old": None}, "an UPDATE's 'old'"),
        ({**INSERT, "data": ["x"]}, "a row of 'data' is not an object"),
    ],
)
def test_what_cannot_be_read_is_a_bad_record_saying_why(body: dict[str, Any], reason: str) -> None:
    with pytest.raises(BadRecord, match=None) as caught:
        decode(body)
    assert reason in str(caught.value)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_no_bytes_crash_the_adapter(data: bytes) -> None:
    with contextlib.suppress(BadRecord):
        decode(data)


def test_a_batch_writes_each_row_of_an_event_skips_ddl_and_rises_on_watermarks() -> None:
    p = replace(plan(dlq=True), formats={SRC: "canal-json"})
    two = event("INSERT", [{"id": "7", "price": "1.50"}, {"id": "8", "price": "2.50"}])
    records, result = run(
        p,
        arrow(
            [
                (None, json.dumps(DDL).encode()),
                (None, two),
                (None, b"not json"),
                (None, json.dumps(WATERMARK).encode()),
                (None, event("UPDATE", [{"id": "7", "price": "1.60"}], [{"price": "1.50"}])),
            ]
        ),
    )
    updated = str(COMMIT)
    assert [(r["topic"], r["key"], r["value"]) for r in records] == [
        (
            "out.orders",
            b"[7]",
            f'{{"after":{{"id":7,"price":1.50}},"updated":"{updated}"}}'.encode(),
        ),
        (
            "out.orders",
            b"[8]",
            f'{{"after":{{"id":8,"price":2.50}},"updated":"{updated}"}}'.encode(),
        ),
        ("dlq", None, b"not json"),
    ]
    (seen,) = result.partitions
    assert seen.resolved == tso_time(COMMIT_TS + 5, "w")
    assert seen.duplicates == 1  # the update is at or below the watermark that came before it
    assert seen.bad == 1


def test_a_number_in_a_text_column_of_an_event_of_several_rows_keeps_its_spelling() -> None:
    """Text columns keep what TiCDC wrote, whatever it is: here numbers orjson would respell."""
    p = replace(plan(), formats={SRC: "canal-json"})
    body = event("INSERT", [{"id": "7", "name": "x"}, {"id": "8", "name": "y"}]).decode()
    body = body.replace('"name": "x"', '"name": 1.50').replace('"name": "y"', '"name": 1E5')
    records, _ = run(p, arrow([(None, body.encode())]))
    assert [r["value"].split(b',"updated"')[0] for r in records] == [
        b'{"after":{"id":7,"name":1.50}',
        b'{"after":{"id":8,"name":1E5}',
    ]


def test_mysql_types_become_the_avro_types_that_hold_the_values_read_from_them() -> None:
    """``mysqlType`` as Connect types, then as Avro (``schemas/connect.py``): exact types."""
    from schemas.connect import avro_type  # noqa: PLC0415

    def avro(kind: str) -> Any:
        return avro_type({**connect_type(kind), "field": "c"})

    assert avro("int(11)") == "int"
    assert avro("int(10) unsigned") == "long"
    assert avro("smallint unsigned") == "int"
    assert avro("bigint(20)") == "long"
    assert avro("bigint(20) unsigned") == {
        "type": "bytes",
        "logicalType": "decimal",
        "precision": 20,
        "scale": 0,
    }
    assert avro("decimal(40,12)")["precision"] == 40
    assert avro("DECIMAL(7, 2)")["scale"] == 2
    assert avro("decimal")["precision"] == 10  # MySQL's default decimal(10,0)
    assert (avro("double"), avro("float"), avro("year")) == ("double", "float", "int")
    assert avro("date") == {"type": "int", "logicalType": "date"}
    for text in ("varchar(255)", "datetime(6)", "json", "enum('a','b')", "time", "blob"):
        assert avro(text) == "string"


def test_a_row_event_s_shape_is_its_typed_columns_keyed_by_pk_names() -> None:
    adapter = CanalJsonAdapter()
    shape = adapter.shape(None, event("INSERT", [{"id": "1"}]))
    assert shape is not None
    assert list(shape.columns) == list(TYPES)
    assert shape.key == ("id",)
    assert shape.columns["id"]["optional"] is False
    assert shape.columns["note"] == {"type": "string", "field": "note", "optional": True}
    assert adapter.shape(None, json.dumps(WATERMARK).encode()) is None
    assert adapter.shape(None, json.dumps(DDL).encode()) is None
