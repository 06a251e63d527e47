"""The scans on the driver: one Spark job per chunk, a few at a time.

Each chunk's job (:func:`chunk_job`) reads its source range, walks it on an executor (in
the JVM where it can: ``scan_walk.py``; else ``scan.py``) and writes the rows;
:class:`InitialScan` runs the pending chunks from driver threads, at most one per core, and
hands each finished one back; :class:`Scans` (the coordinator's side) decides which scan runs
at which time in which schema, and records each finished chunk in the checkpoint before it
counts as done.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from pipeline.config import ChangefeedConfig
from schemas.hlc import Hlc

from ..batch import (
    BatchAbandoned,
    BatchPlan,
    BatchResult,
    RowSink,
    apply_query,
    faults,
    low_offsets,
    read_result,
    source_reader,
    with_rows,
)
from ..evolution import Rescan, rescan_backfill
from ..ledger import Backfill, Chunk, ScanProgress, progress_line
from ..scan import ScanPlan, chunk_records, scan_walk_plan, write_chunk
from .start import check_history_complete

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..operators import Admission, Observers, StopRequest
    from ..progress import Position
    from .setup import Opened

log = logging.getLogger(__name__)


ChunkJob = Callable[[Chunk, ScanPlan], BatchResult]


class InitialScan:
    """Runs a scan's pending chunks, one Spark job each, at most ``parallelism`` at once.

    ``on_chunk(chunk, result)`` is called (one at a time) after each chunk's rows are
    acknowledged; it records the chunk as done (and counts it in ``progress``, which the log
    shows). A failed chunk stops the scan: chunks in flight are cancelled and the first error
    is raised. ``stop()`` cancels the chunks in flight; they are not done and run again next
    time.
    """

    def __init__(
        self,
        spark: SparkSession,
        job: ChunkJob,
        plan: ScanPlan,
        *,
        parallelism: int,
        rate_limit: float | None,
        on_chunk: Callable[[Chunk, BatchResult], None],
        progress: ScanProgress | None = None,
    ) -> None:
        self.spark = spark
        self.progress = progress
        self.job = job
        self.plan = plan
        self.parallelism = max(1, parallelism)
        self.rate_limit = rate_limit
        self.on_chunk = on_chunk
        self.group = f"highwater-scan-{uuid.uuid4().hex[:8]}"
        self._stopped = threading.Event()

    def run(self, chunks: Iterable[Chunk], stop_requested: Callable[[], bool]) -> bool:
        """Scan ``chunks``; False when a stop was requested before all were done."""
        queue = list(chunks)
        self._log("initial scan at %s: %d chunks to go (%s)", self.plan.statement_time, len(queue))
        workers = min(self.parallelism, len(queue)) or 1
        rate = None if self.rate_limit is None else self.rate_limit / workers
        step = 10_000 if rate is None else max(1, min(10_000, int(rate / 10)))
        plan = replace(self.plan, rate=rate, step=step)
        running: dict[Future[BatchResult], Chunk] = {}
        with ThreadPoolExecutor(workers, thread_name_prefix="highwater-scan") as pool:
            try:
                while queue or running:
                    while queue and len(running) < workers and not self._stopped.is_set():
                        chunk = queue.pop(0)
                        running[pool.submit(self._chunk, chunk, plan)] = chunk
                    if not running:
                        break
                    finished, _ = wait(running, timeout=1.0, return_when=FIRST_COMPLETED)
                    for future in finished:
                        chunk = running.pop(future)
                        if self._stopped.is_set() and future.exception() is not None:
                            continue  # cancelled by the stop: not done, it runs next time
                        result = future.result()
                        self.on_chunk(chunk, result)
                        rows = result.emitted
                        self._log("initial scan: %s done (%d rows); %s", chunk.partition, rows)
                    if stop_requested() and not self._stopped.is_set():
                        self.stop()
            except BaseException:
                self.stop()
                raise
        done = not queue and not self._stopped.is_set()
        self._log("initial scan done: %s" if done else "initial scan stopped: %s")
        return done

    def _log(self, message: str, *args: object) -> None:
        """Log ``message`` with the progress line as its last argument."""
        line = "-" if self.progress is None else progress_line(self.progress.to_json())
        log.info(message, *args, line)

    def stop(self) -> None:
        """Cancel the chunks in flight."""
        self._stopped.set()
        self.spark.sparkContext.cancelJobGroup(self.group)

    def _chunk(self, chunk: Chunk, plan: ScanPlan) -> BatchResult:
        self.spark.sparkContext.setJobGroup(
            self.group, f"initial scan of {chunk.partition}", interruptOnCancel=True
        )
        return self.job(chunk, replace(plan, chunk=chunk.partition, span=(chunk.start, chunk.end)))


def assign_options(chunk: Chunk) -> dict[str, str]:
    """Spark Kafka reader options that read exactly ``chunk``'s range."""
    topic, partition = chunk.partition.topic, str(chunk.partition.partition)
    return {
        "assign": json.dumps({topic: [chunk.partition.partition]}),
        "startingOffsets": json.dumps({topic: {partition: chunk.start}}),
        "endingOffsets": json.dumps({topic: {partition: chunk.end}}),
    }


