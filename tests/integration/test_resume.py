"""Resuming from the checkpoint topic alone: stalled and many partitions, end_time, SIGTERM."""

import json
import signal
import time
from pathlib import Path

from pipeline.config import load_config
from pipeline.dev.generator import GeneratorSpec, write
from schemas.hlc import HlcClock
from tests.support.changefeed import (
    changefeed_config,
    checkpoint_records,
    read_checkpoint,
    read_output,
    run_to_end,
)
from tests.support.kafka import consume_all
from tests.support.process import run_killed_at, start_run, write_config
from tests.support.validator import hlc_order

BASE = 1_800_000_000_000_000_000


def fake_clock(step_seconds: float = 1.0) -> HlcClock:
    """An HLC clock whose wall time moves ``step_seconds`` per change."""
    ticks = iter(range(10**9))
    return HlcClock(lambda: BASE + int(next(ticks) * step_seconds * 1e9))


def row_ids(messages) -> list[tuple[bytes, str]]:
    return [(m.key, json.loads(m.value)["updated"]) for m in messages if m.key is not None]


def test_stalled_partition_does_not_make_the_leading_ones_replay(
    kafka_bootstrap: str, unique_name, tmp_path: Path, spark
) -> None:
    source, changefeed_id = unique_name("src"), unique_name("cf")
    write(
        GeneratorSpec(
            topic=source,
            rows=3000,
            partitions=4,
            resolved_every=100,
            stall_partition=0,
            stall_after=300,
            seed=5,
        ),
        {"bootstrap.servers": kafka_bootstrap},
        clock=fake_clock(),
    )
    raw = {
        "changefeed_id": changefeed_id,
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "sources": [{"topic": source, "table": "orders"}],
        "cursor": "0.0000000000",  # the whole history: the stream is under test
        "sink": {"topic_prefix": f"{changefeed_id}.", "partitions": 3},
        "encoder": {"updated": True},
        "checkpoint": {
            "min_checkpoint_frequency": "0s",
            "frontier_highwater_lag_checkpoint_threshold": "60s",
        },
        "spark": {"trigger": {"processing_time": "200ms"}, "max_offsets_per_trigger": 300},
        # the replay under test is at least once's (exactly once replays nothing: its own test)
        "delivery": "at_least_once",
    }
    log = tmp_path / "runs.log"
    run_killed_at(write_config(tmp_path / "a.yaml", raw), log, "after_write:7")
    checkpoint = checkpoint_records(kafka_bootstrap, changefeed_id)[-1]
    # The high-water mark is stuck at partition 0's last marker, yet the leading partitions'
    # progress was checkpointed.
    assert checkpoint["partitions"][source]["offsets"][1] > 300
    assert checkpoint["partitions"][source]["resolved"][0] is None  # at the high-water mark
    first_run = consume_all(kafka_bootstrap, f"{changefeed_id}.orders")
    before = row_ids(first_run)
    ends = {m.partition: m.offset + 1 for m in first_run}

    raw["spark"]["trigger"] = {"available_now": True}
    run_to_end(load_config(write_config(tmp_path / "b.yaml", raw)), spark)  # in-process
    everything = consume_all(kafka_bootstrap, f"{changefeed_id}.orders")
    after = row_ids([m for m in everything if m.offset >= ends.get(m.partition, 0)])
    replayed = set(after) & set(before)
    source_rows = {
        (m.key, json.loads(m.value)["updated"]): (m.partition, m.offset)
        for m in consume_all(kafka_bootstrap, source)
        if m.key is not None
    }
    offsets = checkpoint["partitions"][source]["offsets"]
    assert all(source_rows[r][1] >= offsets[source_rows[r][0]] for r in replayed)
    # the kill replays the batch written after the last checkpoint, and no more (replaying
    # since the high-water mark last moved would be every row of the leading partitions)
    assert 0 < len(replayed) <= 300, "the one batch written after the last checkpoint"
    assert set(before) | set(after) == set(source_rows)


