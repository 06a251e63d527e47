"""kill -9 at the worst moments, restart, and check every guarantee of contract §5.

``make soak``'s (marked ``soak``): in ``make test`` the same kills hold the same guarantees in
faster tests: at least once's replay from the checkpoint after ``after_write`` and
``during_write`` in ``test_lagging_partition.py`` (with a tighter bound: one batch) and
``test_resume.py``; a marker only after its checkpoint, and the validator's order, resolved
and completeness checks after ``after_marker`` and ``during_write`` in ``test_chaos.py``;
kills inside a write and before a checkpoint, exactly once, in ``test_exactly_once.py``.
"""

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import load_config
from pipeline.dev.generator import GeneratorSpec, write
from tests.support.changefeed import checkpoint_records, run_to_end
from tests.support.kafka import Message, consume_all
from tests.support.process import run_killed_at, write_config
from tests.support.validator import hlc_order

pytestmark = pytest.mark.soak
CRASHES = ["during_write:3", "after_write:2", "after_marker:2"]


def base_config(bootstrap: str, changefeed_id: str, source: str) -> dict[str, Any]:
    return {
        "changefeed_id": changefeed_id,
        "kafka": {"bootstrap_servers": bootstrap},
        "sources": [{"topic": source, "table": "orders"}],
        "cursor": "0.0000000000",  # the whole history: the stream is under test
        "sink": {"topic_prefix": f"{changefeed_id}.", "partitions": 3},
        "encoder": {"updated": True},
        # Batches come every ~1.5s; markers and checkpoints at most every 3s, so some
        # batches are written but not yet checkpointed when the job dies.
        "resolved": {"interval": "3s"},
        "checkpoint": {"min_checkpoint_frequency": "3s"},
        "spark": {"trigger": {"processing_time": "200ms"}, "max_offsets_per_trigger": 300},
        # what this test measures is at least once's replay bound (contract §5.4): what comes
        # again starts at the checkpoint; exactly once's kills are test_exactly_once.py's
        "delivery": "at_least_once",
    }


def latest_checkpoint(bootstrap: str, changefeed_id: str) -> dict[str, Any] | None:
    records = checkpoint_records(bootstrap, changefeed_id)
    return records[-1] if records else None


def row_id(m: Message) -> tuple[bytes, str]:
    return m.key, json.loads(m.value)["updated"]


def test_kill_9_at_three_points_then_resume_keeps_every_guarantee(
    kafka_bootstrap: str, unique_name, tmp_path: Path, spark
) -> None:
    source, changefeed_id = unique_name("src"), unique_name("cf")
    write(
        GeneratorSpec(topic=source, rows=4000, partitions=4, resolved_every=200, seed=11),
        {"bootstrap.servers": kafka_bootstrap},
    )
    source_offset = {
        (m.key, json.loads(m.value)["updated"]): (m.partition, m.offset)
        for m in consume_all(kafka_bootstrap, source)
        if m.key is not None
    }
    out_topic = f"{changefeed_id}.orders"
    raw = base_config(kafka_bootstrap, changefeed_id, source)
    crashing = write_config(tmp_path / "crash.yaml", raw)
    log = tmp_path / "runs.log"

    segments: list[tuple[dict[str, Any] | None, dict[int, int]]] = []  # (checkpoint, out ends)
    rows_before = 0
    for crash in CRASHES:
        checkpoint = latest_checkpoint(kafka_bootstrap, changefeed_id)
        run_killed_at(crashing, log, crash)  # the kill landed at the crash point,
        output = consume_all(kafka_bootstrap, out_topic)
        rows_now = sum(m.key is not None for m in output)
        assert rows_now > rows_before, f"{crash}: the killed run wrote no row"  # after rows
        rows_before = rows_now
        if crash.startswith("after_marker"):  # a marker goes out after its checkpoint
            assert latest_checkpoint(kafka_bootstrap, changefeed_id) != checkpoint, crash
        ends = defaultdict(int)
        for m in output:
            ends[m.partition] = m.offset + 1
        segments.append((checkpoint, dict(ends)))

    final_checkpoint = latest_checkpoint(kafka_bootstrap, changefeed_id)
    assert final_checkpoint is not None, "no checkpoint survived three crashes"
    raw["spark"]["trigger"] = {"available_now": True}
    run_to_end(load_config(write_config(tmp_path / "drain.yaml", raw)), spark)  # in-process

    output = consume_all(kafka_bootstrap, out_topic)
    rows = [m for m in output if m.key is not None]
    assert {row_id(m) for m in rows} == set(source_offset), "a source change was lost"
    assert_first_emissions_in_key_order(rows)
    assert_markers_never_precede_unseen_rows(output)
    checkpoints = [cp for cp, _ in segments[1:]] + [final_checkpoint]
    assert_replays_start_at_the_checkpoint(rows, segments, checkpoints, source, source_offset)
    duplicates = len(rows) - len(set(map(row_id, rows)))
    assert duplicates < len(rows) // 2


def assert_first_emissions_in_key_order(rows: list[Message]) -> None:
    first_seen: set[tuple[bytes, str]] = set()
    by_key: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    for m in rows:
        if row_id(m) not in first_seen:
            first_seen.add(row_id(m))
            by_key[m.key].append(hlc_order(row_id(m)[1]))
    for key, versions in by_key.items():
        assert versions == sorted(versions), f"{key!r} first emissions out of order"


def assert_markers_never_precede_unseen_rows(output: list[Message]) -> None:
    """After a marker R on a partition, no row <= R appears that was not emitted before it."""
    for partition in {m.partition for m in output}:
        seen: set[tuple[bytes, str]] = set()
        resolved = None
        for m in (x for x in output if x.partition == partition):
            if m.key is None:
                ts = hlc_order(json.loads(m.value)["resolved"])
                assert resolved is None or ts >= resolved, "marker went backwards"
                resolved = ts
                continue
            rid = row_id(m)
            if resolved is not None and hlc_order(rid[1]) <= resolved:
                assert rid in seen, f"unseen row {rid} at or below marker {resolved}"
            seen.add(rid)


def assert_replays_start_at_the_checkpoint(
    rows: list[Message],
    segments: list[tuple[dict[str, Any] | None, dict[int, int]]],
    checkpoints: list[dict[str, Any] | None],
    source: str,
    source_offset: dict[tuple[bytes, str], tuple[int, int]],
) -> None:
    """A row emitted again after a restart was read at or after the checkpoint resumed from."""
    emitted_before: set[tuple[bytes, str]] = set()
    starts = [0] * 3
    for (_, ends), checkpoint in zip(segments, checkpoints, strict=True):
        segment = [m for m in rows if starts[m.partition] <= m.offset < ends.get(m.partition, 0)]
        emitted_before |= {row_id(m) for m in segment}
        starts = [ends.get(p, 0) for p in range(3)]
        if checkpoint is None:
            continue
        offsets = checkpoint["partitions"][source]["offsets"]
        for m in rows:
            if m.offset >= starts[m.partition] and row_id(m) in emitted_before:
                partition, offset = source_offset[row_id(m)]
                assert offset >= offsets[partition], f"{row_id(m)} re-emitted from before it"
