"""The consumer library's benchmark (``make bench``'s consumer part, or on its own).

    python -m pipeline.dev.bench_consumer [--rows 1000000] [--rounds 3] [--apply-rows 200000]

A topic shaped as a changefeed's JSON output (wrapped envelopes of ~170 bytes with ``updated``
and ``before``, numbers with fractions, keys of text and number; a marker on every partition
every ``--marker-every`` changes) is written once; then, side by side in each round:

* **raw**: a plain confluent-kafka consumer reading every record (the Kafka limit of a Python
  client here);
* **Java**: Kafka's own Java consumer (``ConsumerPerformance``) reading every record;
* **windows**: :class:`ChangefeedConsumer` handing over every change in resolved windows
  (decoded, deduplicated, ordered), the offsets of each window committed;
* **columnar**: the same windows as Arrow tables (``columnar=True``, ``arrow_windows()``),
  read by the consumer's C reader (:data:`highwater_consumer.columnar.NATIVE` says which).

Then ``highwater apply``'s library applies ``--apply-rows`` changes of another such topic to
a real PostgreSQL table (one transaction per window): rows per second, for the applier
(COPY into staging, windows pipelined) per row and columnar and, beside them on the same
topic and server, the applier as it was before issue 50 (a statement a row, one window after
the other: :class:`StatementApplier`, kept here only as the baseline).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from psycopg import sql

from highwater_consumer import ChangefeedConsumer, Output, Row, Window
from highwater_consumer.columnar import NATIVE, WHY_NOT_NATIVE
from highwater_consumer.postgres import PostgresApplier, Prepared, Table, apply
from highwater_consumer.staging import last_versions, text
from schemas.hlc import Hlc
from sinks.admin import ensure_topics
from sinks.partitioning import default_partition

from .broker import EmbeddedKafka
from .kafka_tools import run_tool
from .postgres import EmbeddedPostgres

WALL = 1_700_000_000_000_000_000
TABLE = (
    "CREATE TABLE bench "
    "(region text, id bigint, amount numeric, note text, items int, PRIMARY KEY (region, id))"
)


def write_output(bootstrap: str, topic: str, rows: int, partitions: int, marker_every: int) -> Hlc:
    """A changefeed-shaped JSON output of ``rows`` changes; its last marker."""
    ensure_topics({"bootstrap.servers": bootstrap}, {topic: partitions})
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "compression.type": "lz4",
        }
    )
    last = Hlc(WALL)
    for n in range(rows):
        wall = WALL + (n + 1) * 1000
        key = f'["eu-{n % 7}",{n % 200_000}]'.encode()
        value = (
            f'{{"after":{{"amount":{n % 9973}.{n % 100:02d},"note":"change {n} é",'
            f'"items":{n % 13}}},'
            f'"before":null,"updated":"{wall}.0000000000"}}'
        ).encode()
        producer.produce(topic, key=key, value=value, partition=default_partition(key, partitions))
        if (n + 1) % marker_every == 0 or n + 1 == rows:
            last = Hlc(wall)
            marker = f'{{"resolved":"{last}"}}'.encode()
            for p in range(partitions):
                producer.produce(topic, value=marker, partition=p)
        if n % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError(f"{topic}: records not acknowledged")
    return last


def raw(bootstrap: str, topic: str, records: int) -> float:
    """Seconds a plain consumer takes to read ``records`` records."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"raw-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
        }
    )
    partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    started, seen = time.perf_counter(), 0
    while seen < records:
        seen += sum(1 for m in consumer.consume(10_000, 1.0) if m.error() is None)
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def java(bootstrap: str, topic: str, records: int) -> float:
    """Records a second of Kafka's Java consumer (ConsumerPerformance) reading the topic."""
    done = run_tool(
        "consumer-perf-test",
        ["--topic", topic, "--messages", str(records), "--timeout", "60000"],
        bootstrap,
        timeout=600,
    )
    header, row = done.stdout.strip().splitlines()[-2:]  # CSV: …, nMsg.sec, …
    fields = dict(zip((h.strip() for h in header.split(",")), row.split(","), strict=False))
    return float(fields["nMsg.sec"])


