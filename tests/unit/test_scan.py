"""The initial scan's walk over one chunk, fed sorted Arrow batches as Spark would, without Spark.

Records arrive grouped by key, each key's in offset order (here: sorted by key, markers
first). The walk's tests run twice: with ``drop_superseded`` sparing the walk the superseded
versions (as in production), and with every version walked (an adapter that reads no time
without decoding), so the walk's own judgement is tested too; a property test checks that
the two always emit the same rows.
"""

import contextlib
import itertools
import json
import threading
import time
from dataclasses import replace
from typing import Any
from unittest import mock

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from encoders.json import JsonEncoder
from pipeline.config import EncoderConfig
from pipeline.core.batch.contract import BatchResult, PartitionSeen
from pipeline.core.batch.output import ERROR_HEADER
from pipeline.core.coordinator.scan_driver import InitialScan
from pipeline.core.ledger.backfill import Backfill, Chunk, ScanProgress, progress_line
from pipeline.core.ledger.frontier import SourcePartition
from pipeline.core.scan import scan
from pipeline.core.scan.scan import ScanPlan, ScanTask, drop_superseded
from pipeline.core.sources import NativeAdapter
from schemas.hlc import Hlc
from tests.unit.test_batch import SRC, T, marker, plan, rec, row

STATEMENT = 4  # the statement time is T[4]


def scan_plan(*, changes: bool = True, end: int | None = None, dlq: bool = False) -> ScanPlan:
    batch = plan(dlq=dlq, end=end)
    encoder = JsonEncoder(EncoderConfig(updated=True, mvcc_timestamp=True, diff=True))
    batch = replace(batch, encoders={SRC: encoder})
    return ScanPlan(batch, Hlc.parse(T[STATEMENT]), changes=changes, chunk=SourcePartition(SRC, 0))


def sorted_arrow(
    records: list[tuple[int, tuple[bytes | None, bytes | None]]], keep: list[bool] | None = None
) -> pa.RecordBatch:
    """``(offset, record)`` pairs, already in (key, offset) order."""
    n = len(records)
    headers_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    columns = [
        pa.array([r[0] for _, r in records], pa.binary()),
        pa.array([r[1] for _, r in records], pa.binary()),
        pa.array([o for o, _ in records], pa.int64()),
        pa.array([[{"key": "h", "value": b"x"}]] * n, headers_type),
    ]
    names = ["key", "value", "offset", "headers"]  # a chunk's partition is in the plan
    if keep is not None:
        columns.append(pa.array(keep, pa.bool_()))
        names.append("keep")
    return pa.RecordBatch.from_arrays(columns, names=names)


Walk = Any  # (plan, *batches) -> (records, result)


def walk(
    p: ScanPlan, *batches: pa.RecordBatch, pruned: bool = True
) -> tuple[list[dict[str, Any]], BatchResult]:
    """The task's output; ``pruned=False``: nothing dropped before the walk."""
    keep_all = (
        contextlib.nullcontext()
        if pruned
        else mock.patch.object(scan, "drop_superseded", lambda batch, *_: batch)
    )
    with keep_all:
        out = list(ScanTask(p).run(iter(batches)))
    out = pa.Table.from_batches(out, schema=OUT_SCHEMA).to_pylist()
    records = [r for r in out if r["summary"] is None]
    summaries = [PartitionSeen.from_json(r["summary"]) for r in out if r["summary"] is not None]
    return records, BatchResult.of(summaries)


OUT_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        ("summary", pa.string()),
        ("progress", pa.string()),
    ]
)


@pytest.fixture(params=[True, False], ids=["pruned", "every-version"])
def walker(request: pytest.FixtureRequest) -> Walk:
    return lambda p, *batches: walk(p, *batches, pruned=request.param)


def emitted(records: list[dict[str, Any]]) -> list[tuple[bytes, Any, str, str]]:
    """(key, after, updated, mvcc_timestamp) of each output record, in order."""
    values = [json.loads(r["value"]) for r in records]
    return [
        (r["key"], v["after"], v["updated"], v["mvcc_timestamp"])
        for r, v in zip(records, values, strict=True)
    ]


def v(order_id: int, t: int) -> dict[str, int]:
    return {"order_id": order_id, "v": t}


