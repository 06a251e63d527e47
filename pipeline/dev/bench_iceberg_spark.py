"""The Iceberg part of ``make bench`` for ``--engine spark``: Spark's Iceberg runtime, REST catalog.

    python -m pipeline.dev.bench_iceberg_spark [--rows 1000000] [--rate 5000] [--seconds 5]
        [--windows 24] [--keys uniform|recent] [--master local[2]]

The local engine's workload (:mod:`.bench_iceberg`: an orders table of ``--rows`` rows, then
windows of ``--rate`` x ``--seconds`` changes, 60 % updates, 10 % deletes, 30 % new orders) on
an embedded broker and Apache Iceberg's REST catalog server (the Spark engine reaches REST
catalogs only). The table is loaded with pyiceberg (one commit at R0); the windows are written
to a changefeed-shaped JSON output topic, each followed by its marker on every partition,
before the clock starts. :class:`~pipeline.iceberg.SparkIcebergApplier` then applies them, a
step per window (``max_offsets``: one window's records a partition), as ``highwater apply
--engine spark`` does. Printed: windows/s and changes/s (all windows, and the slowest tenth),
data files after the windows and after ``highwater iceberg maintain``, and the table checked
against the model (rows and the sum of amounts).
"""

from __future__ import annotations

import argparse
import logging
import random
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from confluent_kafka import Producer

from highwater_consumer.iceberg import IcebergApplier
from highwater_consumer.output import Output
from highwater_consumer.windows import Window
from sinks.admin import ensure_topics
from sinks.partitioning import default_partition

from .bench_iceberg import ORDERS, Model, checked_and_maintained, load_orders, report, workload
from .broker import EmbeddedKafka
from .iceberg_rest import EmbeddedIcebergRest

if TYPE_CHECKING:
    from pipeline.iceberg import SparkIcebergApplier

PARTITIONS = 6


def write_windows(bootstrap: str, topic: str, windows: Iterable[Window]) -> int:
    """The windows as a changefeed writes them: rows by key, then R on every partition.

    Returns the most records a step reads of a partition to find one window: the window's
    records there, its marker, and the marker before it (where a step resumes).
    """
    ensure_topics({"bootstrap.servers": bootstrap}, {topic: PARTITIONS})
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 50, "compression.type": "lz4"}
    )
    most = 0
    for window in windows:
        counts = [2] * PARTITIONS  # its marker, and the one before
        for row in window.rows:
            partition = default_partition(row.key, PARTITIONS)
            counts[partition] += 1
            producer.produce(topic, key=row.key, value=row.value, partition=partition)
            producer.poll(0)
        marker = f'{{"resolved":"{window.resolved}"}}'.encode()
        for partition in range(PARTITIONS):
            producer.produce(topic, value=marker, partition=partition)
        most = max(most, *counts)
    if producer.flush(120) != 0:
        raise RuntimeError(f"{topic}: records not acknowledged")
    return most


def apply_timed(engine: SparkIcebergApplier, windows: int) -> tuple[list[float], float]:
    """Each step's seconds until every window is applied, and the seconds in all."""
    times = []
    started = time.perf_counter()
    while engine.windows < windows:
        began = time.perf_counter()
        if not engine.step():
            raise RuntimeError(f"a step found no window after {engine.windows}")
        times.append(time.perf_counter() - began)
    elapsed = time.perf_counter() - started
    engine.offsets.close()
    return times, elapsed


def run(args: argparse.Namespace, scratch: Path) -> None:
    """Load, write the output, apply it step by step timed, check, maintain."""
    from pipeline.iceberg import SparkIcebergApplier, SparkTarget, iceberg_session  # noqa: PLC0415
    from pipeline.iceberg.ranges import Offsets  # noqa: PLC0415

    chosen = random.Random(52)  # noqa: S311 - benchmark data
    model: Model = {}
    broker = EmbeddedKafka(scratch / "kafka", heap="1g")
    rest = EmbeddedIcebergRest(scratch / "rest", heap="1g")
    bootstrap = broker.start().bootstrap_servers
    catalog = rest.start().properties
    spark = None
    try:
        loader = IcebergApplier(catalog, "bench", namespace="bench", schemas={"orders": ORDERS})
        loader.start(["orders"])
        loaded = load_orders(loader, args.rows, chosen, model)
        per_window = args.rate * args.seconds
        windows = workload(args.windows, per_window, args.seconds, args.keys, chosen, model)
        topic = f"bench-iceberg-{uuid.uuid4().hex[:8]}"
        bound = write_windows(bootstrap, topic, windows)
        output = Output(bootstrap, {topic: "orders"}, schemas={"orders": ORDERS})
        print(
            f"iceberg (spark, {args.master}): {args.rows:,} orders loaded in {loaded:.1f} s; "
            f"{args.windows} windows of {per_window:,} changes ({args.keys} keys) written",
            flush=True,
        )
        spark = iceberg_session(SparkTarget.of(catalog, args.master), "bench-iceberg-spark")
        tables = IcebergApplier(catalog, "bench", namespace="bench", schemas={"orders": ORDERS})
        engine = SparkIcebergApplier(spark, output, tables, Offsets(output, "bench"), bound)
        engine.start()
        times, elapsed = apply_timed(engine, args.windows)
        report("iceberg apply (spark)", times, elapsed, per_window)
        checked_and_maintained(catalog, model, " (spark)", args.windows, on_disk=False)
    finally:
        if spark is not None:
            spark.stop()
        rest.stop()
        broker.stop()


def iceberg_spark_part(rows: int, rate: int, seconds: int, windows: int, keys: str) -> None:
    """The part as ``make bench`` runs it: in a process of its own.

    A Spark session's jars are fixed when its JVM starts: in ``make bench``'s process the
    session it already has (no Iceberg runtime) would be the one ``getOrCreate`` returns, and
    Iceberg's catalog class would not be found.
    """
    arguments = ["--rows", rows, "--rate", rate, "--seconds", seconds, "--windows", windows]
    command = [sys.executable, "-m", "pipeline.dev.bench_iceberg_spark", *map(str, arguments)]
    command += ["--keys", keys]
    subprocess.run(command, check=True)


def main(argv: list[str] | None = None) -> int:
    """The Spark engine's part on its own broker and REST catalog."""
    parser = argparse.ArgumentParser(prog="bench_iceberg_spark", description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rate", type=int, default=5_000, help="changes/s of the source")
    parser.add_argument("--seconds", type=int, default=5, help="of a window")
    parser.add_argument("--windows", type=int, default=24)
    parser.add_argument("--keys", choices=["uniform", "recent"], default="uniform")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="highwater-bench-iceberg-spark-") as scratch:
        run(args, Path(scratch))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
