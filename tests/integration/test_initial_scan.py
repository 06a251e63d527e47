"""The initial scan on a real broker and Spark: snapshot, hand-over, restart, rate limit."""

import json
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from pipeline.cli import main as highwater
from pipeline.config import load_config
from pipeline.control.changefeeds import Changefeeds
from pipeline.control.context import OperatorContext
from pipeline.core.coordinator.changefeed import Changefeed
from pipeline.core.ledger.checkpoint import ranges_to_numbers
from pipeline.dev.generator import Change, GeneratorSpec, encode_change, encode_key, write
from schemas.hlc import Hlc, HlcClock
from tests.support.changefeed import changefeed_config, checkpoint_records, read_output
from tests.support.kafka import consume_all, produce_with_a_bad_record
from tests.support.process import run_killed_at, write_config
from tests.support.scan import Expected, check_output, expected, key_bytes

ENCODER = {"updated": True, "mvcc_timestamp": True}


def history(bootstrap: str, source: str, rows: int, partitions: int, seed: int) -> list[Change]:
    report = write(
        GeneratorSpec(
            topic=source, rows=rows, partitions=partitions, resolved_every=500, seed=seed
        ),
        {"bootstrap.servers": bootstrap},
        keep_changes=True,
    )
    return report.changes


def wait_for(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_snapshot_then_every_later_change_once_while_the_upstream_keeps_writing(
    kafka_bootstrap: str, spark: Any, unique_name
) -> None:
    source, changefeed_id = unique_name("src"), unique_name("cf")
    changes = history(kafka_bootstrap, source, rows=12_000, partitions=4, seed=21)
    config = changefeed_config(
        kafka_bootstrap,
        changefeed_id,
        [(source, "orders")],
        encoder=ENCODER,
        initial_scan={"mode": "yes", "rate_limit": 2_500},  # ~3 s of scan: writes overlap
        spark={"trigger": {"processing_time": "500ms"}},
    )
    changefeed = Changefeed(config, spark)
    runner = threading.Thread(target=changefeed.run)
    runner.start()
    try:
        wait_for(lambda: changefeed.backfill is not None, 120, "the scan to start")
        statement = changefeed.statement_time
        assert statement is not None
        # While it scans: new rows, updates and deletes of scanned keys, and markers.
        more = write(
            GeneratorSpec(
                topic=source,
                rows=2_000,
                partitions=4,
                resolved_every=400,
                seed=22,
                first_order_id=1_000_000,
            ),
            {"bootstrap.servers": kafka_bootstrap},
            keep_changes=True,
        )
        touched = update_some(kafka_bootstrap, source, changes, count=300)
        assert changefeed.backfill is not None, "the scan ended before the writes: no overlap"
        final = max(more.last_resolved.values())
        write_markers(kafka_bootstrap, source, 4, HlcClock().now())
        wait_for(
            lambda: changefeed.last_marker is not None and changefeed.last_marker > final,
            180,
            "the stream to resolve past the writes made during the scan",
        )
    finally:
        changefeed.stop_request.set()
        runner.join(120)
    assert changefeed.statement_time == statement
    output = read_output(kafka_bootstrap, config.output_topic(config.sources[0]))
    want = expected(changes + more.changes + touched, statement)
    assert len(want.snapshot) > 5_000
    assert sum(map(len, want.later.values())) > 2_000
    check_output(output.rows, want)
    # The first marker on every output partition is the statement time, after the snapshot.
    for partition in range(3):
        marks = [m for m in output.markers if m.partition == partition]
        assert json.loads(marks[0].value)["resolved"] == str(statement)
        snapshot_offsets = [
            m.offset
            for m in output.rows
            if m.partition == partition and json.loads(m.value)["updated"] == str(statement)
        ]
        assert max(snapshot_offsets) < marks[0].offset


def update_some(bootstrap: str, source: str, changes: list[Change], count: int) -> list[Change]:
    """Update (every third: delete) ``count`` keys that were live in the history."""
    live: dict[tuple[str, int], Change] = {}
    for change in changes:
        live[change.key] = change
    clock, written = HlcClock(), []
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, old in enumerate([c for c in live.values() if c.after is not None][:count]):
        after = None if i % 3 == 0 else {**old.after, "status": "touched"}  # type: ignore[dict-item]
        change = Change(old.key, after, old.after, clock.now(), old.partition)
        producer.produce(
            source,
            key=encode_key(change.key),
            value=encode_change(change),
            partition=change.partition,
        )
        written.append(change)
    assert producer.flush(30) == 0
    return written


def write_markers(bootstrap: str, source: str, partitions: int, resolved: Any) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for p in range(partitions):
        producer.produce(
            source, value=json.dumps({"resolved": str(resolved)}).encode(), partition=p
        )
    assert producer.flush(30) == 0


def test_kill_mid_scan_then_restart_skips_finished_chunks(
    kafka_bootstrap: str, unique_name, tmp_path: Path, spark
) -> None:
    source, changefeed_id = unique_name("src"), unique_name("cf")
    changes = history(kafka_bootstrap, source, rows=12_000, partitions=6, seed=31)
    raw = {
        "changefeed_id": changefeed_id,
        "kafka": {"bootstrap_servers": kafka_bootstrap},
        "sources": [{"topic": source, "table": "orders"}],
        "sink": {"topic_prefix": f"{changefeed_id}.", "partitions": 3},
        "encoder": ENCODER,
        "initial_scan": "yes",
        "spark": {"trigger": {"available_now": True}},
        # the chunks in flight at the kill are aborted: a read_committed reader sees each once
        "delivery": "exactly_once",
    }
    config_file = write_config(tmp_path / "cf.yaml", raw)
    log = tmp_path / "runs.log"
    run_killed_at(config_file, log, "after_chunk:2")
    at_kill = checkpoint_records(kafka_bootstrap, changefeed_id)[-1]
    done_at_kill = at_kill["backfill"]["partitions"][source]["done"]
    finished = set(ranges_to_numbers(done_at_kill))
    assert len(finished) == 2, at_kill["backfill"]

    Changefeed(load_config(config_file), spark).run()  # the restart (in-process)
    final = checkpoint_records(kafka_bootstrap, changefeed_id)[-1]
    assert final["backfill"] is None
    assert final["statement_time"] == at_kill["statement_time"]
    output = read_output(kafka_bootstrap, f"{changefeed_id}.orders")
    want = expected(changes, Hlc.parse(at_kill["statement_time"]))
    check_output(output.rows, want, exactly_once=True)  # nothing twice, counted
    source_partition = {key_bytes(c.key): c.partition for c in changes}
    emitted: dict[int, int] = defaultdict(int)
    for m in output.rows:
        emitted[source_partition[m.key]] += 1
    wanted: dict[int, int] = defaultdict(int)
    for key in want.snapshot:
        wanted[source_partition[key]] += 1
    for key, later in want.later.items():
        wanted[source_partition[key]] += len(later)
    for p in finished:
        assert emitted[p] == wanted[p], f"finished chunk {source}/{p} was emitted again"


def test_the_rate_limit_holds_within_ten_percent_over_thirty_seconds(
    kafka_bootstrap: str, spark: Any, unique_name
) -> None:
    source, changefeed_id = unique_name("src"), unique_name("cf")
    changes = history(kafka_bootstrap, source, rows=12_000, partitions=2, seed=41)
    statement_rows = len(expected(changes, max(c.updated for c in changes)).snapshot)
    rate = statement_rows / 33  # about 33 s of scan
    config = changefeed_config(
        kafka_bootstrap,
        changefeed_id,
        [(source, "orders")],
        encoder=ENCODER,
        initial_scan={"mode": "only", "rate_limit": rate},
    )
    Changefeed(config, spark).run()
    output = read_output(kafka_bootstrap, config.output_topic(config.sources[0]))
    times = sorted(m.timestamp_ms for m in output.rows)
    seconds = (times[-1] - times[0]) / 1000
    measured = (len(times) - 1) / seconds
    print(f"rate limit {rate:.1f} rows/s: {len(times)} rows in {seconds:.1f} s = {measured:.1f}")
    assert seconds >= 30
    assert abs(measured - rate) <= 0.1 * rate


def test_only_ends_after_the_snapshot_with_its_marker_and_the_status_says_so(
    kafka_bootstrap: str, spark: Any, unique_name, capsys: Any
) -> None:
    source, changefeed_id = unique_name("src"), unique_name("cf")
    changes = history(kafka_bootstrap, source, rows=3_000, partitions=3, seed=51)
    changes += update_some(kafka_bootstrap, source, changes, count=50)  # after the last markers
    config = changefeed_config(
        kafka_bootstrap,
        changefeed_id,
        [(source, "orders")],
        encoder=ENCODER,
        initial_scan="only",
        spark={"trigger": {"processing_time": "1s"}},  # would stream on; only must not
    )
    Changefeed(config, spark).run()
    topic = config.output_topic(config.sources[0])
    output = read_output(kafka_bootstrap, topic)
    checkpoint = checkpoint_records(kafka_bootstrap, changefeed_id, config.checkpoint.topic)[-1]
    statement = Hlc.parse(checkpoint["statement_time"])
    want = expected(changes, statement)
    assert want.later, "the history has changes after the statement time, which only skips"
    check_output(output.rows, Expected(statement, want.snapshot, {}))
    assert sorted(json.loads(m.value)["resolved"] for m in output.markers) == [str(statement)] * 3

    # A second run of the finished changefeed emits nothing, whatever arrived since.
    write(
        GeneratorSpec(topic=source, rows=100, partitions=3, resolved_every=50, seed=52),
        {"bootstrap.servers": kafka_bootstrap},
    )
    Changefeed(config, spark).run()
    assert len(read_output(kafka_bootstrap, topic).rows) == len(output.rows)

    command = ["changefeed", "query", changefeed_id, "--bootstrap-servers", kafka_bootstrap]
    assert highwater(command) == 0
    printed = capsys.readouterr().out
    assert "state           finished" in printed
    assert f"[{'#' * 30}] 100% 3/3 chunks" in printed
    assert f"{len(want.snapshot):,} rows" in printed


def test_no_scan_streams_only_the_changes_after_the_statement_time(
    kafka_bootstrap: str, spark: Any, unique_name
) -> None:
    source, changefeed_id = unique_name("src"), unique_name("cf")
    changes = history(kafka_bootstrap, source, rows=3_000, partitions=3, seed=61)
    changes += update_some(kafka_bootstrap, source, changes, count=50)  # after the last markers
    config = changefeed_config(
        kafka_bootstrap, changefeed_id, [(source, "orders")], encoder=ENCODER, initial_scan="no"
    )
    Changefeed(config, spark).run()
    checkpoint = checkpoint_records(kafka_bootstrap, changefeed_id, config.checkpoint.topic)[-1]
    statement = Hlc.parse(checkpoint["statement_time"])
    want = expected(changes, statement)
    assert want.later
    output = read_output(kafka_bootstrap, config.output_topic(config.sources[0]))
    check_output(output.rows, Expected(statement, {}, want.later))


def test_on_error_pause_in_the_scan_names_the_record_and_resume_can_skip_it(
    kafka_bootstrap: str, spark: Any, unique_name
) -> None:
    """The scan pauses as the stream does: the record named, the run not a failure.

    Resumed with ``--skip-bad-record``, the scan diverts it to the dead-letter topic and ends.
    """
    source, changefeed_id = unique_name("src"), unique_name("cf")
    produce_with_a_bad_record(kafka_bootstrap, source)
    config = changefeed_config(
        kafka_bootstrap, changefeed_id, [(source, "t")], initial_scan="yes", on_error="pause"
    )
    Changefeed(config, spark).run()  # paused: returns, no error
    changefeeds = Changefeeds(OperatorContext({"bootstrap.servers": kafka_bootstrap}))
    found = changefeeds.get(changefeed_id)
    assert found.spec is not None
    assert found.status is not None
    assert (found.spec.desired, str(found.spec.bad_record)) == ("paused", f"{source}/0@2")
    assert found.status.state == "paused"
    assert f"topic={source} partition=0 offset=2" in (found.status.error or "")
    dlq = config.effective_dlq_topic
    changefeeds.resume(changefeed_id, skip_bad_record=True)
    Changefeed(config, spark).run()
    output = read_output(kafka_bootstrap, config.output_topic(config.sources[0]))
    assert sorted({m.key for m in output.rows}) == [b"[0]", b"[1]", b"[3]"]
    assert output.marker_times(0)[-1] == "40.0000000000"  # the scan ended, at its time
    dead = consume_all(kafka_bootstrap, dlq)
    assert [(m.key, m.value) for m in dead] == [(b"[2]", b"not json {")]
    reason = dict(dead[0].headers)["highwater.error"].decode()
    assert reason.startswith("skipped by an operator (resume --skip-bad-record): ")
