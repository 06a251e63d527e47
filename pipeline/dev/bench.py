"""The changefeed benchmark behind ``make bench`` (numbers for ``docs/benchmarks.md``).

1. **Throughput.** The generator writes N source changes on 12 partitions (``--partitions``).
   Then, in one SparkSession, a plain Spark Kafka-to-Kafka copy of that topic and the
   changefeed (wrapped JSON with ``updated`` and ``diff``) each drain it with the same
   trigger (``available_now``, same ``maxOffsetsPerTrigger``), alternately, ``rounds``
   times, each timed from its streaming query's start to its end, the changefeed's last
   checkpoint and markers included (a new changefeed's set-up before its query, ~3 s of
   topic, checkpoint and fence round trips, and its teardown after it are printed beside
   it). It prints rows/s for both and the ratio (target: the changefeed reaches 0.9 of the
   copy), the Avro changefeed's rows/s, and per batch where the time went (Spark's phases;
   the changefeed's write and its driver work).
2. **Raw limit.** Kafka's own ProducerPerformance and ConsumerPerformance on the same broker,
   same partitions and record size: what the machine's Kafka takes and gives.
3. **Resolved lag.** A generator process writes at a steady rate with markers every
   ``marker_every`` changes while the changefeed runs with a 1 s trigger; for every marker
   the changefeed emits, lag = wall time at emission minus the marker's HLC wall time.
   It prints p50/p99, and the checkpoint write time p50/p99.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from encoders.avro import AvroEncoder, Framing
from pipeline.config import SparkConfig, parse_config
from pipeline.core.batch.contract import BatchPlan
from pipeline.core.batch.loop import kafka_records
from pipeline.core.batch.queries import row_type
from pipeline.core.coordinator.changefeed import Changefeed
from pipeline.runtime.session import build_session
from schemas.avro import OutputSchemas
from sinks.admin import TRANSACTION_STATE, ensure_topics

from .bench_figures import (
    MemoryPeaks,
    megabytes_per_second,
    per_million,
    process_kind,
    topic_bytes,
)
from .broker import EmbeddedKafka
from .cluster import KafkaCluster
from .generator import GeneratorSpec, write
from .kafka_tools import run_tool
from .registry import EmbeddedRegistry
from .spark_cluster import SparkCluster

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SOURCE_BATCH = 20_000  # the sources part's maxOffsetsPerTrigger: ~90 MB of Debezium events


def cpu_seconds() -> dict[int, tuple[str, float]]:
    """CPU seconds used so far by each process on this machine, and its kind (Linux /proc).

    On two shared cores, throughput is CPU: the side-by-side numbers say where it goes.
    """
    found: dict[int, tuple[str, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        used = (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
        found[int(entry.name)] = (process_kind(command), used)
    return found


def task_seconds(pid: int) -> float:
    """CPU seconds so far of the Spark JVM ``pid``'s task threads (Linux /proc).

    What the tasks themselves cost (the walk's reading, encoding and sends; the copy's), without
    the broker, the producers' network threads or the JIT: steadier than a run's time on two
    shared cores. A task thread that ended meanwhile is not seen (Spark keeps them 60 s idle).
    """
    total = 0.0
    for thread in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (thread / "stat").read_text()
        except OSError:
            continue
        if stat[stat.index("(") + 1 : stat.rindex(")")].startswith("Executor task"):
            fields = stat[stat.rindex(")") + 2 :].split()
            total += (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
    return total


def cpu_since(before: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds per kind of process since ``before`` (:func:`cpu_seconds`).

    By process: one that ended meanwhile is left out (its last seconds are not seen), so a
    part never shows less than nothing.
    """
    groups: dict[str, float] = {}
    for pid, (kind, used) in cpu_seconds().items():
        earlier = before.get(pid)
        spent = used - (earlier[1] if earlier is not None and earlier[0] == kind else 0.0)
        groups[kind] = groups.get(kind, 0.0) + spent
    return {k: round(v, 1) for k, v in sorted(groups.items())}