def windows(
    bootstrap: str, topic: str, until: Hlc, *, columnar: bool = False
) -> tuple[float, int, int]:
    """Seconds, changes and windows of a ChangefeedConsumer reading the whole output."""
    output = Output(bootstrap, {topic: "bench"})
    changes = count = 0
    with ChangefeedConsumer(output, f"bench-{uuid.uuid4()}", columnar=columnar) as consumer:
        found = consumer.arrow_windows if columnar else consumer.windows
        started = time.perf_counter()
        for window in found(until=until):
            changes += len(window.rows)
            count += window.last
            consumer.ack(window)
        elapsed = time.perf_counter() - started
    return elapsed, changes, count


def main(argv: list[str] | None = None) -> int:
    """Both parts on a broker of their own."""
    parser = argparse.ArgumentParser(prog="bench_consumer", description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--marker-every", type=int, default=5_000)
    parser.add_argument("--apply-rows", type=int, default=200_000)
    parser.add_argument("--only", choices=["consumer", "apply"], help="one part alone")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="highwater-bench-consumer-") as scratch:
        broker = EmbeddedKafka(Path(scratch) / "kafka", heap="2g")
        bootstrap = broker.start().bootstrap_servers
        try:
            if args.only != "apply":
                consumer_part(bootstrap, args.rows, args.rounds, args.partitions, args.marker_every)
            if args.only != "consumer":
                apply_part(bootstrap, args.apply_rows, args.partitions, args.marker_every)
        finally:
            broker.stop()
    return 0


def consumer_part(
    bootstrap: str, rows: int, rounds: int, partitions: int, marker_every: int
) -> None:
    """The consumer alone against a plain consumer of the same topic, side by side."""
    topic = f"bench-output-{uuid.uuid4().hex[:8]}"
    last = write_output(bootstrap, topic, rows, partitions, marker_every)
    records = rows + partitions * -(-rows // marker_every)
    print(f"consumer: columnar reader {NATIVE or 'confluent-kafka: ' + str(WHY_NOT_NATIVE)}")
    ratios, rates = [], []
    for round_ in range(rounds):
        plain = raw(bootstrap, topic, records)
        jvm = java(bootstrap, topic, records)
        before = time.process_time()
        elapsed, changes, count = windows(bootstrap, topic, last)
        cpu = time.process_time() - before
        before = time.process_time()
        columns, columnar_changes, columnar_count = windows(bootstrap, topic, last, columnar=True)
        columnar_cpu = time.process_time() - before
        if changes != rows or columnar_changes != rows:
            raise RuntimeError(f"{changes}, {columnar_changes} changes handed over of {rows}")
        ratios.append(plain / elapsed)
        rates.append(rows / columns)
        print(
            f"consumer round {round_ + 1}: raw {records / plain:,.0f} records/s ({plain:.1f} s); "
            f"Java {jvm:,.0f} records/s; "
            f"windows {changes / elapsed:,.0f} changes/s ({elapsed:.1f} s, {count} windows, "
            f"CPU {cpu:.1f} s), {plain / elapsed:.2f} of raw; columnar "
            f"{rows / columns:,.0f} changes/s ({columns:.1f} s, {columnar_count} windows, "
            f"CPU {columnar_cpu:.1f} s), {plain / columns:.2f} of raw, {elapsed / columns:.2f}x "
            f"windows, {rows / columns / jvm:.2f} of Java; "
            f"load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
    print(
        f"consumer: median ratio of windows to a plain consumer {statistics.median(ratios):.2f}; "
        f"columnar median {statistics.median(rates):,.0f} changes/s"
    )


class StatementApplier(PostgresApplier):
    """The applier before issue 50, the bench's baseline: ``executemany`` of a statement a row.

    Each value cast by the statement (``%s::<type>``), one window after the other (no
    pipeline); the same transaction and R as :class:`PostgresApplier`.
    """

    def prepare(self, window: Window, lookup: object = None) -> Prepared:
        """Nothing to prepare: the rows are written as they are."""
        return Prepared(window, ())

    def _write(self, prepared: Prepared) -> None:
        for name, rows in last_versions(prepared.window.rows).items():
            groups: dict[tuple[str, ...] | None, list[Row]] = {}
            for row in rows:
                groups.setdefault(None if row.after is None else tuple(row.after), []).append(row)
            table = self.table(name)
            for columns, group in groups.items():
                if columns is None:
                    self._deletes(table, group)
                else:
                    self._upserts(table, columns, group)
                self.applied += len(group)

    @staticmethod
    def _cast(table: Table, column: str) -> sql.Composable:
        return sql.SQL("%s::" + table.types[column])

    def _upserts(self, table: Table, after: tuple[str, ...], rows: Iterable[Row]) -> None:
        rest = [c for c in after if c not in table.key]
        columns = [*table.key, *rest]
        comma = sql.SQL(", ")
        sets = [sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in rest]
        statement = sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) {}").format(
            table.ident,
            comma.join(map(sql.Identifier, columns)),
            comma.join(self._cast(table, c) for c in columns),
            comma.join(map(sql.Identifier, table.key)),
            sql.SQL("DO UPDATE SET {}").format(comma.join(sets)) if sets else sql.SQL("DO NOTHING"),
        )
        params = []
        for row in rows:
            image = row.after or {}
            params.append(
                [*map(text, table.key_of(row.key_values)), *(text(image[c]) for c in rest)]
            )
        with self.connection.cursor() as cursor:
            cursor.executemany(statement, params)

    def _deletes(self, table: Table, rows: Iterable[Row]) -> None:
        where = sql.SQL(" AND ").join(
            sql.SQL("{} = {}").format(sql.Identifier(c), self._cast(table, c)) for c in table.key
        )
        with self.connection.cursor() as cursor:
            cursor.executemany(
                sql.SQL("DELETE FROM {} WHERE {}").format(table.ident, where),
                [[text(v) for v in table.key_of(row.key_values)] for row in rows],
            )


