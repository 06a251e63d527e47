"""Exactly-once delivery (contract §5.4, §5.8 with ``delivery: exactly_once``), on the real broker.

Each source partition's rows of a batch commit in one Kafka transaction with the partition's
progress record; a read_committed consumer (confluent-kafka, as ``consume_all`` reads) must
see each ``(key, updated)`` once, whatever was killed where. Asserted on what users see: the
rows and markers on the output topic, the progress records, the checkpoint record.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from pipeline.config import parse_config
from pipeline.core.frontier import SourcePartition
from pipeline.core.progress import GENERATION_KEY, Claim, progress_key, transactional_id
from pipeline.core.records import GenerationRecord
from schemas.errors import FencedError
from sinks.admin import ensure_topics
from sinks.compacted import CompactedTopic
from sinks.producer import AcknowledgedProducer
from tests.integration.test_chaos import SOAK, config_for
from tests.support.changefeed import changefeed_config, checkpoint_records, run_to_end
from tests.support.kafka import consume_all
from tests.support.process import run_killed_at, write_config
from tests.support.validator import validate
from tests.support.workload import Workload

PARTITIONS = 3


def produce(bootstrap: str, topic: str, records: list[tuple[int, Any, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for partition, key, value in records:
        producer.produce(topic, key=key, value=value, partition=partition)
    assert producer.flush(30) == 0


def exactly_once_config(
    bootstrap: str, changefeed_id: str, source: str, *, walk: bool, delivery: str
) -> dict[str, Any]:
    raw = config_for(bootstrap, changefeed_id, source)
    raw["delivery"] = delivery
    if not walk:  # an envelope the walk does not write: every record through the Python loop
        raw["encoder"]["key_in_value"] = True
    # a failed task runs again (local mode retries nothing unless told to)
    raw["spark"]["master"] = "local[2,3]"
    # a transaction held back (the slow_commit fault point) is aborted by its coordinator
    raw["sink"]["producer"] = {"transaction.timeout.ms": "5000"}
    return raw


@pytest.mark.parametrize(
    "case",
    [
        pytest.param((True, "exactly_once"), id="walk"),
        pytest.param((False, "exactly_once"), id="loop"),
        # the same kills at least once: the duplicates the check above must not find
        pytest.param(
            (True, "at_least_once"),
            id="at-least-once",
            marks=pytest.mark.skipif(not SOAK, reason="soak only: the baseline"),
        ),
    ],
)
def test_a_retried_task_and_a_kill_before_the_checkpoint_write_nothing_twice(
    kafka_bootstrap: str,
    unique_name: Any,
    tmp_path: Path,
    spark: Any,
    case: tuple[bool, str],
) -> None:
    """Retried tasks and a kill between a batch's commit and its checkpoint: nothing twice.

    A task fails right after its commit (Spark runs it again: it must skip what committed); a
    task's transaction outlives its timeout and the coordinator aborts it (the commit fails,
    the task runs again); then the job is SIGKILLed after a batch's write, before its
    checkpoint (the next run must resume from the committed progress, not the checkpoint).
    """
    walk, delivery = case
    source, changefeed_id = unique_name("src"), unique_name("cf")
    workload = Workload(partitions=PARTITIONS, seed=33)
    ensure_topics({"bootstrap.servers": kafka_bootstrap}, {source: PARTITIONS})
    produce(kafka_bootstrap, source, workload.records(900))
    produce(kafka_bootstrap, source, workload.final_markers())
    raw = exactly_once_config(kafka_bootstrap, changefeed_id, source, walk=walk, delivery=delivery)
    config = write_config(tmp_path / "cf.yaml", raw)
    log = tmp_path / "run.log"
    faults = "after_commit,slow_commit"
    run_log = run_killed_at(config, log, "after_write:2", HIGHWATER_TASK_FAULT=faults)
    if delivery == "exactly_once":  # the fault points are a transaction's commit
        assert "fault injected after_commit" in run_log, run_log[-3000:]
        assert "fault injected slow_commit" in run_log, run_log[-3000:]
        # the timed-out transaction failed its task; the task ran again
        assert "transaction outlived transaction.timeout.ms" in run_log, run_log[-3000:]
        assert re.search(r"transactions committed, [1-9]\d* aborted", run_log), run_log[-3000:]

    raw["spark"]["trigger"] = {"available_now": True}
    drain = run_to_end(parse_config(raw, env={}), spark)  # in-process: the rest, from Kafka

    output = consume_all(kafka_bootstrap, f"{changefeed_id}.t")  # read_committed
    dead = consume_all(kafka_bootstrap, f"_highwater_dlq_{changefeed_id}")
    report = validate(workload, output, dead, exactly_once=delivery == "exactly_once")
    assert report.distinct == len(workload.changes), report.summary()
    if delivery == "at_least_once":
        assert report.duplicates > 0, report.summary()
        return
    assert not report.violations, dict(report.violations)
    assert report.duplicates == 0, report.summary()
    markers = [m for m in output if m.key is None]
    assert {m.partition for m in markers} == set(range(3)), "a marker on every output partition"
    transactions = {
        outcome: drain.metrics.registry.get_sample_value(
            "highwater_transactions_total", {"changefeed": changefeed_id, "outcome": outcome}
        )
        for outcome in ("committed", "aborted")
    }
    assert transactions["committed"] >= PARTITIONS, transactions  # the drain's, one per piece
    assert transactions["aborted"] == 0, transactions
    assert drain.outputs.status.delivery == "exactly_once"

    # each source partition's last progress record: where it ends, claimed by the second run
    progress = {
        m.key.decode(): json.loads(m.value)
        for m in consume_all(kafka_bootstrap, f"_highwater_progress_{changefeed_id}")
        if m.key is not None and m.value is not None
    }
    ends = source_ends(kafka_bootstrap, source)
    checkpoint = checkpoint_records(kafka_bootstrap, changefeed_id)[-1]
    for p in range(PARTITIONS):
        record = progress[progress_key(SourcePartition(source, p))]
        assert record["generation"] == 2, record
        assert record["next_offset"] <= ends[p], record
        assert checkpoint["partitions"][source]["offsets"][p] >= record["next_offset"], checkpoint
    assert progress["generation"] == {"format_version": 1, "generation": 2}


def source_ends(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ends"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()


def test_an_initial_scan_chunk_is_written_once_across_a_retry_and_a_kill(
    kafka_bootstrap: str,
    unique_name: Any,
    tmp_path: Path,
    spark: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An initial scan's chunk, retried and killed around its commit, is written once.

    A chunk's task fails after its commit (the retry skips it); the job is SIGKILLed after a
    chunk's commit, before the driver recorded it (the restart finds it committed).
    """
    source, changefeed_id = unique_name("src"), unique_name("cf")
    workload = Workload(partitions=PARTITIONS, seed=34)
    ensure_topics({"bootstrap.servers": kafka_bootstrap}, {source: PARTITIONS})
    produce(kafka_bootstrap, source, workload.records(600))
    produce(kafka_bootstrap, source, workload.final_markers())
    raw = exactly_once_config(
        kafka_bootstrap, changefeed_id, source, walk=True, delivery="exactly_once"
    )
    raw["initial_scan"] = "yes"  # at the cursor (0): every version, by the scan
    config = write_config(tmp_path / "cf.yaml", raw)
    run_log = run_killed_at(
        config, tmp_path / "run.log", "chunk_written:2", HIGHWATER_TASK_FAULT="after_commit"
    )
    assert "fault injected after_commit" in run_log, run_log[-3000:]

    raw["spark"]["trigger"] = {"available_now": True}
    with caplog.at_level(logging.INFO, logger="pipeline.core.progress"):
        run_to_end(parse_config(raw, env={}), spark)
    # the chunk committed before the kill is done (its task would also find it committed)
    assert "was committed before the restart" in caplog.text, caplog.text[-3000:]

    output = consume_all(kafka_bootstrap, f"{changefeed_id}.t")
    dead = consume_all(kafka_bootstrap, f"_highwater_dlq_{changefeed_id}")
    report = validate(workload, output, dead, exactly_once=True)
    assert not report.violations, (report.summary(), dict(report.violations))
    assert report.distinct == len(workload.changes), report.summary()
    scans = {
        m.key.decode(): json.loads(m.value)
        for m in consume_all(kafka_bootstrap, f"_highwater_progress_{changefeed_id}")
        if m.key is not None and m.value is not None and m.key.startswith(b"scan/")
    }
    ends = source_ends(kafka_bootstrap, source)
    assert {k: (v["next_offset"], v["time"]) for k, v in scans.items()} == {
        f"scan/{source}/{p}": (ends[p], "0.0000000000") for p in range(PARTITIONS)
    }


