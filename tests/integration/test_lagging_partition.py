"""A source partition that sends no resolved markers does not make the others replay (§5.4).

A native source topic of four partitions under a steady producer; partition 0 gets changes
but not one marker for the whole test, so the high-water mark stays at the cursor and no
checkpoint is ever due because it moved. The changefeed (``highwater run``, spark-submit) is
killed with SIGKILL twice, each time once at least two batches were written and
checkpointed: right after the next batch is written, then while one is; then it is drained.
What the users see must show that every partition's progress was saved all along:

* each kill makes the next run re-emit at most the rows the killed run wrote after its last
  checkpoint record, one batch (at most ``max_offsets_per_trigger`` source records), not
  everything since the high-water mark last moved;
* the checkpoint record keeps every partition's offset and its own resolved time, and a
  resumed run emits no row at or below its partition's time there (changes the workload
  re-sends long after they were resolved, amid their partition's rows, would come out again);
* the validator finds nothing wrong, and every change was emitted.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from pipeline.config import load_config
from sinks.admin import ensure_topics
from tests.support.changefeed import checkpoint_records, run_to_end
from tests.support.kafka import Message, consume_all
from tests.support.process import run_killed_at, write_config
from tests.support.producer import SteadyProducer
from tests.support.validator import duplicates_by_run, exact, hlc_order, validate
from tests.support.workload import Workload

PARTITIONS, STALLED = 4, 0
BATCH = 200  # max_offsets_per_trigger: a batch reads at most this many source records
# Where the driver dies: right after the n-th batch's rows were acknowledged (its checkpoint
# not written), or while they are written; the batches before it were checkpointed.
KILLS = ("after_write:3", "during_write:3")


def config_for(bootstrap: str, changefeed_id: str, source: str, cursor: str) -> dict[str, Any]:
    return {
        "changefeed_id": changefeed_id,
        "kafka": {"bootstrap_servers": bootstrap},
        "sources": [{"topic": source, "table": "t"}],
        "cursor": cursor,  # below every change, and where the stalled partition holds the mark
        "sink": {"topic_prefix": f"{changefeed_id}.", "partitions": 3},
        "encoder": {"updated": True, "diff": True},
        "resolved": {"interval": "1s"},
        # Every batch that read something is checkpointed: the frequency is at most any
        # spacing of batches (a slow first batch may be followed at once by a quick one).
        "checkpoint": {"min_checkpoint_frequency": "0s"},
        "on_error": "dlq",
        "spark": {"trigger": {"processing_time": "300ms"}, "max_offsets_per_trigger": BATCH},
        # the replay under test is at least once's (exactly once replays nothing: its own test)
        "delivery": "at_least_once",
    }


def test_a_partition_without_markers_does_not_make_the_others_replay_after_kills(
    kafka_bootstrap: str, unique_name: Any, tmp_path: Path, spark: Any
) -> None:
    started = time.monotonic()
    source, changefeed_id = unique_name("src"), unique_name("cf")
    out_topic = f"{changefeed_id}.t"
    workload = Workload(partitions=PARTITIONS, seed=30, stalled=STALLED, late_duplicates=0.2)
    ensure_topics({"bootstrap.servers": kafka_bootstrap}, {source: PARTITIONS})
    # ~50 changes a second: every restart finds more than its first batches can read
    producer = SteadyProducer(kafka_bootstrap, source, workload, step=10).start()
    raw = config_for(kafka_bootstrap, changefeed_id, source, workload.start)
    config = write_config(tmp_path / "cf.yaml", raw)
    log = tmp_path / "runs.log"

    ends: list[dict[int, int]] = []  # where each killed run left each output partition
    resumed_from: list[dict[str, Any]] = []  # the record the run after each kill starts from
    for crash in KILLS:
        records_before = len(checkpoint_records(kafka_bootstrap, changefeed_id))
        run_killed_at(config, log, crash, timeout=240)
        output = consume_all(kafka_bootstrap, out_topic)
        end = {m.partition: m.offset + 1 for m in output}  # in offset order
        before = ends[-1] if ends else {}
        assert any(m.offset >= before.get(m.partition, 0) for m in output if m.key), crash
        records = checkpoint_records(kafka_bootstrap, changefeed_id)
        assert len(records) - records_before >= 2, f"{crash}: not two batches checkpointed"
        ends.append(end)
        resumed_from.append(records[-1])
    producer.stop()
    raw["spark"] = {"trigger": {"available_now": True}}
    run_to_end(load_config(write_config(tmp_path / "drain.yaml", raw)), spark)  # in-process
    output = consume_all(kafka_bootstrap, out_topic)
    source_log = consume_all(kafka_bootstrap, source)

    # Every record the runs resumed from kept each partition's own progress; the stalled
    # partition pins the high-water mark at the cursor.
    for record in resumed_from:
        assert record["fallback"] is None
        assert record["high_water"] == workload.start
        kept = record["partitions"][source]
        assert all(offset is not None for offset in kept["offsets"]), kept
        assert len(kept["resolved"]) == PARTITIONS, kept
        assert kept["resolved"][STALLED] is None, kept  # at the high-water mark
        assert all(kept["resolved"][p] is not None for p in range(PARTITIONS) if p != STALLED)

    duplicates = duplicates_by_run(output, ends)
    unsaved = rows_after_the_last_checkpoint(output, ends, resumed_from)
    tested = assert_resumes_filter_below_each_partitions_time(
        output, ends, resumed_from, source, workload
    )
    tested_late = count_covered_resends(source_log, resumed_from, source, workload)
    dead = consume_all(kafka_bootstrap, f"_highwater_dlq_{changefeed_id}")
    report = validate(workload, output, dead)
    print(
        f"lagging partition: {len(KILLS)} kills, {len(workload.changes)} changes "
        f"({len(workload.duplicates)} re-sent upstream) in {time.monotonic() - started:.0f} s: "
        f"duplicates per kill {duplicates[1:]}, rows each killed run wrote after its last "
        f"checkpoint {unsaved} (one batch reads at most {BATCH} records), "
        f"{tested} rows of resumed runs above their partition's time in the record, "
        f"{tested_late} re-sent changes only those times kept out; {report.summary()}"
    )
    assert duplicates[0] == 0, "the first run emitted a row twice"
    # at most what the killed run wrote since its last checkpoint: its last batch
    replays = list(zip(duplicates[1:], unsaved, strict=True))
    assert all(dup <= min(rows, BATCH) for dup, rows in replays), replays
    # the kill after a write replays that batch (the bound above is not met by replaying none)
    assert replays[0][0] > 0, replays
    assert tested_late > 0, "no re-sent change fell where only the record's times filter it"
    assert not report.violations, dict(report.violations)
    assert report.distinct == len(workload.changes)  # every change, at least once


def rows_after_the_last_checkpoint(
    output: list[Message], ends: list[dict[int, int]], records: list[dict[str, Any]]
) -> list[int]:
    """Per killed run, the rows it wrote after its last checkpoint record was written.

    By the rows' Kafka timestamps (the producer's clock) against the record's ``written_at``
    (the driver's): one machine, one clock. The batch after a checkpoint starts writing after
    it, so these are the rows of the batches the checkpoint does not cover.
    """
    counts = []
    for run, (end, record) in enumerate(zip(ends, records, strict=True)):
        start = ends[run - 1] if run else {}
        written = datetime.fromisoformat(record["written_at"]).timestamp() * 1000
        counts.append(
            sum(
                1
                for m in output
                if m.key is not None
                and start.get(m.partition, 0) <= m.offset < end.get(m.partition, 0)
                and m.timestamp_ms > written
            )
        )
    return counts


def assert_resumes_filter_below_each_partitions_time(
    output: list[Message],
    ends: list[dict[int, int]],
    resumed_from: list[dict[str, Any]],
    source: str,
    workload: Workload,
) -> int:
    """No row a resumed run emits is at or below its source partition's time in its record.

    Rows written upstream after a partition's marker are above it; only a change re-sent
    after being resolved can be at or below it, and a resumed run must drop it. Returns how
    many rows the resumed runs emitted.
    """
    partition_of = {(json.dumps(exact(c.key)), c.updated): c.partition for c in workload.changes}
    checked = 0
    for run, record in enumerate(resumed_from, start=1):
        first, last = ends[run - 1], ends[run] if run < len(ends) else None
        resolved = record["partitions"][source]["resolved"]
        for m in output:
            if m.key is None or m.offset < first[m.partition]:
                continue
            if last is not None and m.offset >= last[m.partition]:
                continue
            updated = json.loads(m.value or b"{}")["updated"]
            floor = (
                resolved[partition_of[json.dumps(exact(m.key)), updated]] or record["high_water"]
            )
            assert hlc_order(updated) > hlc_order(floor), f"run {run + 1} emitted {updated}"
            checked += 1
    return checked


def count_covered_resends(
    source_log: list[Message], resumed_from: list[dict[str, Any]], source: str, workload: Workload
) -> int:
    """Re-sent changes a resumed run read before any marker of their partition.

    Those are dropped only because the record kept their partition's resolved time: a
    resume at the high-water mark would emit them again.
    """
    resent = {(c.key, c.value()) for c in workload.duplicates}
    count = 0
    for record in resumed_from:
        kept = record["partitions"][source]
        for p, offset in enumerate(kept["offsets"]):
            if kept["resolved"][p] is None:
                continue
            floor = hlc_order(kept["resolved"][p])
            seen: set[tuple[bytes | None, bytes | None]] = set()
            for m in (m for m in source_log if m.partition == p):
                if m.offset >= offset and m.key is None:
                    break  # a marker: from here on the run's own floor drops them
                if m.offset >= offset and (m.key, m.value) in seen & resent:
                    count += hlc_order(json.loads(m.value or b"{}")["updated"]) <= floor
                seen.add((m.key, m.value))
    return count
