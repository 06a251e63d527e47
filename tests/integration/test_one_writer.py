"""One writer (contract §5.8): two instances of one changefeed, on a steady feed.

Each instance opens its changefeed's transactional producers at start, fencing any earlier
one; the fenced instance's next checkpoint, marker, safepoint or status write fails and it
stops. What users see is checked: the markers on every output partition, the checkpoint
records in the order they were committed, and the validator over the whole output.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from pipeline.config import parse_config
from schemas.errors import FencedError
from sinks.admin import ensure_topics
from sinks.compacted import CompactedTopic
from sinks.producer import AcknowledgedProducer
from tests.integration.test_chaos import SOAK, SteadyProducer, config_for
from tests.support.changefeed import checkpoint_records, run_to_end
from tests.support.kafka import consume_all
from tests.support.process import start_run, write_config
from tests.support.validator import hlc_order, validate
from tests.support.workload import Workload

FENCED = "another instance of this changefeed took over its writes"


def wait_for_first_exit(processes: list[subprocess.Popen[bytes]], timeout: float) -> int:
    """The index of the first process to exit."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for i, process in enumerate(processes):
            if process.poll() is not None:
                return i
        time.sleep(0.5)
    raise AssertionError("both instances still running: neither was fenced")


@pytest.mark.parametrize(
    "case",
    [
        # both at once: whichever opens its producers last wins (the soak runs it; the suite's
        # time goes to the operator's case, and the fence itself is tested below)
        pytest.param(
            (0.0, "exactly_once"),
            id="together",
            marks=pytest.mark.skipif(not SOAK, reason="soak only"),
        ),
        pytest.param(
            (20.0, "at_least_once"),
            id="staggered-at-least-once",
            marks=pytest.mark.skipif(not SOAK, reason="soak only"),
        ),
        # exactly once: the fenced instance's rows are aborted, none seen twice
        pytest.param((20.0, "exactly_once"), id="staggered"),
    ],
)
def test_a_second_instance_fences_the_first_and_nothing_goes_backwards(
    kafka_bootstrap: str,
    unique_name: Any,
    tmp_path: Path,
    case: tuple[float, str],
    spark: Any,
) -> None:
    stagger, delivery = case
    source, changefeed_id = unique_name("src"), unique_name("cf")
    workload = Workload(partitions=3, seed=23)
    ensure_topics({"bootstrap.servers": kafka_bootstrap}, {source: 3})
    producer = SteadyProducer(kafka_bootstrap, source, workload).start()
    raw = {**config_for(kafka_bootstrap, changefeed_id, source), "delivery": delivery}
    config = write_config(tmp_path / "cf.yaml", raw)
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    processes = [start_run(config, logs[0])]
    time.sleep(stagger)
    processes.append(start_run(config, logs[1]))
    try:
        loser = wait_for_first_exit(processes, timeout=240)
        survivor = processes[1 - loser]
        loser_log = logs[loser].read_text(errors="replace")
        assert processes[loser].returncode == 1, loser_log[-3000:]
        assert FENCED in loser_log, loser_log[-3000:]
        if stagger:  # the one started later takes over
            assert loser == 0, loser_log[-3000:]
        time.sleep(5)  # the survivor goes on writing alone
        assert survivor.poll() is None, logs[1 - loser].read_text(errors="replace")[-3000:]
    finally:
        producer.stop()
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)  # finish the batch, checkpoint, stop
                process.wait(120)
    producer.finish()
    drain = {**raw, "spark": {"trigger": {"available_now": True}}}
    run_to_end(parse_config(drain, env={}), spark)  # in-process

    output = consume_all(kafka_bootstrap, f"{changefeed_id}.t")
    dead = consume_all(kafka_bootstrap, f"_highwater_dlq_{changefeed_id}")
    report = validate(workload, output, dead, exactly_once=delivery == "exactly_once")
    # markers never went backwards; exactly once: no row read_committed twice
    assert not report.violations, (report.summary(), dict(report.violations))
    assert report.distinct == len(workload.changes)
    high_waters = [
        hlc_order(r["high_water"]) for r in checkpoint_records(kafka_bootstrap, changefeed_id)
    ]
    assert high_waters == sorted(high_waters), "a checkpoint went backwards"
    markers = [m for m in output if m.key is None]
    assert {m.partition for m in markers} == {0, 1, 2}
    assert all(json.loads(m.value or b"{}")["resolved"] for m in markers)


def test_the_producer_opened_last_writes_and_the_first_is_fenced(
    kafka_bootstrap: str, unique_name: Any
) -> None:
    client = {"bootstrap.servers": kafka_bootstrap}
    topic = CompactedTopic(client, unique_name("store"))
    topic.ensure()
    writer_id = unique_name("writer")
    first = AcknowledgedProducer(client, timeout=30, transactional_id=writer_id)
    CompactedTopic(client, topic.topic, producer=first).put("k", b"first")
    second = AcknowledgedProducer(client, timeout=30, transactional_id=writer_id)
    second.connect()  # fences the first
    with pytest.raises(FencedError, match=FENCED):
        CompactedTopic(client, topic.topic, producer=first).put("k", b"stale")
    CompactedTopic(client, topic.topic, producer=second).put("k", b"second")
    assert topic.read_all() == {"k": b"second"}
    # readers see committed records only, to the partition's end (a control record is last)
    assert [m.value for m in consume_all(kafka_bootstrap, topic.topic)] == [b"first", b"second"]
    first.close()
    second.close()
    topic.close()