def chunk_job(spark: SparkSession, config: ChangefeedConfig, sink: RowSink) -> ChunkJob:
    """The Spark job of one chunk: read its range, walk it, write the rows to ``sink``.

    Exactly once, each chunk is one transaction with its scan progress record (``sink.py``).
    """
    query = config.query

    def run(chunk: Chunk, plan: ScanPlan) -> BatchResult:
        from pyspark.sql import Observation  # noqa: PLC0415 - Spark stays out of the import path

        frame = source_reader(spark.read, config.kafka).options(**assign_options(chunk)).load()
        topic = chunk.partition.topic
        source_format, registry = config.formats[topic], config.registries.get(topic)
        walk = None if query is not None else scan_walk_plan(plan)
        if walk is not None:  # the JVM's, its rest the Python scan's (scan_walk.py)
            return write_chunk(frame, walk, plan, sink)
        if query is not None:
            frame = apply_query(
                frame,
                *query,
                config.encoder,
                source_format=source_format,
                registry=registry,
                mark_only=True,
            )
        elif source_format != "native":  # grouped by each change's key (rows.py)
            frame = with_rows(frame, source_format, registry, envelopes=False)
        observation = Observation(f"scan-{chunk.partition}-{uuid.uuid4().hex[:8]}")
        records = chunk_records(frame, plan, observation)
        transactions = sink.write(records, scan_time=plan.statement_time)
        return read_result(observation).counted(transactions)

    return run


class ScanHost(Protocol):
    """What the scans need of the coordinator (:class:`~.changefeed.Changefeed`)."""

    config: ChangefeedConfig
    spark: SparkSession
    stop_request: StopRequest
    observers: Observers
    lock: threading.Lock

    admission: Admission

    @property
    def opened(self) -> Opened:
        """What the run writes through."""

    @property
    def position(self) -> Position:
        """Where the changefeed stands."""

    def write_checkpoint(self, *, last_marker: Hlc | None) -> None:
        """Write the checkpoint record of where the changefeed stands."""

    def halt(self, result: BatchResult) -> None:
        """Stop (pause or fail) at what stops a chunk (``BatchResult.stops``)."""

    def check_replicas(self) -> None:
        """Re-read the relied-on topics' replicas when due."""

    def publish(self, state: str | None = None) -> None:
        """Write the job status as things stand."""