def test_many_partitions_fit_the_budget_and_a_tiny_budget_falls_back_safely(
    kafka_bootstrap: str, unique_name, spark
) -> None:
    source = unique_name("src")
    write(
        GeneratorSpec(topic=source, rows=2000, partitions=200, resolved_every=1000),
        {"bootstrap.servers": kafka_bootstrap},
    )
    roomy = changefeed_config(kafka_bootstrap, unique_name("cf"), [(source, "orders")])
    run_to_end(roomy, spark)
    record = read_checkpoint(kafka_bootstrap, roomy)
    assert record["fallback"] is None
    assert len(record["partitions"][source]["offsets"]) == 200
    assert len(json.dumps(record)) < roomy.checkpoint.frontier_checkpoint_max_bytes

    # at least once: a resume reads from the checkpoint's offsets, here none, so from the
    # start, dropping what lies at or below the high-water mark (exactly once would resume
    # each partition from its committed progress instead, and claim 400 transactional ids)
    tiny = changefeed_config(
        kafka_bootstrap,
        unique_name("cf"),
        [(source, "orders")],
        checkpoint={"frontier_checkpoint_max_bytes": 1024},
        encoder={"updated": True},
        delivery="at_least_once",
    )
    run_to_end(tiny, spark)
    record = read_checkpoint(kafka_bootstrap, tiny)
    assert record["fallback"] == "high_water"
    assert record["partitions"] == {}
    write(
        GeneratorSpec(
            topic=source, rows=1000, partitions=200, resolved_every=1000, first_order_id=10**6
        ),
        {"bootstrap.servers": kafka_bootstrap},
    )
    run_to_end(tiny, spark)  # resumes by re-reading from the start, dropping rows <= high-water
    source_rows = {
        (m.key, json.loads(m.value)["updated"])
        for m in consume_all(kafka_bootstrap, source)
        if m.key is not None
    }
    emitted = row_ids(read_output(kafka_bootstrap, tiny.output_topic(tiny.sources[0])).rows)
    assert set(emitted) == source_rows
    assert len(emitted) == len(source_rows), "everything at or below the high-water was dropped"


def test_end_time_stops_with_a_last_marker_at_end_time(
    kafka_bootstrap: str, unique_name, spark
) -> None:
    source = unique_name("src")
    report = write(
        GeneratorSpec(topic=source, rows=2000, partitions=4, resolved_every=250),
        {"bootstrap.servers": kafka_bootstrap},
        keep_changes=True,
        clock=fake_clock(),
    )
    end = report.changes[999].updated
    config = changefeed_config(
        kafka_bootstrap,
        unique_name("cf"),
        [(source, "orders")],
        encoder={"updated": True},
        end_time=str(end),
        spark={"trigger": {"processing_time": "200ms"}},
    )
    run_to_end(config, spark)  # a processing-time query: only end_time can stop it
    out = read_output(kafka_bootstrap, config.output_topic(config.sources[0]))
    assert sorted(json.loads(m.value)["updated"] for m in out.rows) == sorted(
        str(c.updated) for c in report.changes if c.updated <= end
    )
    for partition in range(3):
        assert out.marker_times(partition)[-1] == str(end)
    assert all(hlc_order(t) <= hlc_order(str(end)) for p in range(3) for t in out.marker_times(p))


def test_sigterm_finishes_the_batch_checkpoints_and_exits_0(
    kafka_bootstrap: str, unique_name, tmp_path: Path
) -> None:
    source, changefeed_id = unique_name("src"), unique_name("cf")
    write(
        GeneratorSpec(topic=source, rows=2000, partitions=2, resolved_every=100),
        {"bootstrap.servers": kafka_bootstrap},
    )
    raw = {
        "changefeed_id": changefeed_id,
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "sources": [{"topic": source, "table": "orders"}],
        "cursor": "0.0000000000",  # the whole history: the stream is under test
        "sink": {"topic_prefix": f"{changefeed_id}."},
        "checkpoint": {"min_checkpoint_frequency": "1h"},  # the first batch, then the stop
        "resolved": {"enabled": False},
        "spark": {"trigger": {"processing_time": "500ms"}, "max_offsets_per_trigger": 100},
    }
    log = tmp_path / "run.log"
    process = start_run(write_config(tmp_path / "cf.yaml", raw), log)
    deadline = time.monotonic() + 180
    while "batch 2:" not in log.read_text() and time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()[-2000:]
        time.sleep(0.5)
    process.send_signal(signal.SIGTERM)
    assert process.wait(120) == 0, log.read_text()[-3000:]
    assert "stopped at high-water" in log.read_text()
    offsets = checkpoint_records(kafka_bootstrap, changefeed_id)[-1]["partitions"][source][
        "offsets"
    ]
    emitted = len(
        [m for m in consume_all(kafka_bootstrap, f"{changefeed_id}.orders") if m.key is not None]
    )
    source_rows = consume_all(kafka_bootstrap, source)
    read = [m for m in source_rows if m.offset < offsets[m.partition]]
    assert emitted == len([m for m in read if m.key is not None]), "checkpoint covers the output"
