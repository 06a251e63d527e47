"""The cluster part of the benchmark (``make cluster-bench``): delivery where users run it.

On the dev cluster (three Kafka nodes, Spark standalone with two one-core workers), one
held-out source (``rows`` changes on ``partitions`` partitions) is drained by an available-now
changefeed, at least once and then exactly once, through each path of a batch: the JVM walk
(native JSON) and the Python loop (a CDC ``where`` sends every record through it). Printed per
drain: seconds, changes/s, batches, transactions committed and aborted, tasks lost (failed task
attempts, read from Spark's status tracker for the stream's jobs) and both per 1,000 batches,
and the output's duplicates for a read_committed reader; then exactly once's rate as a share
of at least once's on the same cluster, in the same run.

Exactly once, a source partition's transactional producer lives on the executor its tasks run
on; a task placed on another executor than the batch before fences it (``Placement.java``
keeps each partition's tasks where Spark's Kafka source prefers them).
"""

from __future__ import annotations

import collections
import statistics
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import TopicPartition

from pipeline.core.batch.kafka_clients import range_reader, read_range
from pipeline.core.coordinator.changefeed import Changefeed
from pipeline.core.ledger.frontier import SourcePartition
from pipeline.dev.generator import GeneratorSpec, write

from .bench import _config


@dataclass(frozen=True)
class Drained:
    """One drain of the held-out source."""

    seconds: float  # the stream's, from its start to its last checkpoint
    batches: int
    committed: int
    aborted: int
    lost_tasks: int
    records: int  # output records a read_committed reader sees (markers too)
    duplicates: int  # (key, value) pairs seen more than once
    writing: float  # seconds writing batches (the tasks), summed
    first_writing: float  # the first batch's (new producers opened: exactly once's fixed cost)
    median_writing: float  # the median of the others'
    in_batches: float  # seconds inside foreachBatch (writing, checkpoint, markers), summed

    def per_thousand(self, count: int) -> float:
        """``count`` per 1,000 of its batches."""
        return 1000 * count / max(self.batches, 1)


def lost_tasks(spark: Any, query: Any) -> int:
    """Failed task attempts of the stream's jobs (its job group is the query's run id)."""
    tracker = spark.sparkContext.statusTracker()
    failed = 0
    for job in tracker.getJobIdsForGroup(str(query.runId)):
        info = tracker.getJobInfo(job)
        for stage in info.stageIds if info is not None else ():
            stage_info = tracker.getStageInfo(stage)
            failed += stage_info.numFailedTasks if stage_info is not None else 0
    return failed


def read_committed(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    """Every ``(key, value)`` of ``topic`` a read_committed reader sees, to its end."""
    consumer = range_reader({"bootstrap.servers": bootstrap}, f"bench-{topic}")
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        out = []
        for p in partitions:
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            for m in read_range(consumer, SourcePartition(topic, p), 0, high):
                out.append((m.key(), m.value()))
        return out
    finally:
        consumer.close()


def drain(
    spark: Any,
    bootstrap: str,
    source: str,
    name: str,
    *,
    delivery: str,
    where: str | None,
    most: int,
) -> Drained:
    """A new changefeed ``name`` drains ``source`` (``most`` records per batch) to its end."""
    config = _config(
        bootstrap,
        name,
        source,
        None,
        delivery,
        where=where,
        trigger={"available_now": True},
        max_offsets_per_trigger=most,
    )
    changefeed = Changefeed(config, spark)
    started = time.perf_counter()
    changefeed.run()
    stats, query = changefeed.stats, changefeed.query
    seconds = (stats.stream_ended or time.perf_counter()) - (stats.stream_started or started)

    def transactions(outcome: str) -> int:
        labels = {"changefeed": name, "outcome": outcome}
        sample = changefeed.metrics.registry.get_sample_value(
            "highwater_transactions_total", labels
        )
        return int(sample or 0)

    writes = [w for w, _ in stats.batch_seconds]
    out = read_committed(bootstrap, f"{name}.orders")
    counted = collections.Counter(kv for kv in out if kv[0] is not None)
    return Drained(
        seconds,
        len(stats.batch_seconds),
        transactions("committed"),
        transactions("aborted"),
        0 if query is None else lost_tasks(spark, query),
        len(out),
        sum(n - 1 for n in counted.values()),
        sum(writes),
        writes[0] if writes else 0.0,
        statistics.median(writes[1:]) if len(writes) > 1 else 0.0,
        sum(b for _, b in stats.batch_seconds),
    )


def delivery_part(spark: Any, bootstrap: str, rows: int, partitions: int, most: int) -> None:
    """Exactly once beside at least once, per path, on the cluster ``spark`` runs on."""
    source = "cluster.orders"
    spec = GeneratorSpec(topic=source, rows=rows, partitions=partitions, resolved_every=10_000)
    report = write(spec, {"bootstrap.servers": bootstrap})
    print(
        f"delivery on the cluster: {report.total:,} changes on {partitions} partitions, "
        f"{most:,} per batch",
        flush=True,
    )
    paths = {"walk": None, "loop": "order_id IS NOT NULL"}  # the where: every record in Python
    for path, where in paths.items():
        for delivery in ("at_least_once", "exactly_once"):  # the executors' JVMs warmed for both
            drain(
                spark,
                bootstrap,
                source,
                f"warm-{path}-{delivery.replace('_', '-')}",
                delivery=delivery,
                where=where,
                most=most,
            )
        runs = {}
        for delivery in ("at_least_once", "exactly_once"):
            name = f"{path}-{delivery.replace('_', '-')}"
            done = runs[delivery] = drain(
                spark, bootstrap, source, name, delivery=delivery, where=where, most=most
            )
            print(
                f"  {path:4} {delivery:13}: {done.seconds:6.1f} s, "
                f"{report.total / done.seconds:8,.0f} changes/s, {done.batches} batches, "
                f"transactions {done.committed} committed, {done.aborted} aborted "
                f"({done.per_thousand(done.aborted):.0f} per 1,000 batches), "
                f"{done.lost_tasks} lost tasks ({done.per_thousand(done.lost_tasks):.0f} per "
                f"1,000 batches), {done.records:,} records out, {done.duplicates} duplicates; "
                f"{done.writing:.1f} s writing (the first batch {done.first_writing:.2f} s, the "
                f"others' median {done.median_writing * 1000:.0f} ms), "
                f"{done.in_batches:.1f} s in batches",
                flush=True,
            )
        ratio = runs["at_least_once"].seconds / runs["exactly_once"].seconds
        print(f"  {path:4} exactly once / at least once: {ratio:.2f}", flush=True)
