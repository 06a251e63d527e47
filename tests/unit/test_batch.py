"""The per-task loop of a micro-batch, fed Arrow batches as Spark would, without Spark."""

import json
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pytest

from encoders.avro import AvroEncoder, Framing
from encoders.json import JsonEncoder
from pipeline.config import EncoderConfig
from pipeline.core.batch.contract import BatchPlan, BatchResult, PartitionSeen
from pipeline.core.batch.loop import process as run_task
from pipeline.core.batch.output import ERROR_HEADER, SOURCE_HEADER
from pipeline.core.ledger.frontier import SourcePartition
from schemas.avro import OutputSchemas
from schemas.hlc import ZERO, Hlc
from tests.unit.test_avro import ORDERS

SRC = "src.orders"
T = [f"17000000000000000{n:02d}.0000000000" for n in range(20)]


def rec(key: Any, value: Any) -> tuple[bytes | None, bytes | None]:
    enc = lambda v: v if isinstance(v, bytes | None) else json.dumps(v).encode()  # noqa: E731
    return enc(key), enc(value)


def row(order_id: int, t: int, before: bool = False) -> tuple[bytes | None, bytes | None]:
    after = {"order_id": order_id, "v": t}
    return rec([order_id], {"after": after, "before": after if before else None, "updated": T[t]})


def marker(t: int) -> tuple[bytes | None, bytes | None]:
    return rec(None, {"resolved": T[t]})


def plan(threshold: int | None = None, *, dlq: bool = False, end: int | None = None) -> BatchPlan:
    thresholds = {} if threshold is None else {(SRC, 0): Hlc.parse(T[threshold])}
    return BatchPlan(
        thresholds=thresholds,
        tables={SRC: "orders"},
        formats={SRC: "native"},
        routes={SRC: "out.orders"},
        encoders={SRC: JsonEncoder(EncoderConfig(updated=True))},
        dlq_topic="dlq" if dlq else None,
        end_time=None if end is None else Hlc.parse(T[end]),
    )


def arrow(records: list[tuple[bytes | None, bytes | None]], start: int = 0, partition: int = 0):
    headers_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    n = len(records)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([k for k, _ in records], pa.binary()),
            pa.array([v for _, v in records], pa.binary()),
            pa.array([SRC] * n, pa.string()),
            pa.array([partition] * n, pa.int32()),
            pa.array(range(start, start + n), pa.int64()),
            pa.array([[{"key": "h", "value": b"x"}]] * n, headers_type),
        ],
        names=["key", "value", "topic", "partition", "offset", "headers"],
    )


def run(p: BatchPlan, *batches: pa.RecordBatch) -> tuple[list[dict[str, Any]], BatchResult]:
    out = pa.Table.from_batches(list(run_task(p, iter(batches)))).to_pylist()
    records = [r for r in out if r["summary"] is None]
    summaries = [PartitionSeen.from_json(r["summary"]) for r in out if r["summary"] is not None]
    return records, BatchResult.of(summaries)


def test_rows_are_encoded_routed_and_summarised() -> None:
    records, result = run(plan(), arrow([row(1, 1), row(2, 2), marker(2), row(1, 3, True)]))
    assert [(r["topic"], r["key"], json.loads(r["value"])) for r in records] == [
        ("out.orders", b"[1]", {"after": {"order_id": 1, "v": 1}, "updated": T[1]}),
        ("out.orders", b"[2]", {"after": {"order_id": 2, "v": 2}, "updated": T[2]}),
        ("out.orders", b"[1]", {"after": {"order_id": 1, "v": 3}, "updated": T[3]}),
    ]
    size = sum(len(r["key"]) + len(r["value"]) for r in records)  # what the metrics count
    assert result.partitions == [
        PartitionSeen(SourcePartition(SRC, 0), 4, Hlc.parse(T[2]), emitted=3, bytes=size)
    ]
    assert result.bytes == size


def test_rows_at_or_below_the_floor_are_dropped_within_and_across_arrow_batches() -> None:
    # frontier at T3; a marker at T6 in the first Arrow batch raises the floor for the second
    first = arrow([row(1, 3), row(1, 4), marker(6), row(2, 5)])
    second = arrow([row(2, 6), row(2, 7), marker(5), row(3, 6)], start=4)
    records, result = run(plan(threshold=3), first, second)
    assert [json.loads(r["value"])["updated"] for r in records] == [T[4], T[7]]
    (seen,) = result.partitions
    assert (seen.next_offset, seen.resolved, seen.emitted, seen.duplicates) == (
        8,
        Hlc.parse(T[6]),  # the older marker (T5) seen later changes nothing
        2,
        4,
    )