def test_latest_version_at_the_statement_time_then_later_changes_per_key(walker: Walk) -> None:
    deleted = rec([2], {"after": None, "before": v(2, 2), "updated": T[3]})
    records, result = walker(
        scan_plan(),
        sorted_arrow(
            [
                (9, marker(3)),
                (0, row(1, 1)),
                (3, row(1, 3)),
                (7, row(1, 5)),  # after the statement time: a change
                (8, row(1, 6)),
                (1, row(2, 2)),
                (4, deleted),  # deleted before the statement time: not in the snapshot
                (2, row(3, 2)),
                (6, row(3, 2)),  # an upstream duplicate
                (10, row(4, 7)),  # inserted after the statement time only
            ]
        ),
    )
    assert emitted(records) == [
        (b"[1]", v(1, 3), T[STATEMENT], T[3]),
        (b"[1]", v(1, 5), T[5], T[5]),
        (b"[1]", v(1, 6), T[6], T[6]),
        (b"[3]", v(3, 2), T[STATEMENT], T[2]),
        (b"[4]", v(4, 7), T[7], T[7]),
    ]
    assert all(r["topic"] == "out.orders" for r in records)
    (seen,) = result.partitions
    assert (seen.emitted, seen.bad) == (5, 0)


def test_snapshot_rows_carry_no_before_and_changes_keep_theirs(walker: Walk) -> None:
    records, _ = walker(scan_plan(), sorted_arrow([(0, row(1, 2, True)), (1, row(1, 5, True))]))
    values = [json.loads(r["value"]) for r in records]
    assert values[0]["before"] is None
    assert values[1]["before"] == v(1, 5)


def test_the_highest_time_wins_even_when_a_stale_duplicate_comes_later(walker: Walk) -> None:
    records, _ = walker(scan_plan(), sorted_arrow([(0, row(1, 1)), (1, row(1, 3)), (2, row(1, 1))]))
    assert emitted(records) == [(b"[1]", v(1, 3), T[STATEMENT], T[3])]


def test_a_key_spanning_two_arrow_batches_is_emitted_once(walker: Walk) -> None:
    first = sorted_arrow([(0, row(1, 1)), (1, row(1, 2))])
    second = sorted_arrow([(2, row(1, 3)), (3, row(2, 1))])
    records, _ = walker(scan_plan(), first, second)
    assert emitted(records) == [
        (b"[1]", v(1, 3), T[STATEMENT], T[3]),
        (b"[2]", v(2, 1), T[STATEMENT], T[1]),
    ]


def test_only_emits_the_snapshot_and_end_time_bounds_the_changes(walker: Walk) -> None:
    history = [(0, row(1, 2)), (1, row(1, 5)), (2, row(1, 8))]
    only, _ = walker(scan_plan(changes=False), sorted_arrow(history))
    assert [u for _, _, u, _ in emitted(only)] == [T[STATEMENT]]
    bounded, _ = walker(scan_plan(end=6), sorted_arrow(history))
    assert [u for _, _, u, _ in emitted(bounded)] == [T[STATEMENT], T[5]]


def test_a_table_emitted_again_leaves_out_keys_written_later_and_fills_defaults(
    walker: Walk,
) -> None:
    """``backfill``: a key written later is left out; a column a record predates, defaulted.

    A key whose later version the stream wrote already (a delete here) is not resurrected;
    a column a record predates takes the source's default, and one it has keeps its value.
    """
    again = replace(scan_plan(changes=False), again=True, defaults={SRC: {"tier": 5, "v": 0}})
    deleted = rec([2], {"after": None, "before": v(2, 2), "updated": T[6]})
    records, _ = walker(
        again,
        sorted_arrow([(0, row(1, 1)), (1, row(1, 3)), (2, row(2, 2)), (3, deleted)]),
    )
    assert emitted(records) == [(b"[1]", {**v(1, 3), "tier": 5}, T[STATEMENT], T[3])]


def test_the_where_clause_judges_the_latest_version_not_an_older_one(walker: Walk) -> None:
    # version 1 matched the CDC query's where clause, version 3 (the latest) does not
    records, _ = walker(
        scan_plan(), sorted_arrow([(0, row(1, 1)), (1, row(1, 3))], keep=[True, False])
    )
    assert records == []