@dataclass(frozen=True)
class Run:
    """One timed drain: seconds of its stream, and where each batch's time went."""

    seconds: float
    triggers: list[dict[str, int]]  # Spark's durationMs per trigger (latestOffset, addBatch, …)
    setup: float = 0.0  # a changefeed's set-up before its stream (topics, checkpoint, fence)
    teardown: float = 0.0  # ... and after it: the last status, clients and endpoint closed
    # a changefeed's batches: (seconds writing, seconds of the whole foreachBatch call)
    batches: list[tuple[float, float]] = field(default_factory=list)
    transactions: int = 0  # delivery: exactly_once: the rows' transactions committed

    PHASES = ("latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets")

    def per_batch(self) -> str:
        """Mean ms per batch of Spark's phases; a changefeed's addBatch split in two.

        The write is Spark jobs on the executors; the rest of addBatch is the driver's own
        work (plan, frontier, checkpoint, markers): what the capacity model says grows
        with the partition count and bounds the batch rate.
        """
        batches = [t for t in self.triggers if t.get("addBatch")]
        if not batches:
            return "no batches"
        means = [(k, statistics.mean(t.get(k, 0) for t in batches)) for k in self.PHASES]
        means.append(("trigger", statistics.mean(t.get("triggerExecution", 0) for t in batches)))
        text = f"{len(batches)} batches, ms each: " + ", ".join(f"{k} {v:.0f}" for k, v in means)
        if self.batches:
            write = statistics.mean(w for w, _ in self.batches) * 1000
            rest = statistics.mean(whole - w for w, whole in self.batches) * 1000
            text += f" (addBatch = write {write:.0f} + driver {rest:.0f})"
        return text


