"""The golden file of what crosses to our Java: plans, delivery options, progress rows and records.

``tests/golden/boundary.json`` holds examples of each model of ``pipeline/core/batch/boundary.py``
(and of the progress topic's :class:`~pipeline.core.ledger.ProgressRecord`): the text the Python
side writes (``text``, or ``options``), and beside it the fields it carries (``fields``, in the
golden's own words, not the wire's), which the Java side must read back from the text. The tests
here hold the Python side to the file; the JUnit tests of ``pipeline/jvm/walk``
(``BoundaryTest``) read every example with the Java side's own readers (``Walk``'s and
``Scan``'s plans, ``Delivery.parse``, ``ProgressRow.parse``, ``Progress.parse`` and
``Progress.value``) and compare what they read with ``fields``. A key renamed, dropped or
retyped on either side fails one of the two.

``python -m tests.unit.test_boundary_golden`` writes the file again from the Python side (then
run the JUnit tests: ``highwater dev jvm-test``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from encoders.json import JsonEncoder
from pipeline.config import EncoderConfig
from pipeline.core.batch import boundary
from pipeline.core.batch.boundary import (
    CEILING,
    DeliveryOptions,
    PieceAbandon,
    PieceBegin,
    PieceEnd,
    ProgressRow,
    ScanWalkPlan,
    WalkPlan,
)
from pipeline.core.batch.contract import BatchPlan
from pipeline.core.batch.walk import planned_walk, walk_plan
from pipeline.core.ledger import ProgressRecord, SourcePartition
from pipeline.core.progress.claim import Claim
from pipeline.core.scan.scan import ScanPlan
from pipeline.core.scan.scan_walk import planned_scan_walk, scan_walk_plan
from schemas.hlc import Hlc

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "boundary.json"
W = 1700000000000000000
VERBATIM = JsonEncoder(EncoderConfig(diff=True, updated=True))


def batch_plans() -> dict[str, BatchPlan]:
    """Stream batches the walk takes.

    A native source (a floor beyond a Java long); Debezium (positions, binlog commits,
    counted) beside Canal-JSON.
    """
    return {
        "native": BatchPlan(
            {("src.orders", 0): Hlc(W, 5), ("src.orders", 1): Hlc(2**63 + 7, 3)},
            {"src.orders": "orders"},
            {"src.orders": "native"},
            {"src.orders": "out.orders"},
            {"src.orders": VERBATIM},
            None,
            max_record_bytes=1_000_000,
            new_partition_floor=Hlc(W, 0),
        ),
        "debezium_and_canal": BatchPlan(
            {("dbz.orders", 0): Hlc(W, 1)},
            {"dbz.orders": "orders", "tidb.items": "items"},
            {"dbz.orders": "debezium", "tidb.items": "canal-json"},
            {"dbz.orders": "out.orders", "tidb.items": "out.items"},
            {"dbz.orders": VERBATIM, "tidb.items": VERBATIM},
            "dlq",
            positions={("dbz.orders", 0): (24023128, 24023250)},
            commits={
                "dbz.orders": {"file=binlog.000003,pos=100": Hlc(W + 9), "late": Hlc(2**63, 1)}
            },
            counted=frozenset({"dbz.orders"}),
        ),
    }


def scan_plans() -> dict[str, ScanPlan]:
    """Initial scans' chunks the JVM walks: with the changes after the time, and ``only``."""
    every = JsonEncoder(EncoderConfig(diff=True, updated=True, mvcc_timestamp=True))
    source = ({"src.orders": "orders"}, {"src.orders": "native"}, {"src.orders": "out.orders"})
    return {
        "changes_after": ScanPlan(
            BatchPlan({}, *source, {"src.orders": every}, None),
            Hlc(W, 2),
            chunk=SourcePartition("src.orders", 3),
            span=(100, 250),
        ),
        "only_with_end_time": ScanPlan(
            BatchPlan({}, *source, {"src.orders": VERBATIM}, None, end_time=Hlc(W + 50)),
            Hlc(W, 2),
            changes=False,
            chunk=SourcePartition("src.orders", 0),
            span=(0, 7),
        ),
    }


CLAIM = Claim(3, {}, "_highwater_progress_orders", "highwater-orders")


