"""The initial-scan benchmark behind ``make bench-scan`` (numbers for ``docs/benchmarks.md``).

The generator writes a history of ``keys`` keys with about ``versions`` versions each (inserts,
updates, a few deletes) on 12 partitions, with markers. Then, in one SparkSession,
alternately for ``rounds`` rounds:

* **copy**: a plain Spark batch read of the whole topic written back to Kafka (every record,
  key and value as they are): what reading and writing the topic costs;
* **scan**: a changefeed with ``initial_scan: only`` (wrapped JSON with ``updated`` and
  ``mvcc_timestamp``): the snapshot of every live key at the statement time.

Both read the same records; the copy writes all of them, the scan one row per live key. It
prints, per round, the seconds, the records read per second, the snapshot rows per second,
and the ratio of the scan's read rate to the copy's (target: at least 1.0, issue 34), with the CPU
seconds each kind of process used.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from pipeline.config import SparkConfig, parse_config
from pipeline.core.coordinator.changefeed import Changefeed
from pipeline.runtime.session import build_session
from sinks.admin import ensure_topics

from .bench import cpu_seconds, cpu_since, drop_topics, read_topic
from .broker import EmbeddedKafka
from .generator import GeneratorSpec, write

PARTITIONS = 12


def batch_copy(spark: Any, bootstrap: str, source: str, target: str) -> float:
    """A plain Spark batch read of ``source`` written to ``target``; seconds taken."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    ensure_topics({"bootstrap.servers": bootstrap}, {target: 3})
    started = time.perf_counter()
    (
        read_topic(spark, bootstrap, source)
        .select(F.lit(target).alias("topic"), "key", "value")
        .write.mode("append")
        .format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.acks", "all")
        .save()
    )
    return time.perf_counter() - started


def scan(spark: Any, bootstrap: str, source: str, name: str) -> tuple[float, int]:
    """The changefeed's initial scan (``only``) of ``source``; (seconds, rows emitted)."""
    config = parse_config(
        {
            "changefeed_id": name,
            "kafka": {"bootstrap_servers": bootstrap},
            "sources": [{"topic": source, "table": "orders"}],
            "sink": {"topic_prefix": f"{name}.", "partitions": 3},
            "encoder": {"updated": True, "mvcc_timestamp": True},
            "initial_scan": "only",
        },
        env={},
    )
    changefeed = Changefeed(config, spark)
    started = time.perf_counter()
    changefeed.run()
    return time.perf_counter() - started, changefeed.stats.scan_rows


def history(bootstrap: str, spec: GeneratorSpec) -> int:
    """Write the history unless the topic holds it already (a reused broker); its records."""
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-scan"})
    try:
        topic = consumer.list_topics(spec.topic, timeout=30).topics[spec.topic]
        held = 0
        if topic.error is None:
            for p in topic.partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(spec.topic, p), 30)
                held += high - low
    finally:
        consumer.close()
    if held >= spec.rows:
        print(f"HISTORY: {held:,} records on {spec.topic} already", flush=True)
        return held
    started = time.perf_counter()
    report = write(spec, {"bootstrap.servers": bootstrap})
    print(
        f"HISTORY: {report.total:,} changes ({report.inserts:,} keys inserted, "
        f"{report.updates:,} updates, {report.deletes:,} deletes) and "
        f"{report.markers:,} markers on {PARTITIONS} partitions, written in "
        f"{time.perf_counter() - started:.0f} s",
        flush=True,
    )
    return report.total + report.markers


def drop_outputs(bootstrap: str) -> None:
    """Delete the rounds' output topics, so every round meets the same broker."""
    if drop_topics(bootstrap, ("bench.copy", "bench-scan")):
        time.sleep(5)  # let the broker remove the logs


def main(argv: list[str] | None = None) -> int:
    """Generate the history on a fresh embedded broker, then copy and scan it side by side."""
    parser = argparse.ArgumentParser(prog="python -m pipeline.dev.bench_scan")
    parser.add_argument("--keys", type=int, default=2_100_000)
    parser.add_argument("--versions", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--bootstrap-servers", help="use this broker and its bench.history topic if written"
    )
    args = parser.parse_args(argv)
    deletes = 0.01
    spec = GeneratorSpec(
        topic="bench.history",
        rows=int(args.keys * args.versions),
        partitions=PARTITIONS,
        update_ratio=1 - 1 / args.versions - deletes,
        delete_ratio=deletes,
        resolved_every=50_000,
    )
    with tempfile.TemporaryDirectory(prefix="highwater-bench-scan-") as scratch:
        broker = None
        if args.bootstrap_servers is None:
            broker = EmbeddedKafka(Path(scratch) / "kafka", heap="2g")
            bootstrap = broker.start().bootstrap_servers
        else:
            bootstrap = args.bootstrap_servers
        try:
            records = history(bootstrap, spec)
            spark = build_session(
                SparkConfig(master="local[2]", conf={"spark.driver.memory": "4g"}), "bench-scan"
            )
            ratios: list[float] = []
            for round_ in range(1, args.rounds + 1):
                drop_outputs(bootstrap)
                suffix = f"{round_}-{uuid.uuid4().hex[:6]}"
                before = cpu_seconds()
                copy_seconds = batch_copy(spark, bootstrap, spec.topic, f"bench.copy{suffix}")
                copy_cpu = cpu_since(before)
                before = cpu_seconds()
                scan_seconds, rows = scan(spark, bootstrap, spec.topic, f"bench-scan{suffix}")
                scan_cpu = cpu_since(before)
                ratio = copy_seconds / scan_seconds
                ratios.append(ratio)
                print(
                    f"ROUND {round_}: copy {copy_seconds:.1f} s = {records / copy_seconds:,.0f} "
                    f"records/s (cpu {copy_cpu}) | scan {scan_seconds:.1f} s = "
                    f"{records / scan_seconds:,.0f} records/s, {rows:,} snapshot rows = "
                    f"{rows / scan_seconds:,.0f} rows/s (cpu {scan_cpu}) | ratio {ratio:.2f}",
                    flush=True,
                )
            _print_ratio(ratios)
            spark.stop()
        finally:
            if broker is not None:
                broker.stop()
    return 0


def _print_ratio(ratios: list[float]) -> None:
    if ratios:
        print(
            f"RATIO: median {statistics.median(ratios):.2f} over {len(ratios)} rounds "
            f"({', '.join(f'{r:.2f}' for r in ratios)}); target 1.0",
            flush=True,
        )


if __name__ == "__main__":
    sys.exit(main())
