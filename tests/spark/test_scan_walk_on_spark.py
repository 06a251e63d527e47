"""An initial scan's chunk walked in the JVM against the Python scan: the same records out.

Whatever a chunk holds (several versions per key around the statement time, equal times,
deletes, numbers of every form, keys in any spelling, markers, bad records of every kind), the
JVM's walk and the rest it leaves to the Python scan write the bytes the Python scan alone
writes, in the same order, with the same summary.
"""

from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, Observation, SparkSession

from encoders.json import JsonEncoder
from pipeline.config import EncoderConfig
from pipeline.core.batch.contract import BatchPlan, BatchResult, read_result
from pipeline.core.ledger.frontier import SourcePartition
from pipeline.core.scan.scan import ScanPlan, chunk_records
from pipeline.core.scan.scan_walk import Rest, ScanWalked, scan_walk_plan
from schemas.hlc import Hlc
from tests.support.json_text import LAYOUTS, row

SRC = "src.orders"
WALL = 1_700_000_000_000_000_000
T = Hlc(WALL + 10, 5)  # the statement time

KEY_FORMS = {
    "compact": "[{k}]",
    "spaced": "[ {k} ]",
    "text": '["k\\u00e9{k}"]',
    "fraction": "[{k}.50]",
    "not_array": '{{"k":{k}}}',
}
BAD = {
    "not_json": b"{not json",
    "truncated": b'{"after":{"a":1},"updated":"',
    "bad_utf8": b'{"after":{"a":"\xff"},"updated":"1700000000000000001.0000000000"}',
    "no_time": b'{"after":{"a":1}}',
    "tail_time_only": b'{"after":{"a":[}},"updated":"1700000000000000002.0000000000"}',
    "null_value": b"",
}

change = st.tuples(
    st.just("change"),
    st.sampled_from(sorted(LAYOUTS)),
    st.one_of(st.none(), row),  # None: a delete
    st.one_of(st.none(), row),
    st.integers(0, 4),  # the key
    st.sampled_from(sorted(KEY_FORMS)),
    st.integers(0, 20),  # the time's wall above WALL: the statement time's is 10
    st.sampled_from([0, 5, 7]),  # and its logical: (10, 5) is the statement time
)
marker = st.tuples(st.just("marker"), st.integers(0, 20), st.booleans())  # canonical or not
bad = st.tuples(st.just("bad"), st.sampled_from(sorted(BAD)), st.integers(0, 4))
chunk_items = st.lists(st.one_of(change, change, change, change, marker, bad), max_size=40)


def records(items: list[tuple[Any, ...]]) -> list[tuple[bytes | None, bytes | None, int]]:
    """Kafka records (key, value, offset) of the drawn items."""
    out: list[tuple[bytes | None, bytes | None, int]] = []
    for offset, item in enumerate(items):
        if item[0] == "change":
            _, layout, after, before, k, form, n, logical = item
            t = f"{WALL + n}.{logical:010d}"
            short = f"{WALL + n}" if logical == 0 else f"{WALL + n}.{logical}"
            value = LAYOUTS[layout].format(a=after or "null", b=before or "null", t=t, short=short)
            out.append((KEY_FORMS[form].format(k=k).encode(), value.encode(), offset))
        elif item[0] == "marker":
            _, n, canonical = item
            resolved = f"{WALL + n}.0000000000" if canonical else str(WALL + n)
            out.append((None, f'{{"resolved":"{resolved}"}}'.encode(), offset))
        else:
            _, kind, k = item
            out.append((f"[{k}]".encode(), BAD[kind] or None, offset))
    return out


def chunk(spark: SparkSession, items: list[tuple[bytes | None, bytes | None, int]]) -> DataFrame:
    """One source partition's records as Spark's Kafka reader gives them (one task)."""
    rows = [(key, value, SRC, 0, offset, None) for key, value, offset in items]
    schema = (
        "key binary, value binary, topic string, partition int, offset bigint, "
        "headers array<struct<key: string, value: binary>>"
    )
    return spark.createDataFrame(rows, schema).coalesce(1)


def scan_plan(
    *,
    dlq: str | None = "dlq",
    changes: bool = True,
    end: int | None = None,
    options: tuple[bool, bool, bool] = (True, True, True),
    size: int = 100,
) -> ScanPlan:
    updated, diff, mvcc = options
    encoder = JsonEncoder(EncoderConfig(updated=updated, diff=diff, mvcc_timestamp=mvcc))
    return ScanPlan(
        BatchPlan(
            thresholds={},
            tables={SRC: "orders"},
            formats={SRC: "native"},
            routes={SRC: "out.orders"},
            encoders={SRC: encoder},
            dlq_topic=dlq,
            end_time=None if end is None else Hlc(WALL + end),
        ),
        T,
        changes=changes,
        chunk=SourcePartition(SRC, 0),
        span=(0, size),
    )


def python_scan(frame: DataFrame, plan: ScanPlan) -> tuple[list[Any], BatchResult]:
    observation = Observation("python")
    rows = chunk_records(frame, plan, observation).collect()
    return rows, read_result(observation)


