"""The sources part of ``make bench``: each source format against a plain copy of its topic.

Issue 34's measure: a changefeed over a Debezium PostgreSQL topic (``debezium_feed.py``:
``JsonConverter`` with schemas, ~4 KB events, NUMERIC as precise bytes, a composite key)
drains it, side by side with the plain Spark copy of the same topic, round after round; the
ratio of the medians is what the issue's bar (0.9) is about. Printed with the CPU seconds
per million changes of each kind of process, so the next step can see where time goes.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from pipeline.config import parse_config

from .bench import Run, cpu_seconds, cpu_since, plain_copy, raw_limit, timed
from .debezium_feed import DebeziumFeed, write_feed


def _config(bootstrap: str, name: str, source: str, max_offsets: int, delivery: str) -> Any:
    """Wrapped JSON with updated and diff, as the native part's, over a Debezium topic."""
    return parse_config(
        {
            "changefeed_id": name,
            "kafka": {"bootstrap_servers": bootstrap},
            # no transaction topic: no markers, the rows alone (what the copy compares with)
            "sources": [{"topic": source, "table": "orders", "format": "debezium"}],
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
    """Debezium JSON with schemas: copy and changefeed (both deliveries) side by side."""
    source = "bench.dbz.orders"
    started = time.perf_counter()
    feed = DebeziumFeed()
    size = write_feed(feed, source, rows, {"bootstrap.servers": bootstrap})
    print(
        f"generated {rows} Debezium events ({size / rows:,.0f} bytes each, key and value) "
        f"in {time.perf_counter() - started:.0f}s",
        flush=True,
    )
    raw_limit(spark, bootstrap, source, rows, feed.partitions)  # records of this size
    plain_copy(spark, bootstrap, source, "bench.dbz.warmup", max_offsets)
    timed(spark, _config(bootstrap, "bench-dbz-warmup", source, max_offsets, "at_least_once"))
    copies: list[float] = []
    runs: dict[str, list[float]] = {"at_least_once": [], "exactly_once": []}
    for n in range(rounds):
        before = cpu_seconds()
        copy = plain_copy(spark, bootstrap, source, f"bench.dbz.copy{n}", max_offsets)
        copies.append(copy.seconds)
        print(
            f"round {n}: copy {rows / copy.seconds:,.0f} records/s; cpu s per 1M: "
            f"{_per_million(cpu_since(before), rows)}",
            flush=True,
        )
        for delivery, seconds in runs.items():
            before = cpu_seconds()
            name = f"bench-dbz-{delivery.replace('_', '-')}{n}"
            run: Run = timed(spark, _config(bootstrap, name, source, max_offsets, delivery))
            seconds.append(run.seconds)
            print(
                f"  debezium {delivery}: {rows / run.seconds:,.0f} rows/s, ratio to the copy "
                f"{copy.seconds / run.seconds:.2f}; cpu s per 1M: "
                f"{_per_million(cpu_since(before), rows)}\n    per batch: {run.per_batch()}",
                flush=True,
            )
    copy_rate = rows / statistics.median(copies)
    text = ", ".join(
        f"{d} {rows / statistics.median(s):,.0f} rows/s, ratio "
        f"{rows / statistics.median(s) / copy_rate:.2f}"
        for d, s in runs.items()
    )
    print(
        f"DEBEZIUM json with schemas: plain copy {copy_rate:,.0f} records/s | {text} "
        f"(median of {rounds}, {rows} events, maxOffsetsPerTrigger {max_offsets})",
        flush=True,
    )