def plain_copy(spark: Any, bootstrap: str, source: str, target: str, max_offsets: int) -> Run:
    """A plain Spark Structured Streaming copy of ``source`` to ``target``."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    ensure_topics({"bootstrap.servers": bootstrap}, {target: 3})
    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        query = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("kafka.fetch.max.wait.ms", "20")
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(max_offsets))
            .load()
            .select(F.lit(target).alias("topic"), "key", "value")
            .writeStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("kafka.acks", "all")
            .option("checkpointLocation", scratch)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        seconds = time.perf_counter() - started
        return Run(seconds, [dict(p.durationMs) for p in query.recentProgress])


def drop_topics(bootstrap: str, prefixes: tuple[str, ...]) -> list[str]:
    """Delete the topics named with any of ``prefixes`` (runs done with), and return them.

    So the runs after them meet the same broker: without it a part's finished runs leave
    gigabytes of output in the page cache, written back to disk by the kernel while later runs
    are timed, and a run that writes more bytes (JSON out) slows the runs after it more.
    """
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415

    admin = AdminClient({"bootstrap.servers": bootstrap})
    ours = [t for t in admin.list_topics(timeout=30).topics if t.startswith(prefixes)]
    for future in admin.delete_topics(ours, operation_timeout=60).values() if ours else []:
        future.result()
    return ours


ORDERS_SCHEMA = Path(__file__).resolve().parents[2] / "examples" / "orders.avsc"


def _config(
    bootstrap: str,
    changefeed_id: str,
    source: str,
    avro: str | None = None,
    delivery: str = "at_least_once",
    *,
    where: str | None = None,
    **spark: Any,
) -> Any:
    """The benchmark's changefeed: wrapped JSON with updated and diff.

    With ``avro`` (a registry URL), the same envelope in Avro against that registry; with
    ``where``, only the rows it keeps (a CDC query: every record takes the Python loop).
    """
    encoder: dict[str, Any] = {"updated": True, "diff": True}
    if avro is not None:
        encoder |= {"format": "avro", "schema_registry": {"url": avro}}
    if where is not None:
        encoder |= {"where": where}
    return parse_config(
        {
            "changefeed_id": changefeed_id,
            "kafka": {"bootstrap_servers": bootstrap},
            "sources": [
                {
                    "topic": source,
                    "table": "orders",
                    "table_schema": str(ORDERS_SCHEMA),
                    "primary_key": ["region", "order_id"],
                }
            ],
            "cursor": "0.0000000000",  # the whole history, as the plain copy
            "sink": {"topic_prefix": f"{changefeed_id}.", "partitions": 3},
            "encoder": encoder,
            "resolved": {"interval": "1s"},
            "checkpoint": {"min_checkpoint_frequency": "1s"},
            "delivery": delivery,
            "spark": spark,
        },
        env={},
    )


def _changefeed(
    spark: Any,
    bootstrap: str,
    name: str,
    source: str,
    max_offsets: int,
    *,
    avro: str | None = None,
    delivery: str = "at_least_once",
) -> Run:
    """A new changefeed drains ``source``.

    The stream is timed as the copy is, from the streaming query's start to the end (the
    last checkpoint and markers included); the set-up before it (topics, checkpoint,
    safepoint, the one-writer fence) and the teardown after it (the last status, clients
    and the metrics endpoint closed) are per-run costs, reported beside it.
    """
    config = _config(
        bootstrap,
        name,
        source,
        avro,
        delivery,
        trigger={"available_now": True},
        max_offsets_per_trigger=max_offsets,
    )
    return timed(spark, config)


def timed(spark: Any, config: Any) -> Run:
    """A new changefeed of ``config`` runs to its end: its stream timed (see ``_changefeed``)."""
    name = config.changefeed_id
    changefeed = Changefeed(config, spark)
    started = time.perf_counter()
    changefeed.run()
    ended = time.perf_counter()
    stats, query = changefeed.stats, changefeed.query
    stream_started = stats.stream_started or started
    stream_ended = stats.stream_ended or ended
    return Run(
        stream_ended - stream_started,
        [] if query is None else [dict(p.durationMs) for p in query.recentProgress],
        setup=stream_started - started,
        teardown=ended - stream_ended,
        batches=list(stats.batch_seconds),
        transactions=int(
            changefeed.metrics.registry.get_sample_value(
                "highwater_transactions_total", {"changefeed": name, "outcome": "committed"}
            )
            or 0
        ),
    )


def read_topic(spark: Any, bootstrap: str, topic: str) -> Any:
    """The whole of ``topic`` as a Spark batch DataFrame."""
    return (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def throughput(
    spark: Any,
    bootstrap: str,
    rows: int,
    rounds: int,
    max_offsets: int,
    *,
    registry: str,
    partitions: int = 12,
) -> str:
    """Part 1: rows/s of the plain copy, the JSON changefeed and the Avro one, side by side.

    Returns the source topic.
    """
    source = "bench.orders"
    started = time.perf_counter()
    report = write(
        GeneratorSpec(
            topic=source, rows=rows, partitions=partitions, resolved_every=10_000, seed=1
        ),
        {"bootstrap.servers": bootstrap},
    )
    records = report.total + report.markers
    print(
        f"generated {report.total} changes + {report.markers} markers on {partitions} partitions "
        f"in {time.perf_counter() - started:.0f}s",
        flush=True,
    )
    # JIT, consumer pools: one of each before the rounds, so no round pays for a cold JVM
    plain_copy(spark, bootstrap, source, "bench.warmup", max_offsets)
    _changefeed(spark, bootstrap, "bench-warmup", source, max_offsets)
    source_bytes = topic_bytes(bootstrap, source)
    copies, setups, teardowns = [], [], []
    kinds = ("json", "json exactly_once", "avro", "avro exactly_once")
    seconds: dict[str, list[float]] = {kind: [] for kind in kinds}
    state_records, transactions, exactly_once_seconds = 0, 0, 0.0
    for n in range(rounds):
        before = cpu_seconds()
        copy = plain_copy(spark, bootstrap, source, f"bench.copy{n}", max_offsets)
        cpu = cpu_since(before)
        print(
            f"round {n}: copy {records / copy.seconds:,.0f} records/s, "
            f"{megabytes_per_second(source_bytes, copy.seconds):.1f} MB/s read, "
            f"{megabytes_per_second(topic_bytes(bootstrap, f'bench.copy{n}'), copy.seconds):.1f}"
            f" MB/s written, {per_million(cpu, report.total):.0f} CPU s per million changes",
            flush=True,
        )
        print(f"  cpu seconds, copy: {cpu}\n  per batch: {copy.per_batch()}")
        copies.append(copy.seconds)
        for kind in kinds:
            delivery = "exactly_once" if kind.endswith("exactly_once") else "at_least_once"
            name = f"bench-{kind.replace(' ', '-').replace('_', '-')}{n}"
            state = transaction_state_records(bootstrap)
            before = cpu_seconds()
            run = _changefeed(
                spark,
                bootstrap,
                name,
                source,
                max_offsets,
                avro=registry if kind.startswith("avro") else None,
                delivery=delivery,
            )
            cpu = cpu_since(before)
            seconds[kind].append(run.seconds)
            if delivery == "exactly_once":
                state_records += transaction_state_records(bootstrap) - state
                transactions += run.transactions
                exactly_once_seconds += run.seconds
            if kind == "json":
                setups.append(run.setup)
                teardowns.append(run.teardown)
            written = topic_bytes(bootstrap, f"{name}.orders")
            print(
                f"  {kind}: {report.total / run.seconds:,.0f} rows/s, "
                f"{megabytes_per_second(source_bytes, run.seconds):.1f} MB/s read, "
                f"{megabytes_per_second(written, run.seconds):.1f} MB/s written, "
                f"{per_million(cpu, report.total):.0f} CPU s per million changes (set-up "
                f"{run.setup:.1f}s before it, teardown {run.teardown:.1f}s after), ratio to the "
                f"copy {copy.seconds / run.seconds:.2f}, {run.transactions} transactions\n"
                f"    cpu seconds: {cpu}\n    per batch: {run.per_batch()}",
                flush=True,
            )
    copy_rate = records / statistics.median(copies)
    rate = {kind: report.total / statistics.median(s) for kind, s in seconds.items()}
    feeds = seconds["json"]
    print(
        f"THROUGHPUT plain copy {copy_rate:,.0f} records/s | changefeed {rate['json']:,.0f} "
        f"rows/s | ratio {rate['json'] / copy_rate:.2f} (median of {rounds}: "
        f"{', '.join(f'{c / f:.2f}' for c, f in zip(copies, feeds, strict=True))}; "
        f"{rows} changes, maxOffsetsPerTrigger {max_offsets})\n"
        f"SET-UP of a new changefeed before its stream: median {statistics.median(setups):.1f}s, "
        f"TEARDOWN after it: median {statistics.median(teardowns):.1f}s\n"
        f"AVRO changefeed {rate['avro']:,.0f} rows/s | avro/json ratio "
        f"{rate['avro'] / rate['json']:.2f}\n"
        f"EXACTLY ONCE json {rate['json exactly_once']:,.0f} rows/s, "
        f"{rate['json exactly_once'] / rate['json']:.2f} of at least once (rounds: "
        f"{_ratios(seconds['json'], seconds['json exactly_once'])}) | avro "
        f"{rate['avro exactly_once']:,.0f} rows/s, "
        f"{rate['avro exactly_once'] / rate['avro']:.2f} of at least once (rounds: "
        f"{_ratios(seconds['avro'], seconds['avro exactly_once'])})\n"
        f"TRANSACTIONS {transactions / exactly_once_seconds:,.1f}/s committed while writing "
        f"exactly once ({transactions} in {exactly_once_seconds:.0f}s); the coordinators wrote "
        f"{state_records / exactly_once_seconds:,.1f} records/s to {TRANSACTION_STATE}",
        flush=True,
    )
    return source


def raw_limit(spark: Any, bootstrap: str, source: str, records: int, partitions: int) -> None:
    """Part 0: what this broker takes and gives on this machine, by Kafka's own perf tools.

    Same partitions and record size (the source's mean value size) as the throughput
    part, ``acks=all`` and idempotence as Spark's writer; each result reads as a fraction
    of these.
    """
    from pyspark.sql import functions as F  # noqa: PLC0415

    size = read_topic(spark, bootstrap, source).select(F.avg(F.length("value"))).first()[0]
    ensure_topics({"bootstrap.servers": bootstrap}, {"bench.perf": partitions})
    produced = run_tool(
        "producer-perf-test",
        [
            "--topic", "bench.perf", "--num-records", str(records),
            "--record-size", str(round(size)), "--throughput", "-1",
            "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all",
            "enable.idempotence=true",
        ],
        None,
        timeout=600,
    )  # fmt: skip
    consumed = run_tool(
        "consumer-perf-test",
        ["--topic", "bench.perf", "--messages", str(records), "--timeout", "60000"],
        bootstrap,
        timeout=600,
    )
    sent = produced.stdout.strip().splitlines()[-1]  # "N records sent, R records/sec (…)"
    header, row = consumed.stdout.strip().splitlines()[-2:]  # CSV: …, nMsg.sec, …
    fields = dict(zip((h.strip() for h in header.split(",")), row.split(","), strict=False))
    print(
        f"RAW KAFKA LIMIT ({records:,} records of {size:.0f} bytes, {partitions} partitions): "
        f"produced "
        f"{float(sent.split(',')[1].split()[0]):,.0f} records/s (acks=all, idempotent), "
        f"consumed {float(fields['nMsg.sec']):,.0f} records/s",
        flush=True,
    )


def avro_encoders(spark: Any, bootstrap: str, source: str) -> None:
    """Part 3: the two ways to encode Avro, side by side on the same records (``noop`` sink).

    JVM: ``from_json`` with the declared types, spark-avro's ``to_avro`` of the envelope and
    key structs, the 5-byte header concatenated. Python: the changefeed's Arrow loop with the
    fastavro encoder (decode, floor, encode).
    """
    from pyspark.sql import Observation  # noqa: PLC0415
    from pyspark.sql import functions as F  # noqa: PLC0415
    from pyspark.sql.avro.functions import to_avro  # noqa: PLC0415

    config = _config(bootstrap, "bench-encoders", source, "http://unused")
    table = config.sources[0].declared_schema
    schemas = OutputSchemas.of(table, config.encoder)
    framing = Framing.confluent(1, 2, 3)
    raw = read_topic(spark, bootstrap, source)

    def jvm() -> None:
        record = row_type(list(table.record["fields"]))
        p = F.from_json(
            F.col("value").cast("string"), f"after {record}, before {record}, updated string"
        )
        image = F.coalesce(p["after"], p["before"])
        key = F.struct(image["region"].alias("region"), image["order_id"].alias("order_id"))
        envelope = F.struct(
            p["after"].alias("after"), p["before"].alias("before"), p["updated"].alias("updated")
        )
        out = raw.where(F.col("key").isNotNull()).select(
            F.concat(F.lit(framing.key), to_avro(key, json.dumps(schemas.key))).alias("key"),
            F.concat(F.lit(framing.value), to_avro(envelope, json.dumps(schemas.value))).alias(
                "value"
            ),
        )
        out.write.format("noop").mode("overwrite").save()

    def python() -> None:
        encoder = AvroEncoder(schemas, framing, config.encoder, "orders")
        plan = BatchPlan(
            {}, {source: "orders"}, {source: "native"}, {source: "x"}, {source: encoder}, None
        )
        observation = Observation("encoders")
        kafka_records(raw, plan, observation).write.format("noop").mode("overwrite").save()
        _ = observation.get

    timings: dict[str, list[float]] = {"jvm to_avro": [], "python loop + avro encoder": []}
    for _ in range(2):
        for name, run in (("jvm to_avro", jvm), ("python loop + avro encoder", python)):
            started = time.perf_counter()
            run()
            timings[name].append(time.perf_counter() - started)
    print(
        "AVRO ENCODING (noop sink, best of 2): "
        + " | ".join(f"{name} {min(t):.1f}s" for name, t in timings.items()),
        flush=True,
    )


def _ratios(alo: list[float], eo: list[float]) -> str:
    return ", ".join(f"{a / e:.2f}" for a, e in zip(alo, eo, strict=True))


def transaction_state_records(bootstrap: str) -> int:
    """How many records the transaction coordinators have written to their state topic."""
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-state"})
    try:
        topic = consumer.list_topics(TRANSACTION_STATE, timeout=30).topics.get(TRANSACTION_STATE)
        if topic is None or topic.error is not None:
            return 0
        return sum(
            consumer.get_watermark_offsets(TopicPartition(TRANSACTION_STATE, p), timeout=30)[1]
            for p in topic.partitions
        )
    finally:
        consumer.close()


def resolved_lag(
    spark: Any,
    bootstrap: str,
    rate: int,
    seconds: int,
    marker_every: int,
    *,
    delivery: str = "at_least_once",
) -> None:
    """Part 2: resolved lag and checkpoint write time under a steady produce rate."""
    source = f"bench.steady.{delivery}"
    write(GeneratorSpec(topic=source, rows=1, partitions=12), {"bootstrap.servers": bootstrap})
    config = _config(
        bootstrap,
        f"bench-lag-{delivery}",
        source,
        None,
        delivery,
        trigger={"processing_time": "1s"},
    )
    changefeed = Changefeed(config, spark)
    runner = threading.Thread(target=changefeed.run, daemon=True)
    runner.start()
    time.sleep(15)  # let the query start before the load does
    generator = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline.cli",
            "dev",
            "generate",
            "--bootstrap-servers",
            bootstrap,
            "--topic",
            source,
            "--rows",
            str(rate * seconds),
            "--partitions",
            "12",
            "--rate",
            str(rate),
            "--resolved-every",
            str(marker_every),
            "--first-order-id",
            "1000000",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    time.sleep(5)
    changefeed.stop_request.set()
    runner.join(120)
    lags = [emitted - ts.wall / 1e9 for emitted, ts in list(changefeed.stats.markers)[1:]]
    writes = [s * 1000 for s in changefeed.stats.checkpoint_seconds]
    print(generator.stderr.strip(), flush=True)
    print(
        f"RESOLVED LAG ({delivery}) at {rate} changes/s, a marker every {marker_every} changes, "
        f"1s trigger: p50 {_percentile(lags, 0.5):.2f}s p99 {_percentile(lags, 0.99):.2f}s "
        f"over {len(lags)} markers",
        flush=True,
    )
    print(
        f"CHECKPOINT WRITE ({delivery}) p50 {_percentile(writes, 0.5):.1f} ms p99 "
        f"{_percentile(writes, 0.99):.1f} ms over {len(writes)} checkpoints",
        flush=True,
    )


def _parser() -> argparse.ArgumentParser:
    """The benchmark's options."""
    parser = argparse.ArgumentParser(prog="highwater dev bench")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)  # rounds vary +-0.1 here
    parser.add_argument("--max-offsets-per-trigger", type=int, default=250_000)
    parser.add_argument(
        "--rates", default="5000,20000", help="changes/s of the resolved-lag part, comma-separated"
    )
    # 170 s gave 99 markers (one at most per resolved interval, once every partition rose)
    parser.add_argument("--seconds", type=int, default=190)
    parser.add_argument("--marker-every", type=int, default=2_500)
    parser.add_argument("--partitions", type=int, default=12, help="of the source topic")
    parser.add_argument(
        "--throughput-only",
        action="store_true",
        help="part 1 only (copy, JSON and Avro changefeeds side by side)",
    )
    parser.add_argument(
        "--sources-only",
        action="store_true",
        help="the sources part only (each source format against a plain copy of its topic)",
    )
    parser.add_argument("--source-rows", type=int, default=200_000, help="of the sources part")
    parser.add_argument(
        "--source-formats",
        default="debezium,debezium-avro,canal-json",
        help="the sources part's formats, comma-separated",
    )
    parser.add_argument(
        "--consumer-only",
        action="store_true",
        help="the consumer library's part only (bench_consumer: windows vs a plain consumer, "
        "apply to PostgreSQL)",
    )
    parser.add_argument(
        "--iceberg-only",
        action="store_true",
        help="the Iceberg applier's part only (bench_iceberg: 5,000 changes/s into 1M orders; "
        "then the Spark engine's, bench_iceberg_spark, on a REST catalog)",
    )
    parser.add_argument(
        "--lag-only",
        action="store_true",
        help="the resolved-lag part only (each of --rates, both deliveries, --seconds each)",
    )
    parser.add_argument(
        "--iceberg-windows", type=int, default=720, help="of the Iceberg part (720 of 5 s: an hour)"
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="on a local cluster (three Kafka nodes, 3 copies; a Spark standalone master with "
        "two one-core workers): exactly once beside at least once per path, then throughput",
    )
    parser.add_argument(
        "--delivery-only",
        action="store_true",
        help="with --cluster: the delivery part only (exactly once beside at least once)",
    )
    return parser