def jvm_then_rest(frame: DataFrame, plan: ScanPlan) -> tuple[list[Any], BatchResult, Rest | None]:
    """As ``scan_walk.write_chunk`` does it: the JVM's walk, then its rest by the Python scan."""
    walk = scan_walk_plan(plan)
    assert walk is not None
    records, walked = ScanWalked.rows(frame, walk, "scan")
    rows = records.collect()
    result, rest = walked.result()
    summaries = list(result.partitions)
    if rest is not None:
        more, more_result = python_scan(rest.of(frame), plan)
        rows += more
        summaries += more_result.partitions
    return rows, BatchResult.of(summaries), rest


def written(rows: list[Any]) -> list[tuple[str, bytes | None, bytes | None]]:
    def raw(b: Any) -> bytes | None:
        return None if b is None else bytes(b)

    return [(r["topic"], raw(r["key"]), raw(r["value"])) for r in rows]


def counts(result: BatchResult) -> list[tuple[Any, ...]]:
    return [
        (s.partition, s.next_offset, s.emitted, s.duplicates, s.bad, s.first_bad, s.bytes)
        for s in result.partitions
    ]


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    items=chunk_items,
    dlq=st.sampled_from(["dlq", None]),
    changes=st.booleans(),
    end=st.one_of(st.none(), st.integers(8, 16)),
    options=st.tuples(st.booleans(), st.booleans(), st.booleans()),
)
@example(  # a key deleted before the time, its key not an array: a bad record all the same
    items=[("change", "as_output", None, None, 0, "not_array", 0, 0)],
    dlq="dlq",
    changes=False,
    end=None,
    options=(False, False, False),
)
def test_the_jvm_scan_writes_what_the_python_scan_writes(  # noqa: PLR0917 - hypothesis' draws
    spark: SparkSession,
    items: list[tuple[Any, ...]],
    dlq: str | None,
    changes: bool,
    end: int | None,
    options: tuple[bool, bool, bool],
) -> None:
    frame = chunk(spark, records(items))
    plan = scan_plan(dlq=dlq, changes=changes, end=end, options=options, size=len(items))
    want, want_result = python_scan(frame, plan)
    got, got_result, _ = jvm_then_rest(frame, plan)
    assert written(got) == written(want)
    assert counts(got_result) == counts(want_result)


def test_the_jvm_writes_the_keys_before_the_first_it_does_not_take(spark: SparkSession) -> None:
    t = [f"{WALL + n}.0000000000" for n in range(20)]
    items = [
        (b"[1]", f'{{"after":{{"n":1,"d":1.50}},"updated":"{t[3]}"}}'.encode(), 0),
        (b"[1]", f'{{"after":{{"n":2,"s":"\\u00e9"}},"updated":"{t[5]}"}}'.encode(), 1),
        (None, f'{{"resolved":"{t[5]}"}}'.encode(), 2),
        (b"[2]", f'{{"after":null,"updated":"{t[4]}"}}'.encode(), 3),  # deleted before T
        (b"[3]", f'{{"after":{{"n":3}},"updated":"{t[12]}"}}'.encode(), 4),  # after T only
        (b"[4]", b"{not json", 5),
        (b"[4]", f'{{"after":{{"n":4}},"updated":"{t[6]}"}}'.encode(), 6),
    ]
    frame = chunk(spark, items)
    plan = scan_plan(options=(True, False, True), size=len(items))
    walk = scan_walk_plan(plan)
    assert walk is not None
    records, walked = ScanWalked.rows(frame, walk, "scan")
    jvm_rows = written(records.collect())
    result, rest = walked.result()

    assert rest is not None
    assert rest.key == b"[4]", "the key with a record the JVM cannot read"
    snapshot = f'"updated":"{T}","mvcc_timestamp":"{t[5]}"}}'
    assert (b"[1]", f'{{"after":{{"n":2,"s":"é"}},{snapshot}'.encode()) in [
        (k, v) for _, k, v in jvm_rows
    ]
    assert b"[4]" not in [k for _, k, _ in jvm_rows]
    (seen,) = result.partitions
    assert seen.emitted == len(jvm_rows)
    got, got_result, _ = jvm_then_rest(frame, plan)
    want, want_result = python_scan(frame, plan)
    assert written(got) == written(want)
    assert got_result.bad == 1
    assert counts(got_result) == counts(want_result)


def test_a_chunk_the_walk_cannot_take_goes_to_python_or_stays_there(spark: SparkSession) -> None:
    plan = scan_plan()
    assert scan_walk_plan(plan) is not None
    key_in_value = JsonEncoder(EncoderConfig(updated=True, key_in_value=True))
    for other in (
        replace(plan, batch=replace(plan.batch, encoders={SRC: key_in_value})),
        replace(plan, batch=replace(plan.batch, formats={SRC: "debezium"})),
        replace(plan, rate=100.0),
        replace(plan, again=True),
        replace(plan, defaults={SRC: {"note": "none"}}),
    ):
        assert scan_walk_plan(other) is None
