"""The initial scan on the driver: one Spark job per chunk, a few at a time.

Each chunk's job (:func:`chunk_job`) reads its source range, walks it on an executor
(``pipeline/core/scan.py``) and writes the rows; :class:`InitialScan` runs the pending chunks
from driver threads, at most one per core, and hands each finished one to the coordinator,
which records it in the checkpoint before it counts as done.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import replace
from typing import TYPE_CHECKING

from pipeline.config import ChangefeedConfig

from .backfill import Chunk, ScanProgress, progress_line
from .batch import BatchResult, read_result
from .kafka_clients import source_reader, write_records
from .queries import apply_query
from .rows import with_rows
from .scan import ScanPlan, chunk_records

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

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
        return self.job(chunk, replace(plan, chunk=chunk.partition))


def assign_options(chunk: Chunk) -> dict[str, str]:
    """Spark Kafka reader options that read exactly ``chunk``'s range."""
    topic, partition = chunk.partition.topic, str(chunk.partition.partition)
    return {
        "assign": json.dumps({topic: [chunk.partition.partition]}),
        "startingOffsets": json.dumps({topic: {partition: chunk.start}}),
        "endingOffsets": json.dumps({topic: {partition: chunk.end}}),
    }


def chunk_job(spark: SparkSession, config: ChangefeedConfig) -> ChunkJob:
    """The Spark job of one chunk: read its range, walk it, write the rows to the sink."""
    query = config.query

    def run(chunk: Chunk, plan: ScanPlan) -> BatchResult:
        from pyspark.sql import Observation  # noqa: PLC0415 - Spark stays out of the import path

        frame = source_reader(spark.read, config.kafka).options(**assign_options(chunk)).load()
        topic = chunk.partition.topic
        source_format, registry = config.formats[topic], config.registries.get(topic)
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
        write_records(records, config.sink_kafka, config.sink.producer)
        return read_result(observation)

    return run