def resolved_lag_parts(
    spark: Any, bootstrap: str, args: argparse.Namespace, peaks: MemoryPeaks
) -> None:
    """The resolved-lag part at each of ``args.rates``, both deliveries."""
    for rate in (int(r) for r in args.rates.split(",")):
        for delivery in ("at_least_once", "exactly_once"):
            with peaks.part(f"resolved lag at {rate:,}/s, {delivery}"):
                resolved_lag(
                    spark,
                    bootstrap,
                    rate,
                    args.seconds,
                    args.marker_every,
                    delivery=delivery,
                )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark on a fresh embedded broker."""
    args = _parser().parse_args(argv)
    from .bench_consumer import apply_part, consumer_part  # noqa: PLC0415 - a part of its own
    from .bench_iceberg import iceberg_part  # noqa: PLC0415 - a part of its own
    from .bench_iceberg_spark import iceberg_spark_part  # noqa: PLC0415 - a part of its own
    from .bench_sources import sources  # noqa: PLC0415 - it builds on this module

    if args.iceberg_only:  # no broker: the windows are built in the part
        iceberg_part(1_000_000, 5_000, 5, args.iceberg_windows, "uniform")
        iceberg_spark_part(1_000_000, 5_000, 5, 24, "uniform")  # a broker and catalog its own
        return 0
    if args.cluster:
        return on_cluster(
            args.rows,
            args.rounds,
            args.max_offsets_per_trigger,
            args.partitions,
            delivery_only=args.delivery_only,
        )
    with tempfile.TemporaryDirectory(prefix="highwater-bench-") as scratch:
        broker = EmbeddedKafka(Path(scratch) / "kafka", heap="2g")
        registry_service = EmbeddedRegistry(Path(scratch) / "registry")
        info = broker.start()
        try:
            spark = build_session(
                SparkConfig(master="local[2]", conf={"spark.driver.memory": "4g"}), "bench"
            )
            registry = registry_service.start()
            only = tuple(args.source_formats.split(","))
            sources_part = partial(
                sources,
                spark,
                info.bootstrap_servers,
                args.source_rows,
                args.rounds,
                SOURCE_BATCH,
                registry.url,
                only,
            )
            if args.sources_only:
                sources_part()
                spark.stop()
                return 0
            if args.consumer_only:
                consumer_part(info.bootstrap_servers, 1_000_000, 3, 6, 5_000)
                apply_part(info.bootstrap_servers, 200_000, 6, 5_000)
                spark.stop()
                return 0
            peaks = MemoryPeaks()
            lag_parts = partial(resolved_lag_parts, spark, info.bootstrap_servers, args, peaks)
            if args.lag_only:
                lag_parts()
                spark.stop()
                return 0
            with peaks.part("throughput (copy, JSON and Avro, both deliveries)"):
                source = throughput(
                    spark,
                    info.bootstrap_servers,
                    args.rows,
                    args.rounds,
                    args.max_offsets_per_trigger,
                    registry=registry.url,
                    partitions=args.partitions,
                )
            if not args.throughput_only:
                raw_limit(spark, info.bootstrap_servers, source, args.rows, args.partitions)
                with peaks.part("sources (Debezium, Canal-JSON, Debezium Avro)"):
                    sources_part()
                avro_encoders(spark, info.bootstrap_servers, source)
                consumer_part(info.bootstrap_servers, 1_000_000, 3, 6, 5_000)
                apply_part(info.bootstrap_servers, 200_000, 6, 5_000)
                iceberg_part(1_000_000, 5_000, 5, args.iceberg_windows, "uniform")
                iceberg_spark_part(1_000_000, 5_000, 5, 24, "uniform")
                lag_parts()
            spark.stop()
        finally:
            registry_service.stop()
            broker.stop()
    return 0


def on_cluster(
    rows: int, rounds: int, max_offsets: int, partitions: int, *, delivery_only: bool = False
) -> int:
    """Delivery and throughput on a three-node Kafka and a standalone master with two workers."""
    from .bench_cluster import delivery_part  # noqa: PLC0415 - it builds on this module

    with tempfile.TemporaryDirectory(prefix="highwater-bench-cluster-") as scratch:
        kafka = KafkaCluster(Path(scratch) / "cluster", heap="1g")
        workers = SparkCluster(Path(scratch) / "cluster", workers=2)
        registry_service = EmbeddedRegistry(Path(scratch) / "registry")
        try:
            bootstrap = kafka.start().bootstrap_servers
            master = workers.start().master_url
            registry = registry_service.start()
            conf = {"spark.driver.memory": "2g", "spark.executor.memory": "1g"}
            spark = build_session(SparkConfig(master=master, conf=conf), "bench-cluster")
            print(f"on {master} (2 workers, 1 core each) and Kafka at {bootstrap}", flush=True)
            peaks = MemoryPeaks()
            with peaks.part("delivery on the cluster"):
                delivery_part(spark, bootstrap, 12_000, 6, 600)
            if delivery_only:
                spark.stop()
                return 0
            with peaks.part("throughput on the cluster"):
                throughput(
                    spark,
                    bootstrap,
                    rows,
                    rounds,
                    max_offsets,
                    registry=registry.url,
                    partitions=partitions,
                )
            spark.stop()
        finally:
            registry_service.stop()
            workers.stop()
            kafka.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
