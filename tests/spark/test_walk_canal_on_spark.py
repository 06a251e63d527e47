"""The JVM walk of TiCDC's Canal-JSON events against the Python loop: the same records out.

Events of several rows each (inserts, updates with their old values, deletes) typed by
``mysqlType`` (numeric types as numbers with the text TiCDC wrote, the rest as it came),
watermarks (markers), DDL events, and events the walk leaves to the Python loop (a numeric
column that spells no number, a missing key column, an unknown type, bad JSON). The walk and
the rests it leaves write the bytes the Python loop alone writes, per source partition in
order, with the same summaries.
"""

import json
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from encoders.json import JsonEncoder
from pipeline.config import EncoderConfig
from pipeline.core.batch.contract import BatchPlan
from pipeline.core.batch.walk import Walked, walk_plan
from schemas.hlc import Hlc
from tests.support.canal import tso
from tests.support.json_text import number, string, text
from tests.support.tables import CANAL_TABLE
from tests.support.walk import (
    AVRO_OPTIONS,
    avro_encoder,
    avro_key_partition,
    frame,
    same_as_the_python_loop,
)

SRC = "tidb.shop.orders"
MS = 1_700_000_000_000
TYPES = {
    "id": "int",
    "amount": "decimal(30,10)",
    "f": "double",
    "u": "bigint(20) unsigned",
    "b": "bit(1)",
    "y": "Integer",
    "note": "text",
    "at": "datetime(6)",
    "j": "json",
    "word": "intx",  # not a numeric type: no word boundary
}
NUMERIC = {"amount", "f", "u", "b", "y"}


def value(name: str, odd: bool) -> Any:
    """A column's value as TiCDC writes it: text (numbers as text), or null."""
    if name in NUMERIC:
        good = number.map(json.dumps)
        bad = st.sampled_from(['"abc"', "5", '" 1"', '"1e"', "true"])
        return st.one_of(st.just("null"), *[good] * 6, *[bad] * odd)
    return st.one_of(st.just("null"), string, *[text] * odd)


def row(odd: bool, columns: list[str]) -> Any:
    return st.fixed_dictionaries({c: value(c, odd) for c in columns})


def event(odd: bool) -> Any:
    columns = [c for c in TYPES if c != "id"]
    return st.fixed_dictionaries(
        {
            "type": st.sampled_from(
                ["INSERT", "UPDATE", "DELETE"] + (["TRUNCATE", "TIDB_WATERMARK"] if odd else [])
            ),
            "rows": st.lists(row(odd, columns), min_size=1, max_size=3),
            "old": st.lists(row(odd, columns[:3]), min_size=3, max_size=3),
            "n": st.integers(0, 30),  # the commit's millisecond: some at or below the floor
            "logical": st.integers(0, 3),
            "pk": st.sampled_from(
                [["id"], ["id"], ["id", "note"]] + ([["nope"], []] if odd else [])
            ),
            "spaced": st.booleans(),
        }
    )


watermark = st.builds(lambda n: ("watermark", n), st.integers(0, 30))
other = st.sampled_from(["ddl", "not_json", "no_tidb", "null_value"])
record = st.integers(0, 99).flatmap(
    lambda k: event(False) if k < 80 else watermark if k < 88 else event(True) if k < 95 else other
)
partition_records = st.lists(record, min_size=1, max_size=20)


def event_bytes(p: int, offset: int, e: dict[str, Any]) -> bytes:
    rows = []
    for r, values in enumerate(e["rows"]):
        rows.append({"id": json.dumps(str(p * 100_000 + offset * 10 + r)), **values})
    old = e["old"][: len(rows)]
    sep = ", " if e["spaced"] else ","

    def obj(values: dict[str, str]) -> str:
        return "{" + sep.join(f'"{k}":{v}' for k, v in values.items()) + "}"

    ts = tso(MS + e["n"], e["logical"])
    members = {
        "id": "0",
        "database": '"shop"',
        "table": '"orders"',
        "pkNames": json.dumps(e["pk"]),
        "isDdl": "false",
        "type": json.dumps(e["type"]),
        "es": str(MS),
        "ts": str(MS),
        "sql": '""',
        "mysqlType": json.dumps(TYPES),
        "data": "[" + ",".join(obj(r) for r in rows) + "]",
        "old": "[" + ",".join(obj(o) for o in old) + "]" if e["type"] == "UPDATE" else "null",
        "_tidb": f'{{"commitTs":{ts}}}'
        if e["type"] != "TIDB_WATERMARK"
        else f'{{"watermarkTs":{ts}}}',
    }
    return ("{" + sep.join(f'"{k}":{v}' for k, v in members.items()) + "}").encode()


def source_records(partitions: list[list[Any]]) -> list[tuple[Any, ...]]:
    records = []
    for p, items in enumerate(partitions):
        for offset, item in enumerate(items):
            value: bytes | None
            if isinstance(item, dict):
                value = event_bytes(p, offset, item)
            elif isinstance(item, tuple):
                ts = tso(MS + item[1])
                value = json.dumps(
                    {"type": "TIDB_WATERMARK", "_tidb": {"watermarkTs": ts}}
                ).encode()
            elif item == "ddl":
                value = b'{"type":"ALTER","isDdl":true,"_tidb":{"commitTs":1}}'
            elif item == "not_json":
                value = b'{"type":"INSERT"'
            elif item == "no_tidb":
                value = b'{"type":"INSERT","data":[]}'
            else:
                value = None
            records.append((None, value, SRC, p, offset, [{"key": "h", "value": b"v"}]))
    return records