class Scans:
    """The coordinator's scans: the initial scan, a table an update added, a table again.

    Each runs its :class:`~.backfill.Backfill`'s pending chunks (:class:`InitialScan`) and
    records every finished chunk in the checkpoint before it counts as done; a chunk that meets
    what stops the run (``on_error``, a schema change) is not recorded and runs again.
    """

    def __init__(self, host: ScanHost) -> None:
        self.host = host

    def initial(self) -> tuple[Hlc, bool] | None:
        """Run the position's scan; (its time, whether it was the first) or None: stopped first.

        The first scan takes the tables' schemas as they are now; the rest of a table emitted
        again at its schema change (a killed run left it), the schema as it was at the change.
        Once every chunk is acknowledged, the scan's time is resolved.
        """
        host, position, schemas = self.host, self.host.position, self.host.opened.schemas
        backfill = position.backfill
        assert backfill is not None  # noqa: S101 - the caller checked
        statement = backfill.time or position.statement_time
        assert statement is not None  # noqa: S101 - a scan has a statement time
        first, rescan, defaults = backfill.time is None, None, None
        if backfill.change is not None:
            rescan = schemas.rescan_at(backfill.change, statement)
        elif first:
            defaults = schemas.before_scan()
            host.observers.show_schemas(schemas)
        if not self.run(backfill, statement, self._locked, rescan=rescan, defaults=defaults):
            return None
        # The first scan only: beside an added table's scan the other tables stream on, and
        # their transactions at or below its time may still be in flight there.
        if first:
            position.resolver.check_snapshot(statement, position.frontier)
        position.backfill = None  # the whole snapshot is acknowledged: its time is resolved
        host.observers.status.state = "running"
        return statement, first

    def again(self, rescan: Rescan, result: BatchResult) -> None:
        """Emit a table again at its schema change (``backfill``), before the batch's rests.

        Its source partitions from their first offsets to where the batch left them, at the
        change's commit time (``rescan.py``); recorded in the checkpoint as a scan, so a kill
        scans the rest first on restart. Runs inside a batch, the lock held.
        """
        host, position, opened = self.host, self.host.position, self.host.opened
        table = host.config.tables[rescan.topic]
        low = low_offsets(opened.source, [p for p in opened.partitions if p.topic == rescan.topic])
        check_history_complete(low, opened.source_configs)
        backfill = rescan_backfill(rescan, opened.partitions, low, result, position.frontier)
        position.backfill = backfill
        log.info("table %s: emitted again at its schema change %s", table, rescan.time)
        host.write_checkpoint(last_marker=None)
        if not self.run(backfill, rescan.time, self.record, rescan=rescan):
            raise BatchAbandoned(f"stopped while {table} was emitted again at its schema change")
        position.backfill = None
        host.observers.status.state = "running"
        host.observers.metrics.backfills.inc()
        host.write_checkpoint(last_marker=None)

    def run(
        self,
        backfill: Backfill,
        statement: Hlc,
        on_chunk: Callable[[Chunk, BatchResult], None],
        *,
        rescan: Rescan | None = None,
        defaults: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> bool:
        """Run ``backfill``'s pending chunks at ``statement``; False: a stop came first.

        ``rescan``: the scan emits a table again at a schema change (``rescan.py``);
        ``defaults``: per source topic, the columns' defaults for rows that predate them.
        """
        if rescan is not None:
            defaults = {rescan.topic: rescan.defaults}
        host, config = self.host, self.host.config
        progress = ScanProgress.of(backfill)
        host.observers.scanning(progress)
        host.publish("scanning")
        plan = BatchPlan.of(
            config,
            host.opened.schemas.encoders,
            thresholds={},
            skip=host.admission.skip(),
            commits=host.position.resolver.commit_times(),
        )
        plan = replace(plan, exactly_once=host.opened.claim is not None)
        scan = InitialScan(
            host.spark,
            chunk_job(host.spark, config, host.opened.sink),
            ScanPlan(
                plan,
                statement,
                changes=config.scan_mode != "only" and rescan is None,
                again=rescan is not None,
                defaults=defaults,
            ),
            parallelism=host.spark.sparkContext.defaultParallelism,
            rate_limit=config.initial_scan.rate_limit,
            on_chunk=on_chunk,
            progress=progress,
        )
        return scan.run(backfill.pending(), host.stop_request.is_set)

    def _locked(self, chunk: Chunk, result: BatchResult) -> None:
        with self.host.lock:
            self.record(chunk, result)

    def record(self, chunk: Chunk, result: BatchResult) -> None:
        """A chunk's rows are acknowledged: record it in the checkpoint before it counts.

        The lock held. A chunk that stops the run (a bad record ``on_error`` does not divert,
        a row its table's schema cannot hold) is not recorded: it runs again after resume.
        """
        host, position = self.host, self.host.position
        faults.reached("chunk_written")
        host.check_replicas()  # a long scan is watched as the stream is
        if result.stops(host.config.on_error):
            host.halt(result)
            return
        progress = host.observers.status.progress
        assert position.backfill is not None  # noqa: S101 - the scan is running
        assert progress is not None  # noqa: S101
        position.backfill = position.backfill.finished(chunk, result.emitted)
        for seen in result.partitions:  # the stream tells re-sends after the scan's
            if seen.position is not None:
                position.frontier.read_to(seen.partition, seen.position)
        position.resolver.saw(result)  # what the scan read counts for the resolved times
        progress.add(chunk, result.emitted)
        host.observers.chunk(result, progress)
        host.write_checkpoint(last_marker=None)
        faults.reached("after_chunk")