def test_an_undecodable_record_goes_to_the_dead_letter_topic_with_its_position(
    walker: Walk,
) -> None:
    records, result = walker(
        scan_plan(dlq=True), sorted_arrow([(0, rec([1], b"{oops")), (1, row(1, 2))])
    )
    assert [r["topic"] for r in records] == ["dlq", "out.orders"]
    assert records[0]["value"] == b"{oops"
    headers = {h["key"]: h["value"] for h in records[0]["headers"]}
    assert headers[ERROR_HEADER] == b"value is not a JSON object"
    assert result.first_bad is not None
    assert result.first_bad[0].offset == 0


def test_rows_before_a_dead_letter_record_keep_their_topic(walker: Walk) -> None:
    records, _ = walker(
        scan_plan(dlq=True),
        sorted_arrow([(0, row(1, 2)), (1, row(1, 3)), (2, rec([2], b"{oops")), (3, row(3, 1))]),
    )
    assert [(r["topic"], r["value"] == b"{oops") for r in records] == [
        ("out.orders", False),
        ("dlq", True),
        ("out.orders", False),
    ]


def test_an_undecodable_latest_version_decides_its_key(walker: Walk) -> None:
    broken = rec([1], {"after": 7, "updated": T[3]})  # its time is readable, its row is not
    records, result = walker(scan_plan(), sorted_arrow([(0, row(1, 1)), (1, broken)]))
    assert records == [], "no older version stands in for the latest"
    assert result.first_bad is not None
    assert (result.first_bad[0].offset, result.first_bad[1]) == (
        1,
        "'after' is not an object or null",
    )


def test_drop_superseded_keeps_each_keys_latest_version_and_what_it_cannot_judge() -> None:
    batch = sorted_arrow(
        [
            (0, row(1, 1)),  # superseded
            (3, row(1, 3)),  # key 1's latest at or below T4
            (5, row(1, 2)),  # a stale duplicate: superseded
            (7, row(1, 5)),  # after T
            (9, marker(3)),  # markers come anywhere between keys (grouped by hash)
            (1, row(2, 2)),  # key 2's latest
            (2, rec([2], {"updated": T[3], "after": {}})),  # time not last: unread, kept
            (4, row(3, 4)),  # exactly T, first of two
            (6, row(3, 4)),  # its duplicate: superseded
        ]
    )
    kept = drop_superseded(batch, Hlc.parse(T[STATEMENT]), NativeAdapter().times)
    assert kept.column("offset").to_pylist() == [3, 7, 9, 1, 2, 4]
    assert kept.schema == batch.schema


@pytest.mark.parametrize(
    ("value", "time"),
    [
        (b'{"after":{},"updated":"1700000000000000005.0000000003"}', (1700000000000000005, 3)),
        (b'{"after": {}, "updated" : "17.5" }\n', (17, 5)),  # spaces, short logical
        (b'{"after": {}, "updated": "0042"}', (42, 0)),  # as int("0042") reads it
        (b'{"updated": "1", "after": {}, "updated": "2"}', (2, 0)),  # the last name counts
        (b'{"after": {"updated": "5"}}', None),  # a column named updated
        (b'{"after": {}, "updated": "5", "before": null}', None),  # not the last member
        (b'{"after": {"x": "\\"updated\\": \\"5\\"}"}}', None),  # inside a string
        (b'{"after": {}, "updated": "9300000000000000000.0000000000"}', None),  # over int64
        (b'{"after": {}, "updated": "5."}', None),
        (b'{"after": {}, "updated": 5}', None),
        (b'{"after": {}, "updated": "5"}' + b" " * 60, None),  # beyond the bytes it reads
        (None, None),
    ],
)
def test_native_times_reads_only_a_trailing_top_level_updated(
    value: bytes | None, time: tuple[int, int] | None
) -> None:
    wall, logical = NativeAdapter().times(pa.array([value], pa.binary()))
    assert (None if not wall[0].is_valid else (wall[0].as_py(), logical[0].as_py())) == time
    if time is not None:  # what the adapter decodes agrees
        assert NativeAdapter().change([1], value).ts == Hlc(*time)


