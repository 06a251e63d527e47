"""One Spark row per change (``pipeline/core/batch/rows.py``), for every source format.

What a CDC query and the initial scan read of each record, and the loops that take each
change from its record again.

Fed Arrow batches as Spark would (the scan's sorted as ``chunk_records`` sorts them), without
Spark. Asserted: the rows ``split_rows`` makes, and the bytes the stream's and the scan's
loops write from them.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pytest

from encoders.json import JsonEncoder
from pipeline.config import EncoderConfig
from pipeline.core.batch.rows import split_rows
from pipeline.core.ledger.frontier import SourcePartition
from pipeline.core.scan.scan import ScanPlan
from pipeline.core.sources.canal import tso_time
from tests.support.canal import canal, tso, watermark
from tests.unit.test_batch import SRC, arrow, plan, run
from tests.unit.test_scan import walk

pytestmark = pytest.mark.unit

BASE = 1_700_000_000_000  # milliseconds


def event(kind: str, ms: int, data: list[dict[str, Any]], old: Any = None) -> bytes:
    return canal(kind, tso(BASE + ms), data, old=old)


def mark(ms: int) -> bytes:
    return watermark(tso(BASE + ms))


DDL = json.dumps(
    {"type": "ALTER", "isDdl": True, "sql": "ALTER TABLE orders ADD c int", "_tidb": {}}
).encode()


def order(i: int, amount: str, note: str = "") -> dict[str, str]:
    return {"id": str(i), "amount": amount, "note": note}


def split(source_format: str, values: list[bytes | None], keys: Any = None) -> pa.RecordBatch:
    records = list(zip(keys or [None] * len(values), values, strict=True))
    out = list(split_rows(source_format, None, True, iter([arrow(records)])))
    return pa.Table.from_batches(out).to_batches()[0]


def test_each_change_of_a_record_is_a_row_of_its_own_keyed_and_enveloped_exactly() -> None:
    two = event("INSERT", 1, [order(1, "10.50", "ü 𝄞"), order(2, "-0.0000000001")])
    one = event("UPDATE", 2, [order(1, "1e-10")], old=[{"amount": "10.50"}])
    rows = split("canal-json", [two, mark(2), DDL, b"{not json", one]).to_pylist()
    # the record's own columns, copied to each of its rows; the loops decode it again
    assert [r["offset"] for r in rows] == [0, 0, 1, 2, 3, 4]
    assert [r["value"] for r in rows] == [two, two, mark(2), DDL, b"{not json", one]
    assert all(r["headers"] == [{"key": "h", "value": b"x"}] for r in rows)
    assert [r["row"] for r in rows] == [0, 1, None, None, None, None]
    assert [r["group"] for r in rows] == [b"[1]", b"[2]", None, None, None, b"[1]"]
    first, second, *_, update = (r["envelope"] for r in rows)
    commit = str(tso_time(tso(BASE + 1), "ts"))
    envelope = '{"after":{"id":1,"amount":10.50,"note":"ü 𝄞"},"before":null,"updated":"%s"}'
    assert first == (envelope % commit).encode()
    assert b'"amount":-0.0000000001' in second  # numbers as the source wrote them
    assert json.loads(update)["before"] == {"id": 1, "amount": 10.5, "note": ""}
    assert b'"amount":1e-10' in update


def test_the_initial_scan_of_canal_json_groups_each_row_by_its_own_key() -> None:
    """TiCDC sends no record key and batches rows: the scan groups by the rows' keys."""
    history = [
        event("INSERT", 1, [order(1, "1.10"), order(2, "2.20"), order(3, "3.30")]),
        mark(1),
        event("UPDATE", 2, [order(1, "1.11"), order(3, "3.31")], old=[{}, {}]),
        event("DELETE", 3, [order(2, "2.20")]),
        mark(3),  # the statement time
        event("UPDATE", 4, [order(3, "3.32")], old=[{}]),
        event("INSERT", 5, [order(2, "2.00"), order(4, "4.40")]),
    ]
    rows = split("canal-json", history)
    order_by = sorted(
        range(rows.num_rows),
        key=lambda i: (
            rows["group"][i].as_py() or b"",
            rows["offset"][i].as_py(),
            rows["row"][i].as_py() or 0,
        ),
    )
    chunk = rows.take(pa.array(order_by)).drop_columns(["topic", "partition", "envelope"])
    batch = replace(
        plan(),
        formats={SRC: "canal-json"},
        encoders={SRC: JsonEncoder(EncoderConfig(updated=True, mvcc_timestamp=True))},
    )
    statement = tso_time(tso(BASE + 3), "ts")
    records, result = walk(ScanPlan(batch, statement, chunk=SourcePartition(SRC, 0)), chunk)
    emitted = [(r["key"], json.loads(r["value"])) for r in records]
    at = {ms: str(tso_time(tso(BASE + ms), "ts")) for ms in range(1, 6)}
    assert [(k, v["after"]["amount"], v["updated"], v["mvcc_timestamp"]) for k, v in emitted] == [
        (b"[1]", 1.11, at[3], at[2]),  # the latest version at or below T, at T
        (b"[2]", 2.0, at[5], at[5]),  # deleted at T: only its insert after T
        (b"[3]", 3.31, at[3], at[2]),
        (b"[3]", 3.32, at[4], at[4]),  # then its change after T
        (b"[4]", 4.4, at[5], at[5]),
    ]
    assert result.bad == 0


def debezium(i: int, op: str, place: int, name: str) -> tuple[bytes, bytes]:
    value = {
        "before": None,
        "after": {"id": i, "name": name},
        "op": op,
        "source": {
            "connector": "postgresql",
            "ts_ms": 1_700_000_000_000,
            "sequence": json.dumps(["24023000", str(24023000 + place)]),
        },
        "transaction": {"id": "771:24023984", "total_order": place},
    }
    return json.dumps({"id": i}).encode(), json.dumps(value).encode()


def test_a_change_the_query_does_not_keep_still_counts_for_its_transaction() -> None:
    """Over Debezium, ``where`` drops nothing in Spark: the loop counts what it does not emit."""
    keys, values = zip(debezium(1, "c", 1, "kept"), debezium(2, "c", 2, "left out"), strict=True)
    rows = split("debezium", list(values), list(keys))
    rows = rows.append_column("keep", pa.array([True, False]))
    batch = replace(plan(), formats={SRC: "debezium"}, counted=frozenset({SRC}))
    records, result = run(batch, rows)
    assert [json.loads(r["value"])["after"]["name"] for r in records] == ["kept"]
    (seen,) = result.partitions
    assert seen.transactions["771"][0] == [24023001, 24023002]  # both read: the count is met