def deliveries() -> dict[str, DeliveryOptions]:
    """A run's exactly once, for the stream's rows and for an initial scan's chunks."""
    return {"rows": CLAIM.delivery(), "scan": CLAIM.delivery("scan", Hlc(W, 2))}


def progress_rows() -> dict[str, ProgressRow]:
    """What the Python loop and the Python scan write around a source partition's stretch."""
    return {
        "begin": PieceBegin("src.orders", 1, 100),
        "stream_end": PieceEnd(103, Hlc(W, 1), (5, 7)),
        "stream_end_no_position": PieceEnd(7, Hlc(0)),
        "scan_end": PieceEnd(250),
        "abandon": PieceAbandon(),
    }


def progress_records() -> dict[str, ProgressRecord]:
    """The progress topic's records: a partition's, a scan chunk's, a claim's of nothing yet."""
    return {
        "stream": ProgressRecord(
            topic="src", partition=1, next_offset=103, resolved=Hlc(5, 1), generation=2
        ),
        "debezium": ProgressRecord(
            topic="dbz", partition=0, next_offset=9, position=(24023128, 24023250), generation=4
        ),
        "scan": ProgressRecord(
            topic="src", partition=3, next_offset=250, generation=2, time=Hlc(W, 2)
        ),
        "claim": ProgressRecord(topic="src", partition=2, next_offset=None, generation=5),
    }


def _time(ts: Hlc | None) -> list[int] | None:
    """A time as the Java side holds it: wall and logical, two longs."""
    return None if ts is None else [ts.wall, ts.logical]


def _walk_fields(walk: WalkPlan) -> dict[str, Any]:
    """What ``Walk`` must hold once it read ``walk`` (times at most the ceiling)."""
    return {
        "routes": {
            source: {
                "topic": route.topic,
                "debezium": route.format == "debezium",
                "canal": route.format == "canal-json",
                "counted": route.counted,
                "commits": {
                    tx: _time(min(end, CEILING)) for tx, end in walk.commits.get(source, {}).items()
                },
            }
            for source, route in walk.routes.items()
        },
        "thresholds": {
            f"{t}/{p}": _time(min(ts, CEILING)) for (t, p), ts in walk.thresholds.items()
        },
        "new_partition_floor": _time(min(walk.new_partition_floor, CEILING)),
        "positions": {f"{t}/{p}": list(at) for (t, p), at in walk.positions.items()},
        "room": walk.room,
    }


def _scan_fields(scan: ScanWalkPlan) -> dict[str, Any]:
    """What ``Scan`` must hold once it read ``scan``."""
    return {
        "source": scan.source,
        "partition": scan.partition,
        "first": scan.span[0],
        "end": scan.span[1],
        "topic": scan.topic,
        "members": list(scan.members),
        "statement_time": _time(scan.statement_time),
        "end_time": _time(scan.end_time),
        "changes": scan.changes,
        "room": scan.room,
    }


def _delivery_fields(delivery: DeliveryOptions) -> dict[str, Any]:
    """What ``Delivery.parse`` must read from ``delivery``'s options."""
    return {
        "ids": delivery.transactional_id_prefix,
        "progress_topic": delivery.progress_topic,
        "generation": delivery.generation,
        "kind": delivery.kind,
        "scan_time": None if delivery.scan_time is None else str(delivery.scan_time),
    }


def _row_fields(row: ProgressRow) -> dict[str, Any]:
    """What ``ProgressRow.parse`` must read from ``row``'s text (-1, null: not there)."""
    begin = row if isinstance(row, PieceBegin) else None
    end = row if isinstance(row, PieceEnd) else None
    return {
        "begins": begin is not None,
        "abandon": isinstance(row, PieceAbandon),
        "topic": None if begin is None else begin.topic,
        "partition": -1 if begin is None else begin.partition,
        "first": -1 if begin is None else begin.first,
        "next_offset": -1 if end is None else end.next_offset,
        "resolved": None if end is None or end.resolved is None else str(end.resolved),
        "position": None if end is None or end.position is None else list(end.position),
    }