VALUE_FORMS = {
    "compact": lambda after, t: json.dumps(
        {"after": after, "updated": str(t)}, separators=(",", ":")
    ).encode(),
    "spaced": lambda after, t: json.dumps({"after": after, "updated": str(t)}).encode(),
    "time-first": lambda after, t: json.dumps({"updated": str(t), "after": after}).encode(),
    "short-logical": lambda after, t: json.dumps(
        {"after": after, "updated": f"{t.wall}.{t.logical}"}
    ).encode(),
    "broken-after": lambda after, t: json.dumps({"after": 7, "updated": str(t)}).encode(),
    "not-json": lambda after, t: f'{{oops "updated":"{t}"}}'.encode(),
    "no-time": lambda after, t: json.dumps({"after": after}).encode(),
}
AT = Hlc(Hlc.parse(T[4]).wall, 1)  # the property's statement time: logical parts matter


@st.composite
def histories(draw: st.DrawFn) -> list[tuple[bytes | None, bytes | None]]:
    """A partition's records in offset order: versions of a few keys in any form, markers."""
    records: list[tuple[bytes | None, bytes | None]] = []
    for _ in range(draw(st.integers(1, 40))):
        t = draw(st.integers(1, 9))
        if draw(st.integers(0, 9)) == 0:
            records.append(marker(t))
            continue
        key = draw(st.integers(1, 4))
        form = draw(st.sampled_from(sorted(VALUE_FORMS)))
        ts = Hlc(Hlc.parse(T[t]).wall, draw(st.integers(0, 2)))
        after = None if draw(st.integers(0, 5)) == 0 else v(key, t)
        records.append((json.dumps([key]).encode(), VALUE_FORMS[form](after, ts)))
    return records


@settings(max_examples=300, deadline=None)
@given(
    history=histories(),
    groups=st.permutations([None, b"[1]", b"[2]", b"[3]", b"[4]"]),
    cuts=st.lists(st.integers(1, 39), max_size=4),
    only=st.booleans(),
)
def test_dropping_superseded_versions_never_changes_the_rows(
    history: list[tuple[bytes | None, bytes | None]],
    groups: list[bytes | None],
    cuts: list[int],
    only: bool,
) -> None:
    # Spark groups keys in the order of their hashes: markers (null keys) can be anywhere
    ordered = sorted(enumerate(history), key=lambda r: (groups.index(r[1][0]), r[0]))
    batch = sorted_arrow(ordered)
    bounds = sorted({0, batch.num_rows, *(c for c in cuts if c < batch.num_rows)})
    batches = [batch.slice(a, b - a) for a, b in itertools.pairwise(bounds)]
    p = replace(scan_plan(changes=not only, dlq=True), statement_time=AT)
    pruned, _ = walk(p, *batches)
    every, _ = walk(p, *batches, pruned=False)
    assert rows(pruned) == rows(every)
    assert reported(pruned) <= reported(every), "what is dropped may go unreported, no more"


def rows(records: list[dict[str, Any]]) -> list[tuple[str, bytes, bytes]]:
    return [(r["topic"], r["key"], r["value"]) for r in records if r["topic"] != "dlq"]


def reported(records: list[dict[str, Any]]) -> set[bytes]:
    return {r["value"] for r in records if r["topic"] == "dlq"}


def test_the_rate_limit_paces_the_rows_handed_to_the_writer() -> None:
    now = [0.0]
    slept: list[float] = []

    class Paced(ScanTask):
        clock = staticmethod(lambda: now[0])

        @staticmethod
        def sleep(seconds: float) -> None:
            slept.append(seconds)
            now[0] += seconds

    history = [(i, row(i, 1)) for i in range(1000)]
    p = replace(scan_plan(), rate=200.0, step=20)
    batches = list(Paced(p).run(iter([sorted_arrow(history)])))
    rows = sum(b.num_rows for b in batches) - 1  # the summary
    assert rows == 1000
    assert max(b.num_rows for b in batches) < 2 * 20  # at most a step and a key pending
    assert sum(slept) == pytest.approx(1000 / 200.0, rel=0.03)