def _cpu(pid: int) -> float:
    """A local process's CPU seconds so far (user and system: /proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def apply_part(
    bootstrap: str, rows: int, partitions: int, marker_every: int, rounds: int = 2
) -> None:
    """Windows applied to a real PostgreSQL table: rows per second, new and old beside.

    The statements once (the old baseline); the COPY applier per row and columnar side by
    side, ``rounds`` times each, alternating.
    """
    topic = f"bench-apply-{uuid.uuid4().hex[:8]}"
    last = write_output(bootstrap, topic, rows, partitions, marker_every)
    folder = Path(tempfile.mkdtemp(prefix="highwater-bench-pg-"))  # the postgres user reaches it
    folder.chmod(0o755)
    server = EmbeddedPostgres(folder / "pg")
    info = server.start()
    try:
        runs = [("statements (before)", StatementApplier, 0, False)] + [
            ("copy, pipelined", PostgresApplier, 2, False),
            ("copy, pipelined, columnar", PostgresApplier, 2, True),
        ] * rounds
        rates: dict[bool, list[float]] = {False: [], True: []}
        for name, kind, pipeline, columnar in runs:
            server.sql("DROP TABLE IF EXISTS bench; DROP TABLE IF EXISTS highwater_applied")
            server.sql(TABLE)
            applier = kind(info.dsn, "bench")
            applier.start()
            output = Output(bootstrap, {topic: "bench"})
            group = f"bench-{uuid.uuid4()}"
            with ChangefeedConsumer(output, group, columnar=columnar) as consumer:
                backend = applier.connection.info.backend_pid
                started, cpu, server_cpu = time.perf_counter(), time.process_time(), _cpu(backend)
                count = apply(consumer, applier, until=last, pipeline=pipeline)
                elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
                server_cpu = _cpu(backend) - server_cpu
            applier.close()
            print(
                f"apply, {name}: {applier.applied:,} rows written of {rows:,} changes in "
                f"{count} windows, {elapsed:.1f} s: {rows / elapsed:,.0f} changes/s, "
                f"{applier.applied / elapsed:,.0f} rows/s (CPU: this process {cpu:.1f} s, its "
                f"PostgreSQL backend {server_cpu:.1f} s; load average {os.getloadavg()[0]:.1f})",
                flush=True,
            )
            if kind is PostgresApplier:
                rates[columnar].append(applier.applied / elapsed)
        ratios = [c / r for c, r in zip(rates[True], rates[False], strict=True)]
        print(
            f"apply: columnar {statistics.median(rates[True]):,.0f} rows/s, per row "
            f"{statistics.median(rates[False]):,.0f} rows/s (medians); columnar / per row "
            f"{', '.join(f'{r:.2f}' for r in ratios)}",
            flush=True,
        )
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
