"""The sources part of ``make bench``: each source format against a plain copy of its topic.

Issue 34's measure: a changefeed over a Debezium PostgreSQL topic (``debezium_feed.py``:
``JsonConverter`` with schemas, ~4 KB events, NUMERIC as precise bytes, a composite key),
then over the same events as ``AvroConverter`` writes them (Confluent's wire format, the
schemas in the bench's registry), then over a TiCDC Canal-JSON topic (``canal_feed.py``: one
to three rows per event, watermarks), drains it, side by side with the plain Spark copy of
the same topic, round after round; the ratio of the medians is what the issue's bar (0.9) is
about. Each format's changefeed writes JSON, then Avro (issue 50: the walk writes Avro from
every source format) of a declared table of primitive columns (decimals as doubles, times as
text), beside the copy. Printed with the CPU seconds per million records of each kind of
process, so the next step can see where time goes, and the raw Kafka limit for records of
that size.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

from pipeline.config import parse_config
from pipeline.core.batch.jvm import driver_pid

from .bench import (
    Run,
    cpu_seconds,
    cpu_since,
    drop_topics,
    plain_copy,
    raw_limit,
    task_seconds,
    timed,
)
from .bench_figures import megabytes_per_second, topic_bytes
from .canal_feed import CanalFeed
from .debezium_feed import DebeziumAvroFeed, DebeziumFeed, Feed, write_feed


def _table(key: dict[str, str], columns: dict[str, str]) -> dict[str, Any]:
    """An orders table (Avro) of ``key`` columns and nullable ``columns``, by Avro type."""
    fields: list[dict[str, Any]] = [{"name": k, "type": t} for k, t in key.items()]
    fields += [{"name": c, "type": ["null", t], "default": None} for c, t in columns.items()]
    return {"type": "record", "name": "orders", "fields": fields}


_TEXT = ("customer", "note", "status", "created_at", "payload")
# The feeds' tables (debezium_feed.py, canal_feed.py) in the primitive types the walk writes.
DEBEZIUM_TABLE = _table(
    {"region": "string", "order_id": "long"},
    {"amount": "double", "ratio": "double", "items": "int", "vip": "boolean"}
    | dict.fromkeys((*_TEXT, "updated_at"), "string"),
)
CANAL_TABLE = _table(
    {"id": "long"},
    {"region": "string", "amount": "double", "ratio": "double", "items": "int", "vip": "long"}
    | dict.fromkeys(_TEXT, "string"),
)


@dataclass(frozen=True)
class Part:
    """A part of the bench: a source format, its generated topic, its registry if Avro.

    ``table``, ``key``: the table Avro output declares (its schema, its primary key).
    """

    label: str
    format: str
    feed: Feed
    table: dict[str, Any]
    key: tuple[str, ...]
    registry: str | None = None


def _config(  # noqa: PLR0917 - one changefeed of the part
    bootstrap: str,
    name: str,
    source: str,
    part: Part,
    max_offsets: int,
    delivery: str,
    avro: str | None = None,
) -> Any:
    """Wrapped JSON with updated and diff, as the native part's, over the part's topic.

    With ``avro`` (a registry URL), the same envelope in Avro, of the part's declared table.
    """
    spec: dict[str, Any] = {"topic": source, "table": "orders", "format": part.format}
    if part.registry is not None:
        spec["schema_registry"] = {"url": part.registry}
    encoder: dict[str, Any] = {"updated": True, "diff": True}
    if avro is not None:
        spec |= {"table_schema": part.table, "primary_key": list(part.key)}
        encoder |= {"format": "avro", "schema_registry": {"url": avro}}
    return parse_config(
        {
            "changefeed_id": name,
            "kafka": {"bootstrap_servers": bootstrap},
            # Debezium: no transaction topic, so the rows alone (what the copy compares with)
            "sources": [spec],
            "cursor": "0.0000000000",
            "sink": {"topic_prefix": f"{name}.", "partitions": 3},
            "encoder": encoder,
            "resolved": {"interval": "1s"},
            "checkpoint": {"min_checkpoint_frequency": "1s"},
            "delivery": delivery,
            "spark": {"trigger": {"available_now": True}, "max_offsets_per_trigger": max_offsets},
        },
        env={},
    )


def _per_million(cpu: dict[str, float], changes: int) -> str:
    return ", ".join(f"{k} {v * 1_000_000 / changes:.1f}" for k, v in cpu.items())


class _Cpu:
    """CPU spent since it was made: by kind of process, and by the Spark JVM's task threads."""

    def __init__(self, jvm: int) -> None:
        self.jvm = jvm
        self.processes = cpu_seconds()
        self.tasks = task_seconds(jvm)

    def per_million(self, rows: int) -> tuple[str, float]:
        """The text printed for a run of ``rows``, and its task threads' seconds per million."""
        tasks = (task_seconds(self.jvm) - self.tasks) * 1_000_000 / rows
        text = _per_million(cpu_since(self.processes), rows)
        return f"{text}; of the spark jvm, its task threads {tasks:.2f}", tasks