def test_backfill_record_round_trip_merges_finished_partitions() -> None:
    parts = [SourcePartition("a", p) for p in range(4)] + [SourcePartition("b", 0)]
    backfill = Backfill.of(
        dict.fromkeys(parts, 0), {sp: 10 * (i + 1) for i, sp in enumerate(parts)}
    )
    for chunk in backfill.pending()[:3]:
        backfill = backfill.finished(chunk, rows=5)
    record = backfill.to_record()
    assert record == {
        "partitions": {
            "a": {"from": [0, 0, 0, 0], "to": [10, 20, 30, 40], "done": "2-3"},
            "b": {"from": [0], "to": [50], "done": "0"},
        },
        "rows": 15,
        "time": None,
    }
    again = Backfill.from_record(json.loads(json.dumps(record)))
    assert again == backfill
    assert [c.partition for c in again.pending()] == [parts[1], parts[0]]
    added = replace(backfill, time=Hlc(7, 1))  # the scan of tables an update added
    assert added.to_record()["time"] == "7.0000000001"
    assert Backfill.from_record(json.loads(json.dumps(added.to_record()))) == added


def test_progress_counts_records_rows_and_an_eta() -> None:
    a, b = SourcePartition("a", 0), SourcePartition("a", 1)
    backfill = Backfill({a: Chunk(a, 0, 300), b: Chunk(b, 0, 100)})
    progress = ScanProgress.of(backfill)
    progress.started = 0.0
    progress.add(backfill.chunks[a], rows=120)
    numbers = progress.to_json(now=10.0)
    assert numbers == {
        "chunks_done": 1,
        "chunks_total": 2,
        "records_done": 300,
        "records_total": 400,
        "rows": 120,
        "rows_per_second": 12.0,
        "eta_seconds": pytest.approx(3.3, abs=0.05),
    }
    assert progress_line(numbers, width=8).startswith("[######--]  75% 1/2 chunks, 300/400")


class FakeContext:
    def __init__(self) -> None:
        self.cancelled: list[str] = []

    def setJobGroup(self, group: str, description: str, interruptOnCancel: bool) -> None:
        pass

    def cancelJobGroup(self, group: str) -> None:
        self.cancelled.append(group)


class FakeSpark:
    def __init__(self) -> None:
        self.sparkContext = FakeContext()


def chunks(n: int) -> list[Chunk]:
    return [Chunk(SourcePartition("a", p), 0, 100 - p) for p in range(n)]


def test_initial_scan_runs_chunks_in_parallel_and_reports_each_once() -> None:
    running, peak, lock = [0], [0], threading.Lock()

    def job(chunk: Chunk, p: ScanPlan) -> BatchResult:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        seen = PartitionSeen(chunk.partition, chunk.end, None, emitted=chunk.records)
        return BatchResult.of([seen])

    done: list[tuple[Chunk, int]] = []
    scan = InitialScan(
        FakeSpark(),  # type: ignore[arg-type]
        job,
        scan_plan(),
        parallelism=2,
        rate_limit=1000.0,
        on_chunk=lambda c, r: done.append((c, r.emitted)),
    )
    assert scan.run(chunks(5), lambda: False)
    assert sorted(c.partition.partition for c, _ in done) == [0, 1, 2, 3, 4]
    assert all(rows == c.records for c, rows in done)
    assert peak[0] == 2


def test_a_stop_cancels_the_chunks_in_flight_without_counting_them() -> None:
    release = threading.Event()
    spark = FakeSpark()

    def job(chunk: Chunk, p: ScanPlan) -> BatchResult:
        if chunk.partition.partition == 0:
            return BatchResult.of([PartitionSeen(chunk.partition, 0, None, emitted=1)])
        release.wait(5)
        raise RuntimeError("job cancelled")  # what Spark raises in a cancelled job's thread

    done: list[Chunk] = []
    stops = iter([False, True])
    scan = InitialScan(
        spark,  # type: ignore[arg-type]
        job,
        scan_plan(),
        parallelism=2,
        rate_limit=None,
        on_chunk=lambda c, r: done.append(c),
    )
    threading.Timer(1.5, release.set).start()
    assert not scan.run(chunks(4), lambda: next(stops, True))
    assert [c.partition.partition for c in done] == [0]
    assert spark.sparkContext.cancelled == [scan.group]


def test_a_failed_chunk_stops_the_scan_with_its_error() -> None:
    def job(chunk: Chunk, p: ScanPlan) -> BatchResult:
        raise ValueError(f"broken {chunk.partition}")

    scan = InitialScan(
        FakeSpark(),  # type: ignore[arg-type]
        job,
        scan_plan(),
        parallelism=2,
        rate_limit=None,
        on_chunk=lambda c, r: None,
    )
    with pytest.raises(ValueError, match="broken a/"):
        scan.run(chunks(3), lambda: False)