@pytest.mark.parametrize("newer", [False, True], ids=["earlier-task", "newer-run"])
def test_a_claim_fenced_by_an_earlier_runs_task_is_taken_again_but_not_a_newer_runs(
    kafka_bootstrap: str, unique_name: Any, monkeypatch: pytest.MonkeyPatch, newer: bool
) -> None:
    """A task of the run before opens an id while this run claims it: the claim is taken again.

    The task (its driver not fenced yet) fences the claim's producer; the claim opens, reads
    and commits again, and its record carries the new generation. Had a newer run taken a
    generation meanwhile, the claim stops instead (``another instance … took over``).
    """
    client = {"bootstrap.servers": kafka_bootstrap}
    source = unique_name("src")
    ensure_topics(client, {source: 2})
    config = changefeed_config(kafka_bootstrap, unique_name("cf"), [(source, "t")])
    partitions = [SourcePartition(source, p) for p in range(2)]
    writer = AcknowledgedProducer(client, timeout=30)
    Claim.take(config, client, writer, partitions)  # generation 1: a run before
    commit, fenced = Claim._commit, list[AcknowledgedProducer]()

    def an_old_task_opens_an_id_first(claim: Claim, producers: Any, slots: int) -> None:
        if not fenced:  # the first attempt only
            rival = AcknowledgedProducer(
                client, timeout=30, transactional_id=transactional_id(config, partitions[1])
            )
            rival.connect()
            fenced.append(rival)
            if newer:
                store = CompactedTopic(client, claim.topic, producer=writer)
                store.put(GENERATION_KEY, GenerationRecord(generation=3).encode())
        commit(claim, producers, slots)

    monkeypatch.setattr(Claim, "_commit", an_old_task_opens_an_id_first)
    if newer:
        with pytest.raises(FencedError, match="took over its writes"):
            Claim.take(config, client, writer, partitions)
    else:
        claim = Claim.take(config, client, writer, partitions)
        assert claim.generation == 2
        records = CompactedTopic(client, claim.topic).read_all()
        for sp in partitions:
            record = json.loads(records[progress_key(sp)])
            assert record["generation"] == 2, record
    assert len(fenced) == 1
    fenced[0].close()
    writer.close()
