"""The changefeed: the coordinator on the Spark driver.

Spark Structured Streaming reads the source topics; each micro-batch goes through
``pipeline.batch`` on the executors (decode, drop what is resolved, encode, write). Here, on
the driver, the :class:`Changefeed` owns what must be decided in one place:

* the **frontier** (per source partition: next offset, highest resolved time), forwarded
  after each batch's records are acknowledged by Kafka;
* the **checkpoint** record in the compacted checkpoint topic: after acknowledged batches, at
  most every ``min_checkpoint_frequency`` when the high-water mark moved, when the high-water
  mark lags the leading partitions by more than the threshold, before every marker, and at
  stop;
* the **resolved broadcaster**: a marker to every output partition at most every
  ``resolved.interval`` when the high-water mark advanced, only after a durable checkpoint
  covers it;
* **resume** from the checkpoint record alone (Spark's checkpoint directory is scratch,
  cleared at every start), ``end_time``, and a graceful stop between batches;
* the **start** of a new changefeed: its statement time, and the **initial scan**
  (``pipeline/scan.py``) before the stream, chunk by chunk, each recorded in the checkpoint;
* its **safepoint** (``pipeline/safepoints.py``), held from before the first read, refreshed,
  refused below the GC safe point; and the **job status** an operator reads
  (``pipeline/status.py``).

A run is: ``prepare`` (topics, encoders, checkpoint or creation, safepoint), the initial scan
if one is due, then the streaming query until it ends.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from encoders.avro import AvroEncoder
from encoders.base import Context, Encoder
from encoders.json import JsonEncoder
from schemas.avro import OutputSchemas
from schemas.errors import (
    CheckpointError,
    HighwaterError,
    SafepointError,
    SinkError,
    SourceDecodeError,
    SourceError,
)
from schemas.hlc import ZERO, Hlc
from sinks.admin import ensure_topics, partition_counts, topic_configs
from sinks.compacted import CompactedTopic
from sinks.resolved import ResolvedBroadcaster
from sinks.schemas import publish, register

from . import faults
from .batch import BatchPlan, BatchResult, kafka_records, read_result
from .checkpoint import Checkpoint, decode
from .config import ChangefeedConfig
from .frontier import Frontier, Progress, SourcePartition
from .gc import retention_warnings
from .kafka_clients import client_config, spark_kafka_options, write_records
from .queries import apply_query, check_query
from .safepoints import ChangefeedSafepoint, SafepointRegistry
from .scan import Backfill, Chunk, InitialScan, ScanPlan, ScanProgress, chunk_job, progress_line
from .statement import statement_time
from .status import JobStatus

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)


def config_fingerprint(config: ChangefeedConfig) -> str:
    """A hash of what shapes the output: sources, encoder and topic naming."""
    shape = config.model_dump(mode="json", include={"sources", "encoder", "sink"})
    shape["sink"] = {k: shape["sink"][k] for k in ("topic_prefix", "topic_name")}
    return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class ChangefeedStats:
    """What a run did, for logs, the job status and benchmarks."""

    batches: int = 0
    rows: int = 0
    duplicates: int = 0
    bad: int = 0
    scan_rows: int = 0
    checkpoint_seconds: list[float] = field(default_factory=list)
    markers: list[tuple[float, Hlc]] = field(default_factory=list)  # (wall seconds, marker)


class StopRequest:
    """A request to stop after the current batch (set by SIGTERM, or a stop file)."""

    def __init__(self, stop_file: Path | None = None) -> None:
        self._event = threading.Event()
        self._file = stop_file

    def set(self) -> None:
        """Ask the changefeed to stop."""
        self._event.set()

    def is_set(self) -> bool:
        """True once a stop was asked for."""
        if self._file is not None and self._file.exists():
            self._event.set()
        return self._event.is_set()


class Changefeed:
    """One changefeed run, from its config to a stop, an ``end_time`` or an error."""

    def __init__(
        self,
        config: ChangefeedConfig,
        spark: SparkSession,
        *,
        stop: StopRequest | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.spark = spark
        self.stop_request = stop or StopRequest()
        self._clock = clock
        self._routes = {s.topic: config.output_topic(s) for s in config.sources}
        self._tables = {s.topic: s.table for s in config.sources}
        self._formats = {s.topic: s.format for s in config.sources}
        first = config.sources[0]
        has_query = config.encoder.select is not None or config.encoder.where is not None
        schema = first.declared_schema
        self._query = (first.table, schema) if has_query and schema is not None else None
        self._encoders: dict[str, Encoder] = {}  # source topic -> encoder (prepare())
        self._fingerprint = config_fingerprint(config)
        self._lock = threading.Lock()
        self._closing = False
        self._finished = False
        self._error: BaseException | None = None
        self.frontier: Frontier
        self.statement_time: Hlc | None = None
        self.backfill: Backfill | None = None  # an initial scan still to run (or finish)
        self._nothing_to_do = False  # an ``only`` changefeed whose scan is done
        self.safepoint: ChangefeedSafepoint | None = None  # (safepoints.enabled)
        self._warnings: list[str] = []  # e.g. a source topic's retention could trim it
        self._lag_hw = ZERO  # the high-water mark, and when it last moved (wall seconds)
        self._hw_moved_at: float | None = None
        self._source_partitions: list[SourcePartition] = []
        self._source_configs: dict[str, dict[str, str | None]] = {}
        self.last_marker: Hlc | None = None
        self._checkpointed_hw = ZERO
        self._last_checkpoint_at = float("-inf")
        self._last_marker_at = float("-inf")
        self._dirty = False  # progress since the last checkpoint
        self._state = "scanning"  # the job status: scanning, running, stopped, finished, failed
        self._progress: ScanProgress | None = None
        self._scan_summary: Mapping[str, Any] | None = None  # a previous run's scan, if any
        self.stats = ChangefeedStats()

    # -- set-up ---------------------------------------------------------------------------

    def prepare(self) -> None:
        """Create missing topics, restore the frontier from the checkpoint record."""
        config = self.config
        sink = client_config(config.sink_kafka)
        ensure_topics(
            sink,
            dict.fromkeys(self._routes.values(), config.sink.partitions),
            replication_factor=config.sink.replication_factor,
        )
        if config.on_error == "dlq":
            ensure_topics(
                sink,
                {config.effective_dlq_topic: 1},
                replication_factor=config.sink.replication_factor,
            )
        self.checkpoints = CompactedTopic(sink, config.checkpoint.topic)
        self.checkpoints.ensure(config.checkpoint.replication_factor)
        self._encoders = self._make_encoders(sink)
        by_output = {self._routes[t]: e for t, e in self._encoders.items()}
        self.broadcaster = ResolvedBroadcaster(
            sink,
            list(by_output),
            lambda ts, topic: by_output[topic].resolved(ts, Context(topic)),
        )
        source = client_config(config.kafka)
        try:
            counts = partition_counts(source, list(self._routes))
        except Exception as exc:
            raise SourceError(f"cannot describe the source topics: {exc}") from exc
        partitions = [SourcePartition(t, p) for t, n in counts.items() for p in range(n)]
        self._source_partitions = partitions
        self._source_configs = topic_configs(source, list(self._routes))  # read once
        if config.safepoints.enabled:
            registry = SafepointRegistry(source, config.safepoints.topic, config.safepoints.cluster)
            registry.ensure(config.checkpoint.replication_factor)
            self.safepoint = ChangefeedSafepoint(
                registry, config.changefeed_id, config.safepoints.gc_ttl.total_seconds()
            )
            self._warnings = retention_warnings(self._source_configs)
            for warning in self._warnings:
                log.warning("%s", warning)
        restored = self.load_checkpoint()
        self.jobs = CompactedTopic(source, config.jobs.topic)  # beside the safepoints
        self.jobs.ensure(config.checkpoint.replication_factor)
        previous = self.jobs.get(config.changefeed_id) if restored is not None else None
        if previous is not None:  # the last scan's numbers stay in the status
            self._scan_summary = JobStatus.decode(previous).scan
        if restored is None:
            self._create(source, partitions)
            return
        if restored.config_fingerprint and restored.config_fingerprint != self._fingerprint:
            log.warning(
                "changefeed %s: config changed since the checkpoint (%s -> %s)",
                config.changefeed_id,
                restored.config_fingerprint,
                self._fingerprint,
            )
        self.frontier = Frontier.restore(restored.progress(partitions))
        self.last_marker = restored.last_marker
        self.statement_time = restored.statement_time
        self._checkpointed_hw = restored.high_water
        if restored.backfill is not None:
            self.backfill = Backfill.from_record(restored.backfill)
        self._nothing_to_do = config.scan_mode == "only" and self.backfill is None
        log.info(
            "changefeed %s: resuming at high-water %s (checkpoint level %s%s)",
            config.changefeed_id,
            restored.high_water,
            restored.level,
            "" if self.backfill is None else ", initial scan unfinished",
        )
        self._hold_safepoint()
        self._check_offsets_exist(source)

    def _create(self, source: dict[str, Any], partitions: list[SourcePartition]) -> None:
        """A new changefeed: its statement time and start, durable before anything is emitted.

        * ``cursor`` without a scan: every change after the cursor, from the first offsets;
        * no scan: every change after the statement time, from the first offsets (the floor
          mechanism drops what is at or below it);
        * a scan: the snapshot at the statement time (the cursor, or the sources' high-water
          mark), then the stream from the offsets the statement time was read at, each
          partition's floor at its latest marker there (the scan emitted everything before).
        """
        config = self.config
        cursor, mode = config.cursor, config.scan_mode
        if cursor is not None and mode == "no":
            self.statement_time = cursor
            self.frontier = Frontier(partitions, start=cursor)
        else:
            found = statement_time(source, self._formats, partitions)
            if cursor is not None and cursor > found.time:
                raise SourceError(
                    f"cursor {cursor} is above the sources' high-water mark {found.time}: a "
                    "snapshot there would not be consistent yet"
                )
            statement = cursor or found.time
            self.statement_time = statement
            if mode == "no":
                self.frontier = Frontier(partitions, start=statement)
            else:
                self.frontier = Frontier.restore(
                    {
                        sp: Progress(found.end_offsets[sp], max(statement, found.markers[sp]))
                        for sp in partitions
                    }
                )
                self.backfill = Backfill.of(found.start_offsets, found.end_offsets)
        log.info(
            "changefeed %s: new, statement time %s, initial scan %s",
            config.changefeed_id,
            self.statement_time,
            mode,
        )
        if self.backfill is not None:
            self._check_history_complete(found.start_offsets)
        self._hold_safepoint()
        self._write_checkpoint(last_marker=None)

    def _check_history_complete(self, start_offsets: Mapping[SourcePartition, int]) -> None:
        """A snapshot needs every key's history: refuse one over a trimmed change log."""
        compacted = {
            topic
            for topic, settings in self._source_configs.items()
            if "compact" in (settings.get("cleanup.policy") or "")
        }
        gone = sorted(
            f"{sp} offsets 0..{low - 1}"
            for sp, low in start_offsets.items()
            if low > 0 and sp.topic not in compacted
        )
        if gone:
            raise SourceError(
                "the initial scan needs the whole change history, and records were deleted "
                "from the source topics (GC or retention): " + "; ".join(gone) + ". Use "
                "initial_scan: no, or a cursor, to start without a snapshot"
            )

    def _restart_time(self) -> Hlc:
        """Where a restart would begin: the high-water mark, time zero while scanning."""
        return ZERO if self.backfill is not None else self.frontier.high_water()

    def _needed_offsets(self) -> dict[SourcePartition, int]:
        """The lowest source offset a restart reads, per partition."""
        needed = {
            sp: p.offset for sp, p in self.frontier.progress().items() if p.offset is not None
        }
        for chunk in [] if self.backfill is None else self.backfill.pending():
            needed[chunk.partition] = min(chunk.start, needed.get(chunk.partition, chunk.start))
        return needed

    def _hold_safepoint(self) -> None:
        """Hold GC at the restart position before reading anything (refused below GC)."""
        if self.safepoint is None:
            return
        restart = self._restart_time()
        topics = ", ".join(
            f"{t} partitions 0-{n - 1}"
            for t, n in sorted(
                (t, sum(1 for sp in self._source_partitions if sp.topic == t)) for t in self._routes
            )
        )

        def gone(gc: Hlc) -> str:
            return f"source changes after {restart} up to {gc} on {topics} may be gone"

        self.safepoint.start(restart, self._needed_offsets(), gone, check=self.backfill is None)

    def _make_encoders(self, sink: dict[str, Any]) -> dict[str, Encoder]:
        """One encoder per source topic; Avro schemas are registered or published first."""
        config = self.config
        if config.encoder.format == "json":
            encoder = JsonEncoder(config.encoder)
            return dict.fromkeys(self._routes, encoder)
        registry = config.encoder.schema_registry
        schema_topic = None
        if registry is None:
            schema_topic = CompactedTopic(sink, config.encoder.schema_topic)
            schema_topic.ensure(config.sink.replication_factor)
        encoders: dict[str, Encoder] = {}
        for source in config.sources:
            table = source.declared_schema
            assert table is not None  # noqa: S101 - the config requires it for Avro
            schemas = OutputSchemas.of(table, config.encoder)
            output = self._routes[source.topic]
            if registry is not None:
                framing = register(registry.client_config(), output, schemas)
            else:
                assert schema_topic is not None  # noqa: S101
                framing = publish(schema_topic, schemas)
            encoders[source.topic] = AvroEncoder(schemas, framing, config.encoder, source.table)
        if schema_topic is not None:
            schema_topic.close()
        return encoders

    def load_checkpoint(self) -> Checkpoint | None:
        """The changefeed's checkpoint record, or None for a new changefeed."""
        data = self.checkpoints.get(self.config.changefeed_id)
        if data is None:
            return None
        checkpoint = decode(data)
        if checkpoint.changefeed_id != self.config.changefeed_id:
            raise CheckpointError(
                f"checkpoint keyed {self.config.changefeed_id!r} names {checkpoint.changefeed_id!r}"
            )
        return checkpoint

    def _check_offsets_exist(self, source: dict[str, Any]) -> None:
        """Refuse to resume when records the changefeed still needs were deleted.

        That is every record from a partition's checkpointed offset on, and, while the
        initial scan is unfinished, the ranges of its pending chunks.
        """
        from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415

        needed: dict[SourcePartition, tuple[int, str]] = {}
        for sp, progress in self.frontier.progress().items():
            if progress.offset is not None:
                needed[sp] = (progress.offset, f"after resolved time {progress.resolved}")
        for chunk in [] if self.backfill is None else self.backfill.pending():
            needed[chunk.partition] = (chunk.start, "of the unfinished initial scan")
        consumer = Consumer({**source, "group.id": "highwater-offset-check"})
        gone = []
        try:
            for sp, (offset, what) in sorted(needed.items()):
                low, _high = consumer.get_watermark_offsets(
                    TopicPartition(sp.topic, sp.partition), timeout=30
                )
                if low > offset:
                    gone.append(f"{sp} offsets {offset}..{low - 1} ({what})")
        finally:
            consumer.close()
        if gone:
            raise SourceError(
                "source data this changefeed still needs was deleted from Kafka, so it cannot "
                "resume without losing changes: " + "; ".join(gone)
            )

    def starting_offsets(self) -> str:
        """Spark's ``startingOffsets``: each partition where the frontier left it."""
        offsets: dict[str, dict[str, int]] = {}
        for sp, progress in sorted(self.frontier.progress().items()):
            offsets.setdefault(sp.topic, {})[str(sp.partition)] = (
                -2 if progress.offset is None else progress.offset
            )
        return json.dumps(offsets)

    # -- the streaming query --------------------------------------------------------------

    def start_stream(self) -> StreamingQuery:
        """Start the streaming query where the frontier stands (returns at once)."""
        config = self.config
        reader = (
            self.spark.readStream.format("kafka")
            .options(**spark_kafka_options(config.kafka, source=True))
            .option("subscribe", ",".join(self._routes))
            .option("startingOffsets", self.starting_offsets())
            .option("failOnDataLoss", "true")
            .option("includeHeaders", "true")
        )
        if config.spark.max_offsets_per_trigger:
            reader = reader.option(
                "maxOffsetsPerTrigger", str(config.spark.max_offsets_per_trigger)
            )
        base = config.spark.checkpoint_location
        self._scratch = Path(
            tempfile.mkdtemp(prefix=f"highwater-{config.changefeed_id}-", dir=base)
        )
        writer = (
            reader.load()
            .writeStream.foreachBatch(self._on_batch)
            .option("checkpointLocation", str(self._scratch))
            .queryName(f"highwater-{config.changefeed_id}")
        )
        trigger = config.spark.trigger
        if trigger.available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(
                processingTime=f"{trigger.processing_time.total_seconds()} seconds"
            )
        log.info("changefeed %s: %s", config.changefeed_id, self._routes)
        return writer.start()

    def run(self) -> None:
        """Prepare, scan if a scan is due, then stream until the end or an error.

        The end is ``end_time``, a stop, or the end of an ``available_now`` drain.
        """
        try:
            if self._query is not None:
                check_query(self.spark, *self._query, self.config.encoder)
            self.prepare()
            scanned = self.backfill is None or self.initial_scan()
            if scanned and not (self._nothing_to_do or self._finished):
                self._state = "running"
                self._stream()
            if self._finished or self._nothing_to_do:
                self._finish()
            else:
                self._publish_status("stopped")
        except Exception as exc:
            self._publish_status("failed", error=str(exc) or repr(exc), best_effort=True)
            raise
        finally:
            self._release()

    def _stream(self) -> None:
        """The streaming query, until ``end_time``, a stop, a drain's end or an error."""
        query = self.start_stream()
        while query.isActive:
            self._tick()
            if self._finished or self.stop_request.is_set() or self._error is not None:
                self._close(query)
                break
            try:
                query.awaitTermination(1)
            except Exception:
                break
        if self._error is not None:
            raise self._error
        exception = query.exception()
        if exception is not None:
            first = str(exception).strip().splitlines()[0]
            raise SourceError(f"the streaming query failed: {first}") from None
        if not self._closing:  # an available_now drain ended by itself
            with self._lock:
                self._after_batch(final=True)

    def _finish(self) -> None:
        """Done for good: the source data is not needed any more."""
        if self.safepoint is not None:
            self.safepoint.release()
        self._publish_status("finished")

    def _release(self) -> None:
        """Close the producers and remove the scratch folder, whatever got created."""
        for resource in ("checkpoints", "broadcaster", "jobs"):
            if hasattr(self, resource):
                getattr(self, resource).close()
        if self.safepoint is not None:
            self.safepoint.registry.close()
        if hasattr(self, "_scratch"):
            shutil.rmtree(self._scratch, ignore_errors=True)

    def _close(self, query: StreamingQuery) -> None:
        self._closing = True  # batches that start from now on do nothing
        with self._lock:  # wait for the batch in flight
            if self._error is None:
                self._after_batch(final=True)
        query.stop()
        log.info(
            "changefeed %s: stopped at high-water %s",
            self.config.changefeed_id,
            self.frontier.high_water(),
        )

    # -- the initial scan ----------------------------------------------------------------

    def initial_scan(self) -> bool:
        """Run the scan's pending chunks; then the first marker, at the statement time.

        Each finished chunk is recorded in the checkpoint before it counts as done. Returns
        False when a stop was requested first (the chunks in flight run again next time).
        """
        config, backfill, statement = self.config, self.backfill, self.statement_time
        assert backfill is not None  # noqa: S101 - prepare() set it
        assert statement is not None  # noqa: S101
        plan = ScanPlan(self._plan(thresholds={}), statement, changes=config.scan_mode != "only")
        progress = self._progress = ScanProgress.of(backfill)
        self._state = "scanning"
        self._publish_status()
        log.info(
            "initial scan at %s: %d chunks to go of %d (%s records)",
            statement,
            len(backfill.pending()),
            progress.chunks_total,
            f"{progress.records_total:,}",
        )

        def finished(chunk: Chunk, result: BatchResult) -> None:
            with self._lock:
                self._raise_first_bad(result, plan.batch)
                assert self.backfill is not None  # noqa: S101
                self.backfill = self.backfill.finished(chunk, result.emitted)
                progress.add(chunk, result.emitted)
                self.stats.scan_rows += result.emitted
                self.stats.duplicates += result.duplicates
                self.stats.bad += result.bad
                self._write_checkpoint(last_marker=None)
                log.info(
                    "initial scan: %s done (%d rows); %s",
                    chunk.partition,
                    result.emitted,
                    progress_line(progress.to_json()),
                )
                faults.reached("after_chunk")

        scan = InitialScan(
            self.spark,
            chunk_job(self.spark, config, self._query),
            plan,
            parallelism=self.spark.sparkContext.defaultParallelism,
            rate_limit=config.initial_scan.rate_limit,
            on_chunk=finished,
        )
        if not scan.run(backfill.pending(), self.stop_request.is_set):
            log.info("initial scan stopped; %s", progress_line(progress.to_json()))
            return False
        # The whole snapshot is acknowledged: the statement time is resolved.
        self.backfill = None
        self._state = "running"
        end = config.end_time
        marker = statement if end is None else min(statement, end)
        if config.resolved.enabled:
            self._write_checkpoint(last_marker=marker)
            self._emit_marker(marker)
        else:
            self._write_checkpoint(last_marker=self.last_marker)
        self._finished = config.scan_mode == "only" or (end is not None and statement >= end)
        log.info("initial scan done: %s", progress_line(progress.to_json()))
        return True

    def _publish_status(
        self, state: str | None = None, *, error: str | None = None, best_effort: bool = False
    ) -> None:
        """Write the job status (``jobs.topic``) an operator reads with ``highwater changefeed``."""
        if not hasattr(self, "jobs"):
            return  # failed before the topic was set up
        if state is not None:
            self._state = state
        status = JobStatus(
            changefeed_id=self.config.changefeed_id,
            state=self._state,
            high_water=self.frontier.high_water() if hasattr(self, "frontier") else None,
            statement_time=self.statement_time,
            last_marker=self.last_marker,
            scan=self._scan_summary if self._progress is None else self._progress.to_json(),
            error=error,
            safepoint=None
            if self.safepoint is None or self.safepoint.current is None
            else self.safepoint.current.to_json(),
            warnings=list(self._warnings),
        )
        try:
            self.jobs.put(self.config.changefeed_id, status.encode())
        except HighwaterError as exc:
            if not best_effort:
                raise
            log.warning("could not write the job status: %s", exc)

    # -- one batch ------------------------------------------------------------------------

    def _on_batch(self, batch: DataFrame, batch_id: int) -> None:
        if self._closing or self._error is not None:
            return  # not checkpointed: the next run reads these offsets again
        with self._lock:
            try:
                self._process(batch, batch_id)
            except HighwaterError as exc:
                self._error = exc
                raise
            except Exception as exc:
                # Spark or Kafka gave up (the clients retry with back-off first): one clear
                # error; nothing of this batch was checkpointed.
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
                self._error = SinkError(f"batch {batch_id} failed, not checkpointed: {first}")
                raise self._error from exc

    def _process(self, batch: DataFrame, batch_id: int) -> None:
        from pyspark.sql import Observation  # noqa: PLC0415

        config = self.config
        plan = self._plan(
            thresholds={
                (sp.topic, sp.partition): p.resolved for sp, p in self.frontier.progress().items()
            }
        )
        observation = Observation(f"batch-{batch_id}")
        if self._query is not None:
            batch = apply_query(batch, *self._query, config.encoder)
        records = kafka_records(batch, plan, observation)
        faults.reached("during_write")
        started = time.perf_counter()
        write_records(records, config)
        result = read_result(observation)
        wrote = time.perf_counter() - started
        faults.reached("after_write")
        self._raise_first_bad(result, plan)
        for seen in result.partitions:
            self.frontier.forward(
                seen.partition, resolved=seen.resolved, next_offset=seen.next_offset
            )
        self._dirty = self._dirty or bool(result.partitions)
        self.stats.batches += 1
        self.stats.rows += result.emitted
        self.stats.duplicates += result.duplicates
        self.stats.bad += result.bad
        log.info(
            "batch %d: %d rows emitted, %d duplicates dropped, %d bad in %.2fs; high-water %s",
            batch_id,
            result.emitted,
            result.duplicates,
            result.bad,
            wrote,
            self.frontier.high_water(),
        )
        self._after_batch()

    def _plan(self, thresholds: dict[tuple[str, int], Hlc]) -> BatchPlan:
        config = self.config
        return BatchPlan(
            thresholds=thresholds,
            tables=self._tables,
            formats=self._formats,
            routes=self._routes,
            encoders=self._encoders,
            dlq_topic=config.effective_dlq_topic if config.on_error == "dlq" else None,
            end_time=config.end_time,
        )

    def _raise_first_bad(self, result: BatchResult, plan: BatchPlan) -> None:
        """Without a dead-letter topic, an undecodable record stops the job, named."""
        if result.first_bad is not None and plan.dlq_topic is None:
            ref, reason = result.first_bad
            action = "paused" if self.config.on_error == "pause" else "stopped"
            raise SourceDecodeError(ref, reason, action=action)

    # -- checkpoints and markers ----------------------------------------------------------

    def _after_batch(self, *, final: bool = False) -> None:
        """Checkpoint and emit a marker if due; notice ``end_time``."""
        config = self.config
        now = self._clock()
        hw = self.frontier.high_water()
        end = config.end_time
        reached_end = end is not None and hw >= end
        marker = min(hw, end) if end is not None else hw
        marker_due = (
            config.resolved.enabled
            and marker > (self.last_marker or ZERO)
            and (
                reached_end
                or final
                or now - self._last_marker_at >= config.resolved.interval.total_seconds()
            )
        )
        since_checkpoint = now - self._last_checkpoint_at
        frequency = config.checkpoint.min_checkpoint_frequency.total_seconds()
        lag = config.checkpoint.frontier_highwater_lag_checkpoint_threshold.total_seconds()
        checkpoint_due = (marker_due and self._checkpointed_hw < marker) or (
            self._dirty
            and (
                final
                or marker_due
                or reached_end
                or (hw > self._checkpointed_hw and since_checkpoint >= frequency)
                or (self.frontier.lag_nanos() / 1e9 > lag and since_checkpoint >= frequency)
            )
        )
        if checkpoint_due:
            self._write_checkpoint(last_marker=marker if marker_due else self.last_marker)
        if marker_due:
            self._emit_marker(marker)
        if reached_end:
            self._finished = True
        self._check_lag(hw)
        self._refresh_safepoint()

    def _tick(self) -> None:
        """Between batches: keep the safepoint fresh, notice a stalled high-water mark.

        Spark runs no batch while the sources are quiet, so this runs from the wait loop.
        """
        with self._lock:
            if self._error is not None or self._closing:
                return
            try:
                self._check_lag(self.frontier.high_water())
                self._refresh_safepoint()
            except HighwaterError as exc:
                self._error = exc

    def _check_lag(self, hw: Hlc) -> None:
        """Fail when the high-water mark stood still for longer than ``gc_ttl``.

        Its safepoint would hold GC back for ever; failing lets it expire (seed ``003_…``).
        """
        if self.safepoint is None or self.stats.batches == 0:
            return  # counted from the first batch: starting up is not standing still
        wall = self.safepoint.registry.clock()
        if hw > self._lag_hw or self._hw_moved_at is None:
            self._lag_hw, self._hw_moved_at = hw, wall
        elif wall - self._hw_moved_at > self.safepoint.ttl:
            raise SafepointError(
                f"GC TTL exceeded: the high-water mark {hw} has not moved for more than gc_ttl "
                f"({self.safepoint.ttl:g} s), so the changefeed stops rather than hold GC "
                "back; hold GC with 'highwater safepoint set' to resume it later without a gap"
            )

    def _emit_marker(self, marker: Hlc) -> None:
        """Broadcast ``marker`` (its checkpoint is durable already)."""
        started = time.perf_counter()
        self.broadcaster.emit(marker)
        log.info("marker %s sent in %.1f ms", marker, (time.perf_counter() - started) * 1000)
        self.stats.markers.append((time.time(), marker))
        self.last_marker = marker
        self._last_marker_at = self._clock()
        faults.reached("after_marker")

    def _write_checkpoint(self, *, last_marker: Hlc | None) -> None:
        config = self.config
        checkpoint = Checkpoint.of(
            config.changefeed_id,
            self.frontier,
            last_marker=last_marker,
            statement_time=self.statement_time,
            backfill=None if self.backfill is None else self.backfill.to_record(),
            config_fingerprint=self._fingerprint,
        )
        started = time.perf_counter()
        data = checkpoint.encode(config.checkpoint.frontier_checkpoint_max_bytes)
        self.checkpoints.put(config.changefeed_id, data)
        self.stats.checkpoint_seconds.append(time.perf_counter() - started)
        self._checkpointed_hw = checkpoint.high_water
        self._last_checkpoint_at = self._clock()
        self._dirty = False
        log.info(
            "checkpoint at high-water %s (%d bytes, %.1f ms)",
            checkpoint.high_water,
            len(data),
            (time.perf_counter() - started) * 1000,
        )
        self._refresh_safepoint()
        self._publish_status()

    def _refresh_safepoint(self) -> None:
        """Keep the safepoint at the restart position and its TTL renewed (once a minute)."""
        if self.safepoint is not None:
            self.safepoint.refresh(self._restart_time(), self._needed_offsets())


def run(config: ChangefeedConfig, spark: SparkSession, stop: StopRequest | None = None) -> None:
    """Run the changefeed described by ``config``."""
    Changefeed(config, spark, stop=stop).run()