def test_a_task_walks_several_partitions_each_with_its_own_floor() -> None:
    # coalesced tasks see several partitions; Arrow batches may hold the end of one and the
    # start of the next
    p0 = arrow([row(1, 3), marker(5), row(1, 4), row(1, 6)], partition=0)
    p1 = arrow([row(2, 4), row(2, 5), marker(4), row(2, 4), row(2, 6)], start=100, partition=1)
    mixed = pa.concat_batches([p0.slice(2), p1.slice(0, 3)])
    records, result = run(plan(), p0.slice(0, 2), mixed, p1.slice(3))
    times = [(r["key"], json.loads(r["value"])["updated"]) for r in records]
    assert times == [(b"[1]", T[3]), (b"[1]", T[6]), (b"[2]", T[4]), (b"[2]", T[5]), (b"[2]", T[6])]
    assert {(s.partition.partition, s.next_offset, s.duplicates) for s in result.partitions} == {
        (0, 4, 1),
        (1, 105, 1),
    }


def test_dead_letters_and_rows_keep_their_topics_in_order() -> None:
    bad = rec([9], b"nope")
    records, result = run(
        plan(dlq=True), arrow([row(1, 1), bad, row(2, 2), row(3, 3), bad, bad, row(4, 4)])
    )
    assert [r["topic"] for r in records] == [
        "out.orders",
        "dlq",
        "out.orders",
        "out.orders",
        "dlq",
        "dlq",
        "out.orders",
    ]
    assert [r["headers"] is None for r in records] == [True, False, True, True, False, False, True]
    assert result.emitted == 4
    assert result.bad == 3


def test_end_time_keeps_later_rows_out() -> None:
    records, _ = run(plan(end=2), arrow([row(1, 1), row(1, 2), row(1, 3)]))
    assert [json.loads(r["value"])["updated"] for r in records] == [T[1], T[2]]


BAD = [
    (rec([1], None), "null value"),
    (rec([1], b"{not json"), "value is not a JSON object"),
    (rec([1], [1, 2]), "value is not a JSON object"),
    (rec(None, {"after": {}}), "null key but no 'resolved' field"),
    (rec(None, {"resolved": "soon"}), "'resolved' is not an HLC timestamp"),
    (rec(b"7", {"after": {}, "updated": T[1]}), "key is not a JSON array"),
    (rec([1], {"after": {}}), "no 'updated' field"),
    (rec([1], {"after": {}, "updated": "1.2.3"}), "'updated' is not an HLC timestamp"),
    (rec([1], {"after": 5, "updated": T[1]}), "'after' is not an object or null"),
    (rec([1], {"after": {}, "before": [], "updated": T[1]}), "'before' is not an object or null"),
    (rec([1], b'{"after": {"x": NaN}, "updated": "1.0"}'), "value is not a JSON object"),
]


@pytest.mark.parametrize(("record", "reason"), BAD, ids=[reason for _, reason in BAD])
def test_bad_records_are_reported_with_their_position(record, reason) -> None:
    records, result = run(plan(), arrow([row(1, 1), record, row(2, 2)], start=40))
    # without a dead-letter topic the partition stops at the bad record (contract §5.7):
    # the row before it goes out, nothing after it, and its checkpoint resumes at it
    assert len(records) == 1
    assert result.partitions[0].next_offset == 41
    assert result.bad == 1
    assert result.first_bad is not None
    ref, why = result.first_bad
    assert (ref.topic, ref.partition, ref.offset, why) == (SRC, 0, 41, reason)


def test_bad_records_go_to_the_dead_letter_topic_with_headers() -> None:
    bad_key, bad_value = rec([1], b"{not json")
    records, result = run(plan(dlq=True), arrow([row(1, 1), (bad_key, bad_value)], start=9))
    dead = [r for r in records if r["topic"] == "dlq"]
    assert dead == [
        {
            "topic": "dlq",
            "key": bad_key,
            "value": bad_value,
            "headers": [
                {"key": "h", "value": b"x"},  # the source's own headers are kept
                {"key": ERROR_HEADER, "value": b"value is not a JSON object"},
                {"key": SOURCE_HEADER, "value": f"{SRC}/0@10".encode()},
            ],
            "summary": None,
            "progress": None,
        }
    ]
    assert result.bad == 1


def test_big_integers_survive() -> None:
    big = 2**70 + 1  # not a power of two: a float round trip would change its digits
    records, _ = run(plan(), arrow([rec([big], {"after": {"n": big}, "updated": T[1]})]))
    assert records[0]["key"] == f"[{big}]".encode()  # bytes: a parse would hide a float
    assert json.loads(records[0]["value"])["after"] == {"n": big}  # the stdlib reads ints exactly


