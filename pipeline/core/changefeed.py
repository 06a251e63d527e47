"""The changefeed: the coordinator on the Spark driver.

The executors are the aggregators (``batch.py``, ``scan.py``: decode, filter, encode, write);
the driver decides what must be decided in one place, and this class keeps the decisions in
order: one batch, chunk or tick at a time, under one lock.

=================  ==========================================================================
``setup.py``       topics, encoders, clients; where it starts (create or resume), the
                   safepoint held before anything is read
``stream.py``      the streaming query, and one micro-batch's write
``scan_driver.py`` the initial scan's chunks, one Spark job each
``policy.py``      when to checkpoint and which marker may go out (pure)
``position.py``    the frontier, statement time and unfinished scan the checkpoint keeps
``status.py``      the job status an operator reads, and the run's numbers
=================  ==========================================================================

A run is: set up, the initial scan if one is due, then the streaming query until
``end_time``, a stop (SIGTERM, between batches), the end of an ``available_now`` drain, or an
error. After every batch (and chunk) the :class:`~.policy.Policy` says whether to write the
checkpoint record and which resolved marker may follow it; the safepoint follows what is
durable.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.config import ChangefeedConfig
from schemas.errors import (
    HighwaterError,
    RecordRef,
    SchemaChangeError,
    SinkError,
    SourceDecodeError,
    SourceError,
    cause,
)
from schemas.hlc import Hlc
from sinks.admin import ensure_topics
from sinks.compacted import COMPACTED

from . import faults
from .backfill import Backfill, Chunk, ScanProgress
from .batch import BatchAbandoned, BatchPlan, BatchResult, Settled
from .frontier import SourcePartition
from .kafka_clients import client_config, low_offsets
from .lifecycle import ChangefeedSpec, SpecWatch, wait_while_paused
from .metrics import STATES, ChangefeedMetrics
from .policy import Cadence, Decision, HighWaterWatch, Policy
from .position import Position
from .queries import check_query
from .rescan import Rescan, rescan_backfill
from .scan import ScanPlan
from .scan_driver import InitialScan, chunk_job
from .setup import Outputs, check_history_complete, find_start, open_outputs
from .status import ChangefeedStats
from .stream import start_query, write_batch
from .transaction_feed import TransactionFeed
from .walk import walkable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)


class StopRequest:
    """A request to stop after the current batch: SIGTERM, a stop file, or the spec.

    ``reason`` is the state the run ends in: ``stopped`` (a signal or stop file), or what the
    changefeed's spec asks (``paused``, ``removed``; see ``lifecycle.py``), read at most once
    a second through :meth:`follow`.
    """

    def __init__(self, stop_file: Path | None = None) -> None:
        self._event = threading.Event()
        self._file = stop_file
        self.reason = "stopped"
        self._spec: Callable[[], ChangefeedSpec | None] | None = None
        self._asked = 0.0

    def follow(self, spec: Callable[[], ChangefeedSpec | None]) -> None:
        """Stop too when ``spec()`` no longer says ``running``."""
        self._spec = spec

    def set(self, reason: str = "stopped") -> None:
        """Ask the changefeed to stop (the first reason given stands)."""
        if not self._event.is_set():
            self.reason = reason
        self._event.set()

    def is_set(self) -> bool:
        """True once a stop was asked for."""
        if self._file is not None and self._file.exists():
            self.set()
        if not self._event.is_set() and self._spec is not None:
            now = time.monotonic()
            if now - self._asked >= 1.0:
                self._asked = now
                spec = self._spec()
                if spec is not None and spec.desired != "running":
                    self.set(spec.desired)
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
        self.stats = ChangefeedStats()
        self.metrics = ChangefeedMetrics(config.changefeed_id)
        self.policy = Policy(Cadence.of(config))
        self._clock = clock
        self._lock = threading.Lock()  # one batch, chunk or tick at a time
        self._resources = ExitStack()  # every client and folder a run opens, closed at its end
        self._outputs: Outputs | None = None  # set up by prepare()
        self._position: Position | None = None
        # what a restart would read, as of the last durable checkpoint: the safepoint holds it
        self._durable: tuple[Hlc, dict[SourcePartition, int]] | None = None
        self._watch = HighWaterWatch(config.safepoints.gc_ttl.total_seconds())
        self._closing = False  # batches that start from now on do nothing
        self._finished = False  # end_time reached, or an ``only`` scan done: release all
        self._error: BaseException | None = None  # a batch's error, raised by the loop
        self._spec: ChangefeedSpec | None = None  # as it stood when the run started
        self._paused_at: str | None = None  # on_error: pause stopped here (the error)
        self.query: StreamingQuery | None = None  # the run's streaming query (its progress)

    # -- what tests, tools and the status read while it runs -------------------------------

    @property
    def statement_time(self) -> Hlc | None:
        """The statement time (None until prepared)."""
        return None if self._position is None else self._position.statement_time

    @property
    def backfill(self) -> Backfill | None:
        """The initial scan still to run or finish, if any."""
        return None if self._position is None else self._position.backfill

    @property
    def last_marker(self) -> Hlc | None:
        """The last resolved marker sent (or covered by the checkpoint resumed from)."""
        return self.policy.last_marker

    @property
    def outputs(self) -> Outputs:
        """What the run writes through (after :meth:`prepare`)."""
        if self._outputs is None:
            raise HighwaterError("the changefeed is not prepared yet")
        return self._outputs

    @property
    def position(self) -> Position:
        """Where the changefeed stands (after :meth:`prepare`)."""
        if self._position is None:
            raise HighwaterError("the changefeed is not prepared yet")
        return self._position

    # -- a run ------------------------------------------------------------------------------

    def run(self) -> None:
        """Prepare, scan if a scan is due, then stream until the end, a stop or an error.

        A changefeed whose spec says ``paused`` waits for ``resume`` first; one that says
        ``removed`` does not start.
        """
        try:
            if not self._admitted():
                return
            if self.config.metrics.enabled:
                self.metrics.serve(self.config.metrics.host, self.config.metrics.port)
                self._resources.callback(self.metrics.close)
            query = self.config.query
            if query is not None:
                check_query(self.spark, *query, self.config.encoder)
            self.prepare()
            scanned = self.position.backfill is None or self.initial_scan()
            if scanned and not self._finished:
                self.outputs.status.state = "running"
                self._stream()
            reason = self.stop_request.reason
            released = self._finished or reason == "removed"  # the source data is not needed
            if released and self.outputs.safepoint is not None:
                self.outputs.safepoint.release()
            self._publish("finished" if self._finished else reason, error=self._paused_at)
        except Exception as exc:
            self._publish("failed", error=str(exc) or repr(exc), best_effort=True)
            raise
        finally:
            self._resources.close()

    def _admitted(self) -> bool:
        """Follow the spec; wait while it says ``paused``. False: stopped before starting."""
        config = self.config
        client = client_config(config.kafka)
        ensure_topics(  # the watch follows the jobs topic from its start
            client,
            {config.jobs.topic: 1},
            replication_factor=config.checkpoint.replication_factor,
            topic_config=COMPACTED,
        )
        watch = SpecWatch(client, config.jobs.topic, config.changefeed_id)
        self._resources.callback(watch.close)
        self._spec = spec = wait_while_paused(
            watch.current,
            self.stop_request.is_set,
            on_wait=lambda s: log.warning(
                "changefeed %s is paused (%s): waiting for resume",
                config.changefeed_id,
                s.reason or "by an operator",
            ),
        )
        if spec is not None and spec.desired == "removed":
            raise HighwaterError(
                f"changefeed {config.changefeed_id!r} was removed: create it again to run it"
            )
        self.stop_request.follow(watch.current)
        return not self.stop_request.is_set()

    def prepare(self) -> None:
        """Topics, encoders and clients; then the start, its safepoint held.

        A new changefeed's start is checkpointed before anything is emitted.
        """
        outputs = self._outputs = open_outputs(self.config, self._resources)
        outputs.status.metrics_url = self.metrics.url
        self.metrics.replicas(outputs.replicas.found)
        position = self._position = find_start(self.config, outputs)
        position.transactions = TransactionFeed.of(
            self.config,
            outputs.source,
            outputs.partitions,
            {} if outputs.restored is None else outputs.restored.transactions,
        )
        if position.transactions is not None:
            self._resources.callback(position.transactions.close)
        self._durable = (position.restart_time(), position.needed_offsets())
        restored = outputs.restored
        if restored is None:
            self._write_checkpoint(last_marker=None)
            return
        pending = self.policy.resume(
            restored.high_water, restored.last_marker, restored.marker_sent
        )
        if pending is not None:
            log.info("re-sending marker %s: checkpointed, perhaps never sent", pending)
            self._emit_marker(pending)
            self._write_checkpoint(last_marker=pending)  # which now says it was sent
        self._finished = self.config.scan_mode == "only" and position.backfill is None

    def _stream(self) -> None:
        """The streaming query, until ``end_time``, a stop, a drain's end or an error."""
        self.stats.stream_started = time.perf_counter()
        query = self.query = start_query(
            self.spark,
            self.config,
            self.position.starting_offsets(),
            self._on_batch,
            self._resources,
            headers=not walkable(
                BatchPlan.of(self.config, self.outputs.schemas.encoders, thresholds={})
            ),
        )
        while query.isActive:
            self._check_replicas()
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
            raise SourceError(f"the streaming query failed: {cause(exception)}") from None
        if not self._closing:  # an available_now drain ended by itself
            with self._lock:
                self._after_batch(final=True)
        self.stats.stream_ended = time.perf_counter()  # its last checkpoint and marker out

    def _close(self, query: StreamingQuery) -> None:
        self._closing = True
        with self._lock:  # wait for the batch in flight
            if self._error is None:
                self._after_batch(final=True)
        query.stop()
        log.info(
            "changefeed %s: stopped at high-water %s",
            self.config.changefeed_id,
            self.position.frontier.high_water(),
        )

    # -- the initial scan ---------------------------------------------------------------------

    def initial_scan(self) -> bool:
        """Run the scan's pending chunks; then the first marker, at the statement time.

        Each finished chunk is recorded in the checkpoint before it counts as done. Returns
        False when a stop was requested first (the chunks in flight run again next time).
        The scan of tables an update added (at a time of its own) ends like a batch: the
        marker goes as far as the high-water mark has come; so does that of a table emitted
        again at its schema change that a killed run left unfinished (``rescan.py``).
        """
        config, position, status = self.config, self.position, self.outputs.status
        backfill = position.backfill
        assert backfill is not None  # noqa: S101 - run() checked
        statement = backfill.time or position.statement_time
        assert statement is not None  # noqa: S101 - a scan has a statement time
        schemas, rescan, defaults = self.outputs.schemas, None, None
        if backfill.change is not None:  # its table's schema as it was at the change
            rescan = schemas.rescan_at(backfill.change, statement)
        elif backfill.time is None:  # the first: the tables' schemas as they are now
            defaults = schemas.before_scan()
            status.schemas = schemas.status()
        if not self._scan(backfill, statement, self._chunk_done, rescan=rescan, defaults=defaults):
            return False
        # The first scan only: beside an added table's scan the other tables stream on, and
        # their transactions at or below its time may still be in flight there.
        if position.transactions is not None and backfill.time is None:
            position.transactions.check_snapshot(statement, position.frontier)
        position.backfill = None  # the whole snapshot is acknowledged: T is resolved
        status.state = "running"
        only = config.scan_mode == "only"
        if backfill.time is None:
            self._carry_out(self.policy.after_scan(statement, only=only))
        else:
            self.policy.progressed()
            with self._lock:
                self._after_batch(final=True)
            self._finished = self._finished or only
        return True

    def _scan(
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
        config, position, status = self.config, self.position, self.outputs.status
        status.progress = ScanProgress.of(backfill)
        self.metrics.scan(status.progress)
        self._publish("scanning")
        transactions = position.transactions
        plan = BatchPlan.of(
            config,
            self.outputs.schemas.encoders,
            thresholds={},
            skip=self._skip(),
            commits=None if transactions is None else transactions.commit_times(),
        )
        scan = InitialScan(
            self.spark,
            chunk_job(self.spark, config),
            ScanPlan(
                plan,
                statement,
                changes=config.scan_mode != "only" and rescan is None,
                again=rescan is not None,
                defaults=defaults,
            ),
            parallelism=self.spark.sparkContext.defaultParallelism,
            rate_limit=config.initial_scan.rate_limit,
            on_chunk=on_chunk,
            progress=status.progress,
        )
        return scan.run(backfill.pending(), self.stop_request.is_set)

    def _chunk_done(self, chunk: Chunk, result: BatchResult) -> None:
        """A chunk's rows are acknowledged: record it in the checkpoint before it counts."""
        with self._lock:
            self._chunk_recorded(chunk, result)

    def _chunk_recorded(self, chunk: Chunk, result: BatchResult) -> None:
        """:meth:`_chunk_done`, the lock held (a batch's scan of a table at its schema change)."""
        self._check_replicas()  # a long scan is watched as the stream is
        try:
            result.raise_first_bad(self.config.on_error)
        except SourceDecodeError as exc:
            if self.config.on_error != "pause":
                raise
            self._pause_at(exc)  # the scan stops; the chunk runs again after resume
            return
        if result.schema_change is not None:  # a row its table's schema cannot hold
            self._pause_at(self.outputs.schemas.explain(result.schema_change))
            return  # as at a bad record: the chunk runs again after the update and resume
        position, progress = self.position, self.outputs.status.progress
        assert position.backfill is not None  # noqa: S101 - the scan is running
        assert progress is not None  # noqa: S101
        position.backfill = position.backfill.finished(chunk, result.emitted)
        for seen in result.partitions:  # the stream tells re-sends after the scan's
            if seen.position is not None:
                position.frontier.read_to(seen.partition, seen.position)
        if position.transactions is not None:  # what the scan read counts for them
            position.transactions.saw(result)
        progress.add(chunk, result.emitted)
        self.stats.count(result, scan=True)
        self.metrics.batch(result, None, scan=True)
        self.metrics.scan(progress)
        self._write_checkpoint(last_marker=None)
        faults.reached("after_chunk")

    def _rescan(self, rescan: Rescan, result: BatchResult) -> None:
        """Emit a table again at its schema change (``backfill``), before the batch's rests.

        Its source partitions from their first offsets to where the batch left them, at the
        change's commit time (``rescan.py``); recorded in the checkpoint as a scan, so a kill
        scans the rest first on restart.
        """
        position, outputs = self.position, self.outputs
        table = self.config.tables[rescan.topic]
        ours = [sp for sp in outputs.partitions if sp.topic == rescan.topic]
        low = low_offsets(outputs.source, ours)
        check_history_complete(low, outputs.source_configs)
        backfill = rescan_backfill(rescan, outputs.partitions, low, result, position.frontier)
        position.backfill = backfill
        log.info("table %s: emitted again at its schema change %s", table, rescan.time)
        self._write_checkpoint(last_marker=None)
        if not self._scan(backfill, rescan.time, self._chunk_recorded, rescan=rescan):
            raise BatchAbandoned(f"stopped while {table} was emitted again at its schema change")
        position.backfill = None
        outputs.status.state = "running"
        self.metrics.backfills.inc()
        self._write_checkpoint(last_marker=None)

    # -- one batch ----------------------------------------------------------------------------

    def _on_batch(self, batch: DataFrame, batch_id: int) -> None:
        with self._lock:  # a stop waits for the batch in flight, and no batch follows it
            if self._closing or self._error is not None:
                return  # not checkpointed: the next run reads these offsets again
            try:
                started = time.perf_counter()
                written = self._process(batch, batch_id)
                self.stats.batch_seconds.append((written, time.perf_counter() - started))
            except BatchAbandoned as exc:
                log.info("batch %d not checkpointed (%s): it runs again on resume", batch_id, exc)
            except HighwaterError as exc:
                self._error = exc
                raise
            except Exception as exc:
                # Spark or Kafka gave up (the clients retry with back-off first): one clear
                # error; nothing of this batch was checkpointed.
                self._error = SinkError(f"batch {batch_id} failed, not checkpointed: {cause(exc)}")
                raise self._error from exc

    def _process(self, batch: DataFrame, batch_id: int) -> float:
        """Write one batch, then move the frontier and do what is due; the seconds writing."""
        frontier = self.position.frontier
        floors = {(sp.topic, sp.partition): p.resolved for sp, p in frontier.progress().items()}
        transactions = self.position.transactions
        plan = BatchPlan.of(
            self.config,
            self.outputs.schemas.encoders,
            floors,
            frontier.high_water(),
            skip=self._skip(),
            positions=frontier.positions(),
            commits=None if transactions is None else transactions.commit_times(),
        )
        result, seconds = write_batch(batch, batch_id, plan, self.config, self._settle)
        for seen in result.partitions:
            frontier.forward(
                seen.partition,
                resolved=seen.resolved,
                next_offset=seen.next_offset,
                position=seen.position,
            )
        if transactions is not None:
            transactions.saw(result)
            transactions.advance(frontier)
            self._report_transactions(transactions)
        if result.partitions:
            self.policy.progressed()
        self.stats.count(result)
        self.metrics.batch(result, seconds)
        self.metrics.lags(frontier)
        log.info(
            "batch %d: %s in %.2fs; high-water %s", batch_id, result, seconds, frontier.high_water()
        )
        if result.schema_change is not None:
            # Each partition was written up to the first row of the new shape: checkpoint just
            # before it, then pause there, naming it, until the schema is updated.
            self._after_batch(final=True)
            self._pause_at(self.outputs.schemas.explain(result.schema_change))
            return seconds
        if result.first_bad is not None and self.config.on_error != "dlq":
            # Each partition was written up to its first bad record: checkpoint just before
            # it, then stop there, naming it.
            self._after_batch(final=True)
            try:
                result.raise_first_bad(self.config.on_error)
            except SourceDecodeError as exc:
                if self.config.on_error != "pause":
                    raise
                self._pause_at(exc)
                return seconds
        self._after_batch()
        return seconds

    def _settle(self, plan: BatchPlan, result: BatchResult) -> Settled:
        """Rests that wait for a transaction's END (read first), or for an evolved schema.

        A table evolved under ``backfill`` is emitted again before its rests run.
        """
        rests = result.rests
        transactions, ends = self.position.transactions, [r for r in rests if r.waits_for]
        if ends and transactions is not None:
            plan = transactions.await_commits(plan, ends, self.stop_request.is_set)
        else:
            ends = []
        schemas = self.outputs.schemas
        before = schemas.changes
        plan, evolved, later = schemas.settle(plan, rests)
        if evolved:
            self.metrics.schema_changes.inc(schemas.changes - before)
            self.outputs.status.schemas = schemas.status()
        for rescan in schemas.take_rescans():
            self._rescan(rescan, result)
        return Settled(plan, [*ends, *evolved], later)

    def _skip(self) -> RecordRef | None:
        """The bad record an operator chose to divert (``resume --skip-bad-record``), if any."""
        spec = self._spec
        return spec.bad_record if spec is not None and spec.skip_bad_record else None

    def _pause_at(self, exc: SourceDecodeError | SchemaChangeError) -> None:
        """The spec says paused at the record, and the run stops.

        ``on_error: pause`` at a bad record (which ``resume --skip-bad-record`` may divert), or
        a schema change (which an update of the table's schema lets through).
        """
        log.error("%s", exc)
        self._paused_at = str(exc)
        spec = self._spec or ChangefeedSpec(self.config.changefeed_id, "running")
        bad = exc.record if isinstance(exc, SourceDecodeError) else None
        self.outputs.specs.put(
            spec.to("paused", reason=str(exc), bad_record=bad, skip_bad_record=False)
        )
        self._closing = True  # no later batch may write what follows the record
        self.stop_request.set("paused")

    # -- carrying out the policy's decisions ----------------------------------------------------

    def _after_batch(self, *, final: bool = False) -> None:
        """Checkpoint and emit a marker if due; notice ``end_time`` and a stalled high-water."""
        frontier = self.position.frontier
        decision = self.policy.after_batch(frontier.high_water(), self._clock(), final=final)
        self._carry_out(decision, final=final)
        self._check_stall()
        self._refresh_safepoint()

    def _carry_out(self, decision: Decision, *, final: bool = False) -> None:
        """The checkpoint first, then the marker it covers; at a run's end, confirm it."""
        if decision.checkpoint:
            self._write_checkpoint(last_marker=decision.record_marker)
        if decision.marker is not None:
            faults.reached("before_marker")
            self._emit_marker(decision.marker)
        if decision.finished:
            self._finished = True
        if (final or decision.finished) and self.policy.unconfirmed():
            self._write_checkpoint(last_marker=self.policy.last_marker)

    def _tick(self) -> None:
        """Between batches: what is due goes out as if a batch had just ended.

        Spark runs no batch while the sources are quiet, so this runs from the wait loop
        (about once a second): a marker the resolved interval held back at the last batch is
        sent once it is due, not at the next batch, which may be long in coming; the
        safepoint stays fresh, a stalled high-water mark is noticed.
        """
        with self._lock:
            if self._error is not None or self._closing:
                return
            try:
                transactions = self.position.transactions
                if transactions is not None:
                    if transactions.advance(self.position.frontier):
                        self.policy.progressed()  # quiet sources, a transaction completed
                    self._report_transactions(transactions)
                self._after_batch()
                self.metrics.lags(self.position.frontier)
            except HighwaterError as exc:
                self._error = exc

    def _check_replicas(self) -> None:
        """Re-read the relied-on topics' replicas when due (outside the lock: batches go on).

        What changed is logged and goes into the job status' warnings and the gauge.
        """
        watch = self.outputs.replicas
        if not watch.due():
            return
        before = watch.warnings()
        try:
            self.metrics.replicas(watch.check())
        except SinkError as exc:
            log.warning("could not re-read the topics' replicas: %s", exc)
            return
        now = watch.warnings()
        if now == before:
            return
        for warning in now:
            log.warning("%s", warning)
        if not now:
            log.info("every topic the changefeed relies on is fully replicated again")
        with self._lock:
            self.outputs.status.replication = now
            if self._error is None and not self._closing:
                self._publish(best_effort=True)

    def _report_transactions(self, transactions: TransactionFeed) -> None:
        """Stuck Debezium transactions into the job status' warnings and the gauge."""
        self.metrics.transactions(transactions.stuck, transactions.logs)
        warnings = transactions.warnings()
        status = self.outputs.status
        if warnings != status.transactions:
            status.transactions = warnings
            self._publish(best_effort=True)

    def _check_stall(self) -> None:
        """Fail when the high-water mark stood still for longer than ``gc_ttl``."""
        safepoint = self.outputs.safepoint
        if safepoint is None or not self.stats.batches:  # starting up is not standing still
            return
        now = safepoint.registry.clock()
        if self.config.unmarked_sources:
            return  # nothing resolves those: the high-water mark stands by design
        transactions = self.position.transactions
        if transactions is not None and not transactions.in_flight():
            self._watch.quiet(now)  # no transaction waits: the source is quiet, not stalled
        self._watch.check(self.position.frontier.high_water(), now)

    def _emit_marker(self, marker: Hlc) -> None:
        """Broadcast ``marker`` (its checkpoint is durable already)."""
        started = time.perf_counter()
        self.outputs.broadcaster.emit(marker)
        log.info("marker %s sent in %.1f ms", marker, (time.perf_counter() - started) * 1000)
        self.stats.markers.append((time.time(), marker))
        self.metrics.markers.inc()
        self.policy.marker_sent(marker, self._clock())
        faults.reached("after_marker")

    def _write_checkpoint(self, *, last_marker: Hlc | None) -> None:
        config, position = self.config, self.position
        checkpoint = position.checkpoint(config, last_marker, self.policy.sent)
        started = time.perf_counter()
        size = self.outputs.checkpoints.write(checkpoint)
        seconds = time.perf_counter() - started
        self.stats.checkpoint_seconds.append(seconds)
        self.metrics.checkpoint(seconds, size)
        self.policy.checkpointed(checkpoint.high_water, self._clock())
        self._durable = (position.restart_time(), position.needed_offsets())
        log.info(
            "checkpoint at high-water %s (%d bytes, %.1f ms)",
            checkpoint.high_water,
            size,
            seconds * 1000,
        )
        self._refresh_safepoint()
        self._publish()

    def _refresh_safepoint(self) -> None:
        """Keep the safepoint at the durable restart position, its TTL renewed (once a minute)."""
        safepoint = self.outputs.safepoint
        if safepoint is not None and self._durable is not None:
            safepoint.refresh(*self._durable)

    def _publish(
        self, state: str | None = None, *, error: str | None = None, best_effort: bool = False
    ) -> None:
        """Write the job status (``jobs.topic``) an operator reads with ``highwater changefeed``."""
        current = state
        if self._outputs is not None:  # else it failed before the topic was set up
            self._outputs.status.publish(
                self._position, self.policy.last_marker, state, error=error, best_effort=best_effort
            )
            current = self._outputs.status.state
        if current in STATES:
            self.metrics.state.state(current)


def run(config: ChangefeedConfig, spark: SparkSession, stop: StopRequest | None = None) -> None:
    """Run the changefeed described by ``config``."""
    Changefeed(config, spark, stop=stop).run()
