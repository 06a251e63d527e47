"""`headers_json_column_name`: a JSON column's members as each record's headers.

The column's object (or its text) comes from the new version, a delete's old one; strings
are their UTF-8, other values their JSON text (numbers as the source wrote them), nulls left
out; the column leaves the value (and the Avro row record); what is no JSON object is a bad
record. The loop puts the headers on the record, before a claim check's; the JVM walk takes
them from a compact object (JSON output: ``HeadersColumn.java``; Avro: ``Avro.java``).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from encoders.avro import AvroEncoder, Framing
from encoders.base import ChangeRow
from encoders.headers import split_headers
from encoders.json import JsonEncoder
from pipeline.config import EncoderConfig
from pipeline.core.batch.contract import RECORD_FRAMING
from schemas import claims
from schemas.avro import OutputSchemas
from schemas.errors import EncodingError
from schemas.hlc import Hlc
from schemas.jsontext import loads_exact
from tests.unit.test_avro import ORDERS
from tests.unit.test_batch import T, arrow, plan, rec, run
from tests.unit.test_config import minimal, problems

TS = Hlc(1700000000000000000, 3)
META = '{"trace": "t-1 ✓", "hops": 3, "price": 1.50, "deep": {"a": [1, null]}, "gone": null}'


def test_the_members_become_headers_and_the_column_leaves_both_images() -> None:
    after = {"id": 1, "meta": loads_exact(META.encode())}
    before = {"id": 1, "meta": {"trace": "old"}}
    row, headers = split_headers(ChangeRow("t", [1], after, before, TS, TS), "meta")
    assert (row.after, row.before) == ({"id": 1}, {"id": 1})
    assert headers == [
        {"key": "trace", "value": "t-1 ✓".encode()},
        {"key": "hops", "value": b"3"},
        {"key": "price", "value": b"1.50"},  # as the source wrote it
        {"key": "deep", "value": b'{"a":[1,null]}'},
    ]
    # its text, as Debezium writes a JSON column; a delete takes the old version's
    deleted, headers = split_headers(
        ChangeRow("t", [1], None, {"id": 1, "meta": META}, TS, TS), "meta"
    )
    assert deleted.before == {"id": 1}
    assert headers is not None
    assert headers[0] == {"key": "trace", "value": "t-1 ✓".encode()}
    # none at all: no headers
    assert split_headers(ChangeRow("t", [1], {"id": 1}, None, TS, TS), "meta")[1] is None
    for wrong in ("[1, 2]", "not json", 7):
        with pytest.raises(EncodingError, match="not a JSON object"):
            split_headers(ChangeRow("t", [1], {"id": 1, "meta": wrong}, None, TS, TS), "meta")


def test_the_loop_writes_them_on_the_record_before_a_claim_checks(tmp_path: Path) -> None:
    options = EncoderConfig(updated=True, headers_json_column_name="meta")
    encoder = JsonEncoder(options)
    # the walk takes the column out of the source's own members (HeadersColumn.java); the
    # initial scan's walk does not
    assert encoder.walk == {
        "kind": "verbatim",
        "members": ["after", "updated"],
        "headers_column": "meta",
    }
    assert encoder.scan_walk is None
    p = replace(plan(), encoders={"src.orders": encoder}, headers_column="meta")
    small = rec([1], {"after": {"order_id": 1, "meta": {"a": "x"}}, "updated": T[1]})
    plain = rec([2], {"after": {"order_id": 2}, "updated": T[2]})
    large = rec([3], {"after": {"order_id": 3, "v": "L" * 900, "meta": {"b": 2}}, "updated": T[3]})
    bad = rec([4], {"after": {"order_id": 4, "meta": [1]}, "updated": T[4]})
    p = replace(
        p, max_record_bytes=600 + RECORD_FRAMING, claim_store=str(tmp_path), dlq_topic="dlq"
    )
    records, result = run(p, arrow([small, plain, large, bad]))
    out = [r for r in records if r["topic"] == "out.orders"]
    assert [json.loads(claims.claimed(r["value"]) or r["value"])["after"] for r in out] == [
        {"order_id": 1},
        {"order_id": 2},
        {"order_id": 3, "v": "L" * 900},
    ]
    assert out[0]["headers"] == [{"key": "a", "value": b"x"}]
    assert out[1]["headers"] is None
    assert [h["key"] for h in out[2]["headers"]] == ["b", claims.HEADER]
    assert result.bad == 1  # the object that is none: a dead letter
    assert [r["topic"] for r in records].count("dlq") == 1


def test_avro_leaves_the_column_out_of_the_row_record_and_the_config_checks_it() -> None:
    options = EncoderConfig(format="avro", updated=True, headers_json_column_name="note")
    schemas = OutputSchemas.of(ORDERS, options)
    row = schemas.value["fields"][0]["type"][1]
    assert "note" not in [f["name"] for f in row["fields"]]
    # the walk takes the column out of the versions itself (Avro.java), not in its columns
    walk = AvroEncoder(schemas, Framing.confluent(1, 2, 3), options, "orders").walk or {}
    assert walk["headers_column"] == "note"
    assert "note" not in [f[0] for f in walk["columns"]]
    assert "note" in [
        f["name"]
        for f in OutputSchemas.of(ORDERS, EncoderConfig(format="avro")).value["fields"][0]["type"][
            1
        ]["fields"]
    ]
    declared = [
        {
            "topic": "src.orders",
            "table": "orders",
            "table_schema": dict(ORDERS.record),
            "primary_key": ["region", "order_id"],
        }
    ]
    found = problems(minimal(sources=declared, encoder={"headers_json_column_name": "meta"}))
    assert "has no column 'meta' (headers_json_column_name)" in found["sources[0].table_schema"]
