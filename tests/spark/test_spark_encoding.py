"""The Spark-column JSON encoder must produce what the reference encoder produces."""

import itertools
import json
from dataclasses import dataclass
from typing import Any

import pytest
from pyspark.sql import functions as F

from encoders.base import ChangeRow, Context
from encoders.json import JsonEncoder
from pipeline.spark_encoding import json_value
from schemas.hlc import Hlc

OPTIONS = ("updated", "mvcc_timestamp", "diff", "key_in_value", "topic_in_value")


@dataclass(frozen=True)
class Opts:
    envelope: Any
    updated: bool = False
    mvcc_timestamp: bool = False
    diff: bool = False
    key_in_value: bool = False
    topic_in_value: bool = False


ROWS = [
    ChangeRow(
        "orders",
        ["eu", 1],
        {"region": "eu", "order_id": 1, "amount": 9.5, "note": None},
        None,
        Hlc(1700000000000000000, 0),
        Hlc(1700000000000000000, 0),
    ),
    ChangeRow(
        "orders",
        ["eu", 1],
        {"region": "eu", "order_id": 1, "amount": 10.25, "note": "ü"},
        {"region": "eu", "order_id": 1, "amount": 9.5, "note": None},
        Hlc(1700000000000000001, 3),
        Hlc(1700000000000000001, 3),
    ),
    ChangeRow(
        "orders",
        ["eu", 1],
        None,
        {"region": "eu", "order_id": 1},
        Hlc(1700000000000000002, 0),
        Hlc(1700000000000000002, 0),
    ),
    ChangeRow("orders", ["us", 2], {}, None, Hlc(5, 1), Hlc(5, 1)),
]


def combinations() -> list[Opts]:
    out = []
    for envelope in ("wrapped", "bare", "key_only", "row"):
        for flags in itertools.product((False, True), repeat=len(OPTIONS)):
            if envelope in ("key_only", "row") and any(flags):
                continue  # refused by the config, or no effect
            out.append(Opts(envelope, **dict(zip(OPTIONS, flags, strict=True))))
    return out


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


@pytest.fixture(scope="module")
def rows_df(spark):
    return spark.createDataFrame(
        [
            (
                dumps(r.key),
                None if r.after is None else dumps(r.after),
                None if r.before is None else dumps(r.before),
                str(r.updated),
            )
            for r in ROWS
        ],
        "key string, after string, before string, ts string",
    )


def test_spark_envelopes_equal_the_reference_encoder(rows_df) -> None:
    columns = []
    combos = combinations()
    for i, opts in enumerate(combos):
        value = json_value(
            opts,
            key=F.col("key"),
            after=F.col("after"),
            before=F.col("before"),
            updated=F.col("ts"),
            mvcc_timestamp=F.col("ts"),
            topic=F.lit("hw.orders"),
        )
        columns.append(value.alias(f"c{i}"))
    results = rows_df.select(*columns).collect()
    for i, opts in enumerate(combos):
        reference = JsonEncoder(opts)
        for row, result in zip(ROWS, results, strict=True):
            expected = reference.value(row, Context("hw.orders"))
            got = result[f"c{i}"]
            if expected is None:
                assert got is None, (opts, row)
            else:
                assert got is not None, (opts, row)
                assert json.loads(got) == json.loads(expected), (opts, row)
                assert list(json.loads(got)) == list(json.loads(expected))  # field order too