def test_summaries_of_one_partition_merge() -> None:
    sp = SourcePartition(SRC, 0)
    a = PartitionSeen(sp, 10, Hlc(5), emitted=3, bad=1, first_bad=(7, "x"))
    b = PartitionSeen(sp, 20, Hlc(4), emitted=2, duplicates=1, bad=1, first_bad=(12, "y"))
    result = BatchResult.of([b, a])
    assert result.partitions == [PartitionSeen(sp, 20, Hlc(5), 5, 1, 2, (7, "x"))]
    assert (result.emitted, result.duplicates, result.bad) == (5, 1, 2)


def test_a_partition_the_frontier_does_not_know_enters_at_the_high_water_mark() -> None:
    # partition 0 is known (floor T[1]); partition 1 appeared since: the new-partition floor
    known = replace(plan(1), new_partition_floor=Hlc.parse(T[2]))
    records, result = run(
        known,
        arrow([row(1, 2), row(2, 3)], partition=0),
        arrow([row(3, 2), row(4, 3)], partition=1),
    )
    kept = sorted((r["key"], json.loads(r["value"])["updated"]) for r in records)
    assert kept == [(b"[1]", T[2]), (b"[2]", T[3]), (b"[4]", T[3])]
    by_partition = {s.partition.partition: s for s in result.partitions}
    assert by_partition[1].duplicates == 1  # at or below the high-water mark: old news


def test_a_row_of_a_new_shape_stops_its_partition_there_whatever_on_error_says() -> None:
    """Nothing of the new shape is written, nor dead-lettered; the other partitions go on."""
    schemas = OutputSchemas.of(ORDERS, EncoderConfig(format="avro", updated=True))
    avro = AvroEncoder(schemas, Framing(b"", b"", b""), EncoderConfig(format="avro"), "orders")
    p = replace(plan(dlq=True), encoders={SRC: avro})
    wide = {"after": {"region": "eu", "order_id": 3, "vip": True}, "before": None, "updated": T[3]}
    records, result = run(
        p,
        arrow([avro_row(1, 1), avro_row(2, 2), rec(["eu", 3], wide), avro_row(4, 4)]),
        arrow([avro_row(5, 5)], partition=1),
    )
    assert [r["topic"] for r in records] == ["out.orders"] * 3  # 1, 2 and partition 1's 5
    change = result.schema_change
    assert change is not None
    assert (str(change.record), change.time) == (f"{SRC}/0@2", T[3])
    assert "'orders' changed shape: column(s) vip not in its output schema" in change.reason
    first, second = result.partitions
    assert (first.next_offset, first.bad, second.next_offset) == (2, 0, 1)
    assert PartitionSeen.from_json(first.to_json()).schema_change == first.schema_change
    # the rest of the partition, from the row, is left for the driver (evolve, or stop)
    (rest,) = result.rests
    assert (rest.partition, rest.start, rest.stop, rest.new_shape) == (first.partition, 2, 4, T[3])
    assert rest.floor == ZERO  # the partition's floor there (no marker before it)
    assert rest.waits_for is None


def test_a_rest_run_again_clears_its_schema_change_and_one_not_run_keeps_it() -> None:
    sp0, sp1 = SourcePartition(SRC, 0), SourcePartition(SRC, 1)
    first = [
        PartitionSeen(sp0, 2, None, 2, schema_change=[2, "vip", T[3]], deferred=[2, 4, T[2], None]),
        PartitionSeen(sp1, 7, None, 1, schema_change=[7, "vip", T[8]], deferred=[7, 9, T[2], None]),
    ]
    result = BatchResult.of(first)
    assert [r.start for r in result.rests] == [2, 7]
    again = BatchResult.of([PartitionSeen(sp0, 4, Hlc.parse(T[4]), 2)])  # partition 0 ran again
    merged = result.with_rests(again)
    assert merged.rests == []
    by = {s.partition: s for s in merged.partitions}
    assert (by[sp0].next_offset, by[sp0].emitted, by[sp0].schema_change) == (4, 4, None)
    assert by[sp1].schema_change == [7, "vip", T[8]]  # the changefeed stops there
    assert merged.schema_change is not None
    assert str(merged.schema_change.record) == f"{SRC}/1@7"


def avro_row(order_id: int, t: int) -> tuple[bytes | None, bytes | None]:
    after = {"region": "eu", "order_id": order_id}
    return rec(["eu", order_id], {"after": after, "before": None, "updated": T[t]})