PARTS = ("debezium", "debezium-avro", "canal-json")
BATCH_BYTES = 90_000_000  # a batch's source records, at most: smaller records, more per batch


def sources(  # noqa: PLR0917 - the bench's settings
    spark: Any,
    bootstrap: str,
    rows: int,
    rounds: int,
    max_offsets: int,
    registry: str,
    only: tuple[str, ...] = PARTS,
) -> None:
    """Each source format (of ``only``) against a plain copy of its topic, both deliveries."""
    debezium_key = ("region", "order_id")
    for part in (
        Part("debezium", "debezium", DebeziumFeed(), DEBEZIUM_TABLE, debezium_key),
        Part(
            "debezium-avro",
            "debezium",
            DebeziumAvroFeed(registry),
            DEBEZIUM_TABLE,
            debezium_key,
            registry,
        ),
        Part("canal-json", "canal-json", CanalFeed(), CANAL_TABLE, ("id",)),
    ):
        if part.label in only:
            _part(spark, bootstrap, part, rows, rounds, max_offsets, registry)


def _part(  # noqa: PLR0917 - a part of the bench
    spark: Any,
    bootstrap: str,
    part: Part,
    rows: int,
    rounds: int,
    max_offsets: int,
    registry: str,
) -> None:
    """One format: its generated topic drained by the copy and the changefeed, round by round."""
    fmt, tag = part.label, part.label.replace("-", "")
    source = f"bench.{tag}.orders"
    started = time.perf_counter()
    size = write_feed(part.feed, source, rows, {"bootstrap.servers": bootstrap})
    print(
        f"generated {rows} {fmt} records ({size / rows:,.0f} bytes each, key and value) "
        f"in {time.perf_counter() - started:.0f}s",
        flush=True,
    )
    # the same bytes per batch for every format (~90 MB: SOURCE_BATCH Debezium JSON events)
    max_offsets = min(rows, max(max_offsets, BATCH_BYTES * rows // size))
    raw_limit(spark, bootstrap, source, rows, part.feed.partitions)  # records of this size
    plain_copy(spark, bootstrap, source, f"bench.{tag}.warmup", max_offsets)
    # each output's and delivery's code warmed up, as the copy's: the Spark JVM's and the
    # broker's (a fresh broker's JIT compiled its transactional paths during the first
    # exactly-once runs: 0.3-0.8 CPU s of C2 a run, docs/benchmarks.md, session 43)
    for avro in (None, registry):
        for delivery in ("at_least_once", "exactly_once"):
            name = f"bench-{tag}-warmup-{delivery.replace('_', '-')}{'-avro' if avro else ''}"
            timed(spark, _config(bootstrap, name, source, part, max_offsets, delivery, avro))
    # every run's output deleted once measured (here, the warm-ups'): each run meets the same
    # broker, not one still writing back the runs before it (drop_topics)
    drop_topics(bootstrap, (f"bench.{tag}.warmup", f"bench-{tag}-warmup"))
    # JSON, then Avro output (its schemas in the bench's registry), each in both deliveries;
    # every run between two copies of the topic, its ratio taken to their mean: across a run
    # the copy swings by up to 1.7x on this machine, between neighbours by a median 6-12 %
    # (docs/benchmarks.md, session 40)
    kinds = ("at_least_once", "exactly_once", "avro at_least_once", "avro exactly_once")
    copies: list[float] = []
    seconds: dict[str, list[float]] = {kind: [] for kind in kinds}
    ratios: dict[str, list[float]] = {kind: [] for kind in kinds}
    tasks: dict[str, list[float]] = {kind: [] for kind in ("copy", *kinds)}
    jvm = driver_pid(spark)

    def copy(n: int, after: str) -> float:
        cpu = _Cpu(jvm)
        target = f"bench.{tag}.copy{n}.{len(copies)}"
        done = plain_copy(spark, bootstrap, source, target, max_offsets)
        copies.append(done.seconds)
        text, task = cpu.per_million(rows)
        drop_topics(bootstrap, (target,))
        tasks["copy"].append(task)
        print(
            f"  copy ({after}): {rows / done.seconds:,.0f} records/s, "
            f"{megabytes_per_second(size, done.seconds):.1f} MB/s read; cpu s per 1M: {text}",
            flush=True,
        )
        return done.seconds

    for n in range(rounds):
        # the kinds' order turns each round: a kind's place in it moves its ratio (~0.1 on
        # Canal-JSON, docs/benchmarks.md), so no kind is always first or always last
        order = kinds[n % len(kinds) :] + kinds[: n % len(kinds)]
        print(f"round {n}:", flush=True)
        last = copy(n, "the round's first")
        for kind in order:
            meter = _Cpu(jvm)
            delivery, avro = kind.split()[-1], registry if kind.startswith("avro") else None
            name = f"bench-{tag}-{kind.replace('_', '-').replace(' ', '-')}{n}"
            config = _config(bootstrap, name, source, part, max_offsets, delivery, avro)
            run: Run = timed(spark, config)
            cpu, task = meter.per_million(rows)
            tasks[kind].append(task)
            written = topic_bytes(bootstrap, f"{name}.orders")
            drop_topics(bootstrap, (f"{name}.",))
            nearest = copy(n, f"after {kind}")
            ratio = (last + nearest) / 2 / run.seconds
            last = nearest
            seconds[kind].append(run.seconds)
            ratios[kind].append(ratio)
            print(
                f"  {fmt} {kind}: {rows / run.seconds:,.0f} records/s, "
                f"{megabytes_per_second(size, run.seconds):.1f} MB/s read, "
                f"{megabytes_per_second(written, run.seconds):.1f} MB/s written (as stored), "
                f"ratio to the copies either side {ratio:.2f}; cpu s per 1M: {cpu}"
                f"\n    per batch: {run.per_batch()}",
                flush=True,
            )
    copy_rate = rows / statistics.median(copies)
    text = ", ".join(
        f"{kind} {rows / statistics.median(seconds[kind]):,.0f} records/s, ratio "
        f"{statistics.median(ratios[kind]):.2f} (rounds "
        f"{' '.join(f'{r:.2f}' for r in ratios[kind])})"
        for kind in kinds
    )
    print(
        f"{fmt.upper()}: plain copy {copy_rate:,.0f} records/s | {text} "
        f"(ratios: each run to the mean of the copies either side, median of {rounds}; "
        f"{rows} records, maxOffsetsPerTrigger {max_offsets}) | the Spark JVM's task threads, "
        "cpu s per 1M (median): "
        + ", ".join(f"{kind} {statistics.median(t):.2f}" for kind, t in tasks.items()),
        flush=True,
    )
    drop_topics(bootstrap, (f"bench.{tag}.",))  # its source: the next part meets a clean broker
