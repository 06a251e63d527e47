"""The sources part of ``make bench``: each source format against a plain copy of its topic.

Issue 34's measure: a changefeed over a Debezium PostgreSQL topic (``debezium_feed.py``:
``JsonConverter`` with schemas, ~4 KB events, NUMERIC as precise bytes, a composite key),
then over a TiCDC Canal-JSON topic (``canal_feed.py``: one to three rows per event,
watermarks), drains it, side by side with the plain Spark copy of the same topic, round
after round; the ratio of the medians is what the issue's bar (0.9) is about. Printed with
the CPU seconds per million records of each kind of process, so the next step can see where
time goes, and the raw Kafka limit for records of that size.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from pipeline.config import parse_config

from .bench import Run, cpu_seconds, cpu_since, plain_copy, raw_limit, timed
from .canal_feed import CanalFeed
from .debezium_feed import DebeziumFeed, Feed, write_feed


def _config(  # noqa: PLR0917 - one changefeed of the part
    bootstrap: str, name: str, source: str, fmt: str, max_offsets: int, delivery: str
) -> Any:
    """Wrapped JSON with updated and diff, as the native part's, over a ``fmt`` topic."""
    return parse_config(
        {
            "changefeed_id": name,
            "kafka": {"bootstrap_servers": bootstrap},
            # Debezium: no transaction topic, so the rows alone (what the copy compares with)
            "sources": [{"topic": source, "table": "orders", "format": fmt}],
            "cursor": "0.0000000000",
            "sink": {"topic_prefix": f"{name}.", "partitions": 3},
            "encoder": {"updated": True, "diff": True},
            "resolved": {"interval": "1s"},
            "checkpoint": {"min_checkpoint_frequency": "1s"},
            "delivery": delivery,
            "spark": {"trigger": {"available_now": True}, "max_offsets_per_trigger": max_offsets},
        },
        env={},
    )


def _per_million(cpu: dict[str, float], changes: int) -> str:
    return ", ".join(f"{k} {v * 1_000_000 / changes:.0f}" for k, v in cpu.items())


def sources(spark: Any, bootstrap: str, rows: int, rounds: int, max_offsets: int) -> None:
    """Each source format against a plain copy of its topic, both deliveries, side by side."""
    _part(spark, bootstrap, "debezium", DebeziumFeed(), rows, rounds, max_offsets)
    _part(spark, bootstrap, "canal-json", CanalFeed(), rows, rounds, max_offsets)


def _part(  # noqa: PLR0917 - a part of the bench
    spark: Any, bootstrap: str, fmt: str, feed: Feed, rows: int, rounds: int, max_offsets: int
) -> None:
    """One format: its generated topic drained by the copy and the changefeed, round by round."""
    tag = fmt.replace("-", "")
    source = f"bench.{tag}.orders"
    started = time.perf_counter()
    size = write_feed(feed, source, rows, {"bootstrap.servers": bootstrap})
    print(
        f"generated {rows} {fmt} records ({size / rows:,.0f} bytes each, key and value) "
        f"in {time.perf_counter() - started:.0f}s",
        flush=True,
    )
    raw_limit(spark, bootstrap, source, rows, feed.partitions)  # records of this size
    plain_copy(spark, bootstrap, source, f"bench.{tag}.warmup", max_offsets)
    timed(
        spark, _config(bootstrap, f"bench-{tag}-warmup", source, fmt, max_offsets, "at_least_once")
    )
    copies: list[float] = []
    runs: dict[str, list[float]] = {"at_least_once": [], "exactly_once": []}
    for n in range(rounds):
        before = cpu_seconds()
        copy = plain_copy(spark, bootstrap, source, f"bench.{tag}.copy{n}", max_offsets)
        copies.append(copy.seconds)
        print(
            f"round {n}: copy {rows / copy.seconds:,.0f} records/s; cpu s per 1M: "
            f"{_per_million(cpu_since(before), rows)}",
            flush=True,
        )
        for delivery, seconds in runs.items():
            before = cpu_seconds()
            name = f"bench-{tag}-{delivery.replace('_', '-')}{n}"
            run: Run = timed(spark, _config(bootstrap, name, source, fmt, max_offsets, delivery))
            seconds.append(run.seconds)
            print(
                f"  {fmt} {delivery}: {rows / run.seconds:,.0f} records/s, ratio to the copy "
                f"{copy.seconds / run.seconds:.2f}; cpu s per 1M: "
                f"{_per_million(cpu_since(before), rows)}\n    per batch: {run.per_batch()}",
                flush=True,
            )
    copy_rate = rows / statistics.median(copies)
    text = ", ".join(
        f"{d} {rows / statistics.median(s):,.0f} records/s, ratio "
        f"{rows / statistics.median(s) / copy_rate:.2f}"
        for d, s in runs.items()
    )
    print(
        f"{fmt.upper()}: plain copy {copy_rate:,.0f} records/s | {text} "
        f"(median of {rounds}, {rows} records, maxOffsetsPerTrigger {max_offsets})",
        flush=True,
    )