def _record_fields(record: ProgressRecord) -> dict[str, Any]:
    """What ``Progress.parse`` must read; and what ``Progress.value`` writes the record from."""
    return {
        "topic": record.topic,
        "partition": record.partition,
        "next_offset": -1 if record.next_offset is None else record.next_offset,
        "resolved": None if record.resolved is None else str(record.resolved),
        "position": None if record.position is None else list(record.position),
        "generation": record.generation,
        "time": None if record.time is None else str(record.time),
    }


def python_golden() -> dict[str, Any]:
    """The golden file's content, from the Python side's models."""
    walks = {name: planned_walk(plan) for name, plan in batch_plans().items()}
    scans = {name: planned_scan_walk(plan) for name, plan in scan_plans().items()}
    return {
        "about": "Written by tests/unit/test_boundary_golden.py from the models of "
        "pipeline/core/batch/boundary.py; read by the JUnit tests of pipeline/jvm/walk "
        "(BoundaryTest) with the Java side's own readers.",
        "walk_plans": [
            {"name": name, "text": walk.to_json(), "fields": _walk_fields(walk)}
            for name, walk in walks.items()
            if walk is not None
        ],
        "scan_plans": [
            {"name": name, "text": scan.to_json(), "fields": _scan_fields(scan)}
            for name, scan in scans.items()
            if scan is not None
        ],
        "delivery": {
            "keys": {
                "prefix": boundary.OPTION_PREFIX,
                "mode": boundary.DELIVERY,
                "ids": boundary.TRANSACTIONAL_ID_PREFIX,
                "progress_topic": boundary.PROGRESS_TOPIC,
                "generation": boundary.GENERATION,
                "kind": boundary.PIECE_KIND,
                "scan_time": boundary.SCAN_TIME,
            },
            "examples": [
                {"name": name, "options": d.options(), "fields": _delivery_fields(d)}
                for name, d in deliveries().items()
            ],
        },
        "extra_headers": {
            "interceptor": boundary.EXTRA_HEADERS_INTERCEPTOR,
            "config": boundary.EXTRA_HEADERS,
            "settings": boundary.extra_headers_settings(HEADERS, "org.example.Audit"),
            "headers": [[name, value] for name, value in HEADERS.items()],
        },
        "progress_rows": [
            {"name": name, "text": row.to_json(), "fields": _row_fields(row)}
            for name, row in progress_rows().items()
        ],
        "progress_records": [
            {"name": name, "text": record.encode().decode(), "fields": _record_fields(record)}
            for name, record in progress_records().items()
        ],
    }


# fixed headers as a user writes them: any characters, in order
HEADERS = {"zone": "eu-west-1", "app": "örders ✓", "empty": ""}


def golden() -> dict[str, Any]:
    return dict(json.loads(GOLDEN.read_text(encoding="utf-8")))


def test_the_golden_file_is_what_the_models_write() -> None:
    assert python_golden() == golden()


def test_every_example_is_in_the_golden_file() -> None:
    """A plan the builders would not hand to the JVM would drop out of the file unseen."""
    found = golden()
    assert len(found["walk_plans"]) == len(batch_plans())
    assert len(found["scan_plans"]) == len(scan_plans())


def test_the_builders_write_the_models_texts() -> None:
    for name, plan in batch_plans().items():
        walk = planned_walk(plan)
        assert walk is not None, name
        assert walk_plan(plan) == walk.to_json()
    for name, chunk in scan_plans().items():
        scan = planned_scan_walk(chunk)
        assert scan is not None, name
        assert scan_walk_plan(chunk) == scan.to_json()
    for delivery in deliveries().values():
        assert CLAIM.options(delivery.kind, delivery.scan_time) == delivery.options()


def test_the_delivery_keys_are_declared_once_under_the_prefix() -> None:
    keys = golden()["delivery"]["keys"]
    assert all(key.startswith(keys["prefix"]) for name, key in keys.items() if name != "prefix")
    assert len(set(keys.values())) == len(keys)


if __name__ == "__main__":
    GOLDEN.parent.mkdir(exist_ok=True)
    text = json.dumps(python_golden(), indent=1, ensure_ascii=False)
    GOLDEN.write_text(text + "\n", encoding="utf-8")
    print(f"wrote {GOLDEN}", file=sys.stderr)