def plan(dlq: str | None, floor: int, diff: bool, key_column: str | None = None) -> BatchPlan:
    # key_column "id": each row keyed by [id] (KeyColumn.java), which names its partition too
    options = EncoderConfig(updated=True, diff=diff, key_column=key_column, unordered=True)
    return BatchPlan(
        thresholds={(SRC, 0): Hlc((MS + floor) * 1_000_000)},
        tables={SRC: "orders"},
        formats={SRC: "canal-json"},
        routes={SRC: "out.orders"},
        encoders={SRC: JsonEncoder(options)},
        dlq_topic=dlq,
        new_partition_floor=Hlc((MS + 3) * 1_000_000),
    )


def key_partition(key: bytes) -> int:
    return int(json.loads(key)[0]) // 100_000


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    partitions=st.lists(partition_records, min_size=1, max_size=3),
    floor=st.integers(0, 10),
    dlq=st.sampled_from(["dlq", None]),
    diff=st.booleans(),
    key_column=st.sampled_from([None, "id"]),
)
def test_the_walk_writes_what_the_python_loop_writes_of_canal_json_events(  # noqa: PLR0917
    spark,
    dlq: str | None,
    partitions: list[list[Any]],
    floor: int,
    diff: bool,
    key_column: str | None,
) -> None:
    the_plan = plan(dlq, floor, diff, key_column)
    assert walk_plan(the_plan) is not None
    records = source_records(partitions)
    same_as_the_python_loop(frame(spark, records, len(partitions)), the_plan, key_partition)


# Avro output (the table's columns primitive, so the walk writes it): numeric columns into
# longs and doubles (numbers of every form, big integers: some misfits), text of any
# characters into strings; every envelope member or a few, key only; both framings.
def avro_plan(dlq: str | None, floor: int, options: EncoderConfig, confluent: bool) -> BatchPlan:
    encoder = avro_encoder(CANAL_TABLE, options, confluent=confluent)
    return replace(plan(dlq, floor, options.diff), encoders={SRC: encoder})


avro_partition = avro_key_partition(CANAL_TABLE, "id", 100_000)


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    partitions=st.lists(partition_records, min_size=1, max_size=3),
    floor=st.integers(0, 10),
    dlq=st.sampled_from(["dlq", None]),
    options=st.sampled_from(AVRO_OPTIONS),
    confluent=st.booleans(),
)
def test_the_walk_writes_what_the_python_loop_writes_of_canal_json_events_in_avro(  # noqa: PLR0917
    spark,
    dlq: str | None,
    partitions: list[list[Any]],
    floor: int,
    options: EncoderConfig,
    confluent: bool,
) -> None:
    the_plan = avro_plan(dlq, floor, options, confluent)
    assert walk_plan(the_plan) is not None
    records = source_records(partitions)
    same_as_the_python_loop(frame(spark, records, len(partitions)), the_plan, avro_partition)


def test_clean_canal_events_are_all_the_walks_in_avro(spark) -> None:
    """Events as TiCDC writes them, values that fit the table: the walk takes every row.

    Several rows per event, an update with its old values, a delete of several rows, NULLs,
    decimals, a bigint's 19 digits, text with escapes and any characters; in both framings,
    as the Python loop writes them.
    """
    nulls = dict.fromkeys((c for c in TYPES if c != "id"), "null")
    full = {
        **nulls,
        "amount": '"-12.3400000000"',
        "u": '"9223372036854775807"',
        "f": '"1E-3"',
        "b": '"1"',
        "y": '"2024"',
        "note": '"q\\"b\\\\ \\u0000\\n é€😀"',
        "at": '"2025-11-24 16:00:00.123456"',
        "j": '"{\\"a\\": [1, 2.50]}"',
        "word": '"5"',
    }
    old = [{"amount": '"1.5"', "note": "null", "u": '"-9223372036854775808"'}] * 3
    base = {"old": old, "n": 5, "logical": 0, "pk": ["id"], "spaced": False}
    events: list[Any] = [
        {**base, "type": "INSERT", "rows": [full, nulls, {**nulls, "note": '""'}]},
        {**base, "type": "UPDATE", "rows": [nulls, full], "n": 6},
        {**base, "type": "DELETE", "rows": [full, nulls], "n": 7},
    ]
    records = source_records([events])
    batch = frame(spark, records, 1)
    for options in AVRO_OPTIONS:
        for confluent in (True, False):
            the_plan = avro_plan(None, 0, options, confluent)
            rows, walked = Walked.rows(batch, walk_plan(the_plan) or "", 0)
            assert len(rows.collect()) == 7
            result, rests = walked.result()
            assert rests == []
            assert result.partitions[0].emitted == 7
            same_as_the_python_loop(batch, the_plan, avro_partition)
