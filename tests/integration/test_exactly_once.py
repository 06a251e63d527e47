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
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from encoders.json import dumps
from pipeline.config import parse_config
from pipeline.core.ledger.frontier import SourcePartition
from pipeline.core.ledger.records import GenerationRecord
from pipeline.core.progress.claim import GENERATION_KEY, Claim, progress_key, transactional_id
from schemas.errors import FencedError
from schemas.jsontext import loads_exact
from sinks.admin import ensure_topics
from sinks.compacted import CompactedTopic
from sinks.producer import AcknowledgedProducer
from tests.integration.test_chaos import config_for
from tests.support.changefeed import changefeed_config, checkpoint_records, run_to_end
from tests.support.kafka import Message, consume_all
from tests.support.process import run_killed_at, write_config
from tests.support.validator import duplicates_by_run, validate
from tests.support.workload import Workload

PARTITIONS = 3


def produce(bootstrap: str, topic: str, records: list[tuple[int, Any, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for partition, key, value in records:
        producer.produce(topic, key=key, value=value, partition=partition)
    assert producer.flush(30) == 0


# The workload's table as declared for envelope: enriched (its key's names; in JSON the
# declared types constrain nothing, so its numbers of every form pass through as written).
WORKLOAD_TABLE = {
    "type": "record",
    "name": "t",
    "fields": [
        {"name": "region", "type": "string"},
        {"name": "id", "type": "long"},
        {"name": "amount", "type": ["null", "string"], "default": None},
    ],
}


def exactly_once_config(
    bootstrap: str,
    changefeed_id: str,
    source: str,
    *,
    walk: bool,
    delivery: str,
    enriched: bool = False,
) -> dict[str, Any]:
    raw = config_for(bootstrap, changefeed_id, source)
    raw["delivery"] = delivery
    if not walk:  # an envelope the walk does not write: every record through the Python loop
        raw["encoder"]["key_in_value"] = True
    if enriched:  # CockroachDB's envelope (the loop's), its source block naming each record
        raw["encoder"] |= {"envelope": "enriched", "enriched_properties": ["source"]}
        raw["sources"][0] |= {"table_schema": WORKLOAD_TABLE, "primary_key": ["region", "id"]}
    # a failed task runs again (local mode retries nothing unless told to)
    raw["spark"]["master"] = "local[2,3]"
    # a transaction held back (the slow_commit fault point) is aborted by its coordinator
    raw["sink"]["producer"] = {"transaction.timeout.ms": "5000"}
    return raw


# The task faults (HIGHWATER_TASK_FAULT, TaskFaults.java): a task failed after its commit, and
# a commit held back until the coordinator aborted its transaction. Points of a commit: a run
# at least once reaches neither.
FAULTS = "after_commit,slow_commit"


@pytest.mark.parametrize(
    "case",
    [
        # after a batch's commits, before its checkpoint (tasks failed and retried before it);
        # then, resumed from the committed progress, inside the first piece's transaction: its
        # rows and progress flushed to the broker, uncommitted (CrashPoints.java)
        pytest.param(
            (True, "exactly_once", (("after_write:2", FAULTS), ("in_transaction:1", ""))),
            id="walk",
        ),
        # a piece of the second batch committed, its task not reported, the batch's other piece
        # in flight: the first batch's three pieces reached the point once each (a task
        # retried after its commit skips its piece; the one whose commit was aborted commits
        # on its retry)
        pytest.param((False, "exactly_once", (("piece_committed:4", FAULTS),)), id="loop"),
        # the same with envelope: enriched (the loop's too): read back as the wrapped envelope
        # its source block says it is (key names dropped, source.ts_hlc the time), so the
        # same checks count its duplicates and rows left uncommitted. make soak's (55 s): in
        # make test the loop's case above holds the same writes, tests/unit/test_enriched*.py
        # the envelope, tests/cluster/test_formats_on_cluster.py it killed on the cluster
        pytest.param(
            (False, "enriched", (("piece_committed:4", FAULTS),)),
            id="enriched",
            marks=pytest.mark.soak,
        ),
        # the negative control: the walk's kills at least once, which the same check must find
        # duplicates after. after_write's whole batch is written again by the next run, for
        # sure. Without transactions in_transaction is never reached: its counterpart is the
        # driver's during_write, a kill while the executors write (what they wrote by then is
        # seen, and written again by the drain), in the run's second write: 0.3 s into its
        # first, which starts the job's Spark work, nothing is on the broker yet. How much
        # that kill leaves is timing (printed, not asserted). No task faults: points of a
        # commit.
        pytest.param(
            (True, "at_least_once", (("after_write:2", ""), ("during_write:2", ""))),
            id="at-least-once",
        ),
    ],
)
def test_a_kill_inside_a_transaction_or_before_the_checkpoint_writes_nothing_twice(
    kafka_bootstrap: str,
    unique_name: Any,
    tmp_path: Path,
    spark: Any,
    case: tuple[bool, str, tuple[tuple[str, str], ...]],
) -> None:
    """Retried tasks, and the job SIGKILLed inside a transaction and before a checkpoint.

    A task fails right after its commit (Spark runs it again: it must skip what committed); a
    task's transaction outlives its timeout and the coordinator aborts it (the commit fails,
    the task runs again); the job is SIGKILLed after a batch's commits, before its checkpoint
    (the next run must resume from the committed progress, not the checkpoint), or after one
    piece's commit, or inside a piece's transaction with its rows on the broker (the next run
    aborts it, and writes the piece again). Each kill lands where it says (``run_killed_at``);
    a drain in-process writes the rest. A read_committed reader then sees each change once,
    and a reader that does not honour transactions sees the rows the kills left uncommitted
    twice: the kills hurt, so the check could fail. At least once, the same check fails.
    """
    walk, delivery, kills = case
    enriched = delivery == "enriched"
    delivery = "exactly_once" if enriched else delivery
    source, changefeed_id = unique_name("src"), unique_name("cf")
    output_topic = f"{changefeed_id}.t"
    workload = Workload(partitions=PARTITIONS, seed=33)
    ensure_topics({"bootstrap.servers": kafka_bootstrap}, {source: PARTITIONS})
    produce(kafka_bootstrap, source, workload.records(900))
    produce(kafka_bootstrap, source, workload.final_markers())
    raw = exactly_once_config(
        kafka_bootstrap, changefeed_id, source, walk=walk, delivery=delivery, enriched=enriched
    )
    config = write_config(tmp_path / "cf.yaml", raw)
    log = tmp_path / "run.log"
    ends: list[dict[int, int]] = []  # where each killed run left the output topic
    for crash, faults in kills:
        run_log = run_killed_at(config, log, crash, HIGHWATER_TASK_FAULT=faults)  # "": none
        ends.append(topic_ends(kafka_bootstrap, output_topic))
        if faults:
            assert "fault injected after_commit" in run_log, run_log[-3000:]
            assert "fault injected slow_commit" in run_log, run_log[-3000:]
            # the timed-out transaction failed its task; the task ran again
            assert "transaction outlived transaction.timeout.ms" in run_log, run_log[-3000:]
            assert re.search(r"transactions committed, [1-9]\d* aborted", run_log), run_log[-3000:]

    raw["spark"]["trigger"] = {"available_now": True}
    drain = run_to_end(parse_config(raw, env={}), spark)  # in-process: the rest, from Kafka

    output = consume_all(kafka_bootstrap, output_topic)  # read_committed
    if enriched:
        output = as_wrapped(output, changefeed_id, source)
    dead = consume_all(kafka_bootstrap, f"_highwater_dlq_{changefeed_id}")
    report = validate(workload, output, dead, exactly_once=True)
    assert report.distinct == len(workload.changes), report.summary()
    if delivery == "at_least_once":
        # the exactly-once check fails here, on duplicates alone; each run's share of them
        # (the run after a kill writes again what the kill left unchecked): the second run's
        # first batch is the after_write kill's batch again, whole, before its own kill
        replayed = duplicates_by_run(output, ends)
        assert report.duplicates > 0, (report.summary(), replayed)
        assert replayed[1] > 0, (report.summary(), replayed)
        assert set(report.violations) == {"duplicates"}, report.summary()
        print(f"at least once: {report.summary()}; duplicates by run {replayed}")
        return
    assert not report.violations, dict(report.violations)
    assert report.duplicates == 0, report.summary()
    markers = [m for m in output if m.key is None]
    assert {m.partition for m in markers} == set(range(3)), "a marker on every output partition"
    uncommitted_rows_were_written_again(
        kafka_bootstrap,
        output_topic,
        output,
        workload=workload,
        kills=kills,
        ends=ends,
        read=(lambda found: as_wrapped(found, changefeed_id, source)) if enriched else None,
    )
    transactions = {
        outcome: drain.metrics.registry.get_sample_value(
            "highwater_transactions_total", {"changefeed": changefeed_id, "outcome": outcome}
        )
        for outcome in ("committed", "aborted")
    }
    assert transactions["committed"] >= PARTITIONS, transactions  # a new run: one a partition read
    assert transactions["aborted"] == 0, transactions
    assert drain.opened.status.delivery == "exactly_once"

    # each source partition's last progress record: where it ends, claimed by the drain
    generation = len(kills) + 1
    progress = {
        m.key.decode(): json.loads(m.value)
        for m in consume_all(kafka_bootstrap, f"_highwater_progress_{changefeed_id}")
        if m.key is not None and m.value is not None
    }
    source_ends = topic_ends(kafka_bootstrap, source)
    checkpoint = checkpoint_records(kafka_bootstrap, changefeed_id)[-1]
    for p in range(PARTITIONS):
        record = progress[progress_key(SourcePartition(source, p))]
        assert record["generation"] == generation, record
        assert record["next_offset"] <= source_ends[p], record
        assert checkpoint["partitions"][source]["offsets"][p] >= record["next_offset"], checkpoint
    assert progress["generation"] == {"format_version": 1, "generation": generation}


def uncommitted_rows_were_written_again(
    bootstrap: str,
    topic: str,
    output: list[Message],
    *,
    workload: Workload,
    kills: tuple[tuple[str, str], ...],
    ends: list[dict[int, int]],
    read: Callable[[list[Message]], list[Message]] | None = None,
) -> None:
    """The rows the kills and aborted commits left on the broker: never seen, written again.

    Read as a reader that does not honour transactions reads them (``read_uncommitted``), the
    output holds records at offsets the read_committed ``output`` skipped: rows only (an
    aborted transaction's), each one delivered again at another offset, so the very check
    that found no duplicates in ``output`` finds each of them twice. An ``in_transaction``
    kill leaves some among the offsets its own run wrote: its piece's rows were flushed and
    answered before it.
    """
    committed = {(m.partition, m.offset) for m in output}
    uncommitted = consume_all(bootstrap, topic, isolation="read_uncommitted")
    if read is not None:
        uncommitted = read(uncommitted)
    unseen = [m for m in uncommitted if (m.partition, m.offset) not in committed]
    assert all(m.key is not None for m in unseen), "a marker not seen by read_committed"
    again = validate(workload, uncommitted, [], exactly_once=True)
    assert again.duplicates == len(unseen), (again.summary(), len(unseen))
    by_run = []
    for run, (crash, _) in enumerate(kills):
        since = ends[run - 1] if run else {}
        rows = [m for m in unseen if since.get(m.partition, 0) <= m.offset < ends[run][m.partition]]
        by_run.append(len(rows))
        if crash.startswith("in_transaction"):
            assert rows, f"{crash}: no uncommitted row among the offsets its run wrote"
    print(f"rows uncommitted, not seen, written again: {len(unseen)}; by killed run {by_run}")


def as_wrapped(output: list[Message], changefeed_id: str, source: str) -> list[Message]:
    """An enriched output's records as the wrapped envelope (``validate`` reads that).

    Each row's key object becomes the array of its values, its value ``after``, ``before``
    and ``source.ts_hlc`` as ``updated``, written by the changefeed's own JSON writer from
    the exact reading (numbers keep their text); its source block names this changefeed, the
    source topic and the declared key. Markers are as they were.
    """
    wrapped = []
    for m in output:
        if m.key is None or m.value is None:
            wrapped.append(m)
            continue
        key, value = loads_exact(m.key), loads_exact(m.value)
        block = value["source"]
        assert (block["job_id"], block["source_topic"]) == (changefeed_id, source), block
        assert block["primary_keys"] == ["region", "id"] == list(key), (block, key)
        assert value["op"] in {"c", "u", "d"}, value
        envelope = {"after": value["after"], "before": value["before"], "updated": block["ts_hlc"]}
        wrapped.append(replace(m, key=dumps(list(key.values())), value=dumps(envelope)))
    return wrapped


def topic_ends(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's end (high watermark: aborted and open transactions' records too)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "ends", "isolation.level": "read_uncommitted"}
    )
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
    with caplog.at_level(logging.INFO, logger="pipeline.core.progress.claim"):
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
    ends = topic_ends(kafka_bootstrap, source)
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
