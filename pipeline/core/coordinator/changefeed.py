"""The changefeed: the coordinator on the Spark driver.

The executors are the aggregators (``batch/loop.py``, ``scan/scan.py``: decode, filter,
encode, write); the driver decides what must be decided in one place, and this class keeps
the decisions in order: one batch, chunk or tick at a time, under one lock. It is the lock,
the loop and the batch hook, and it asks the policy what is due after each; the rest has its
own room (paths under ``pipeline/core/``):

================================  ==========================================================
``operators/lifecycle.py``        the spec: admission (wait while paused), a pause at a
                                  record, the stop
``coordinator/setup.py``          topics, encoders, clients, the row sink
``coordinator/start.py``          where it starts (create or resume), the safepoint held
                                  before anything is read
``coordinator/stream.py``         the streaming query
``coordinator/rounds.py``         one micro-batch's rows: planned, written, its rests
                                  settled, the frontier moved
``coordinator/durable.py``        the policy's decisions carried out: the checkpoint, then
                                  the marker; the safepoint following
``coordinator/scan_driver.py``    the scans (initial, added tables, a table again), one
                                  Spark job per chunk
``resolved/resolvers.py``         what resolves the source partitions beside the stream
                                  (Debezium's transaction topics), per source format
``progress/policy.py``            when to checkpoint and which marker may go out (pure)
``progress/position.py``          the frontier, statement time and unfinished scan the
                                  checkpoint keeps
``operators/observers.py``        the run's numbers, metrics, job status and replica watch
================================  ==========================================================

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
from collections.abc import Callable
from contextlib import ExitStack, closing
from typing import TYPE_CHECKING, Generic, TypeVar, cast

from pipeline.config import ChangefeedConfig
from schemas.errors import (
    FencedError,
    HighwaterError,
    SinkError,
    SourceError,
    cause,
)
from schemas.hlc import Hlc

from ..batch import (
    BatchAbandoned,
    BatchResult,
    check_query,
    client_config,
)
from ..operators import Admission, Observers, StopRequest
from ..progress import TAKEN, Cadence, Claim, Decision, Policy, Position
from .databases import met_tables, with_tables
from .durable import Durable
from .rounds import Rounds
from .scan_driver import Scans
from .setup import Opened, open_run, resolver_of
from .start import find_start
from .stream import start_query

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = ["Changefeed", "StopRequest", "run"]

log = logging.getLogger(__name__)
T = TypeVar("T")


class Prepared(Generic[T]):
    """What :meth:`Changefeed.prepare` sets (``_<name>``): asked for before it, an error."""

    def __init__(self, doc: str) -> None:
        self.__doc__ = doc
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = f"_{name}"

    def __get__(self, changefeed: object, owner: type | None = None) -> T:
        return _prepared(cast("T | None", getattr(changefeed, self._name)))


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
        self.observers = Observers.of(config)
        self.policy = Policy(Cadence.of(config))
        self.scans = Scans(self)
        self.lock = threading.Lock()  # one batch, chunk or tick at a time
        self._clock = clock
        self._resources = ExitStack()  # every client and folder a run opens, closed at its end
        self._opened: Opened | None = None  # set up by prepare()
        self._position: Position | None = None
        self._durable: Durable | None = None  # the checkpoints and the safepoint (prepare())
        self._rounds: Rounds | None = None  # how a batch's rows are written (prepare())
        self.admission = Admission(config, self.stop_request)  # the spec: let in, paused at
        self._closing = False  # batches that start from now on do nothing
        self._finished = False  # end_time reached, or an ``only`` scan done: release all
        self._error: BaseException | None = None  # a batch's error, raised by the loop
        self.query: StreamingQuery | None = None  # the run's streaming query (its progress)
        self.appeared: set[str] = set()  # a whole database's new tables: the next run's

    # -- what tests, tools and the status read while it runs -------------------------------

    stats = property(lambda self: self.observers.stats, doc="The run's numbers.")
    metrics = property(lambda self: self.observers.metrics, doc="The run's Prometheus metrics.")
    last_marker = property(lambda self: self.policy.last_marker, doc="The last marker sent.")
    statement_time = property(lambda self: self._position and self._position.statement_time)
    backfill = property(lambda self: self._position and self._position.backfill)

    opened = Prepared[Opened]("What the run writes through (after :meth:`prepare`).")
    durable = Prepared[Durable]("The checkpoints and the safepoint (after :meth:`prepare`).")
    position = Prepared[Position]("Where the changefeed stands (after :meth:`prepare`).")

    # -- a run ------------------------------------------------------------------------------

    def run(self) -> None:
        """Once its spec admits it: prepare, scan if due, stream until an end, stop or error."""
        try:
            if not self.admission.admit(self._resources):
                return
            self.observers.serve(self.config, self._resources)
            if self.config.query is not None:
                check_query(self.spark, *self.config.query, self.config.encoder)
            self.prepare()
            scanned = self.position.backfill is None or self.initial_scan()
            if scanned and not self._finished:
                self.opened.status.state = "running"
                self._stream()
                self.appeared = self.appeared or met_tables(self.config, self.position.resolver)
            if self.appeared and not self.stop_request.is_set():
                return  # the next run goes on with them: no state to publish in between
            reason = self.stop_request.reason
            if self._finished or reason == "removed":  # the source data is not needed
                self.durable.release()
            self.publish("finished" if self._finished else reason, error=self.admission.paused_at)
        except Exception as exc:
            self.publish("failed", error=str(exc) or repr(exc), best_effort=True)
            raise
        finally:
            self._resources.close()

    def prepare(self) -> None:
        """Topics, encoders and clients; then the start, its safepoint held.

        A new changefeed's start is checkpointed before anything is emitted.
        """
        opened = self._opened = open_run(self.config, self._resources)
        self.observers.attach(opened.status, opened.replicas)
        position = self._position = find_start(self.config, opened)
        position.resolver = self._resources.enter_context(
            closing(resolver_of(self.config, opened, position))
        )
        self._rounds = Rounds.of(opened, position, self.observers, self.scans, self.stop_request)
        durable = self._durable = Durable.of(
            self.config, opened, self.observers, self.policy, position, clock=self._clock
        )
        if opened.restored is None:
            self.write_checkpoint(last_marker=None)
            return
        durable.resume(opened.restored, position)
        self._finished = self.config.scan_mode == "only" and position.backfill is None

    def initial_scan(self) -> bool:
        """The scan due (``scan_driver.Scans``); then the first marker, at the statement time.

        False: a stop came first. A later scan (added tables, a table again) ends like a batch.
        """
        scanned = self.scans.initial()
        if scanned is None:
            return False
        (statement, first), only = scanned, self.config.scan_mode == "only"
        if first:
            self._carry_out(self.policy.after_scan(statement, only=only))
            return True
        self.policy.progressed()
        with self.lock:
            self._after_batch(final=True)
        self._finished = self._finished or only
        return True

    def _stream(self) -> None:
        """The streaming query, until ``end_time``, a stop, a drain's end or an error."""
        self.stats.stream_started = time.perf_counter()
        query = self.query = start_query(
            self.spark,
            self.config,
            self.position.starting_offsets(),
            self._on_batch,
            self._resources,
            headers=self.opened.writer.headers,
        )
        while query.isActive:
            self.check_replicas()
            self._tick()
            self.appeared = met_tables(self.config, self.position.resolver)
            if self._finished or self.stop_request.is_set() or self._error or self.appeared:
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
            with self.lock:
                self._after_batch(final=True)
        self.stats.stream_ended = time.perf_counter()  # its last checkpoint and marker out

    def _close(self, query: StreamingQuery) -> None:
        self._closing = True
        with self.lock:  # wait for the batch in flight
            if self._error is None:
                self._after_batch(final=True)
        query.stop()
        high_water = self.position.frontier.high_water()
        log.info("changefeed %s: stopped at high-water %s", self.config.changefeed_id, high_water)

    # -- one batch ----------------------------------------------------------------------------

    def _on_batch(self, batch: DataFrame, batch_id: int) -> None:
        with self.lock:  # a stop waits for the batch in flight, and no batch follows it
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
                self._error = _failed(self.config, self.opened.claim, batch_id, exc)
                raise self._error from exc

    def _process(self, batch: DataFrame, batch_id: int) -> float:
        """Write one batch, the frontier moved (``rounds.py``); do what is due; the seconds."""
        frontier, skip = self.position.frontier, self.admission.skip()
        result, seconds = _prepared(self._rounds).write(batch, batch_id, frontier, skip)
        if self.observers.resolver(self.position.resolver):
            self.publish(best_effort=True)
        if result.partitions:
            self.policy.progressed()
        self.observers.batch(batch_id, result, seconds, frontier)
        if result.stops(self.config.on_error):
            # Each partition was written up to the record it stops at: checkpoint just before
            # it, then stop (or pause) there, naming it.
            self._after_batch(final=True)
            self.halt(result)
        else:
            self._after_batch()
        return seconds

    def halt(self, result: BatchResult) -> None:
        """Stop at what stops a batch or chunk: fail, or pause at it (``Admission.halt``)."""
        self.admission.halt(result, self.opened.specs, self.opened.schemas.explain)
        self._closing = True  # no later batch may write what follows the record

    # -- carrying out the policy's decisions ----------------------------------------------------

    def _after_batch(self, *, final: bool = False) -> None:
        """Checkpoint and emit a marker if due; notice ``end_time`` and a stalled high-water."""
        frontier = self.position.frontier
        decision = self.policy.after_batch(frontier.high_water(), self._clock(), final=final)
        self._carry_out(decision, final=final)
        self.durable.check_stall(self.position, self.position.resolver.quiet)
        self.durable.refresh()

    def _carry_out(self, decision: Decision, *, final: bool = False) -> None:
        """The checkpoint first, then the marker it covers (``durable.py``)."""
        self.durable.carry_out(decision, self.position, final=final)
        self._finished = self._finished or decision.finished

    def _tick(self) -> None:
        """Between batches (Spark runs none while the sources are quiet), once a second.

        What is due goes out as if a batch had just ended: a held-back marker, the safepoint.
        """
        with self.lock:
            if self._error is not None or self._closing:
                return
            try:
                if self.position.resolver.advance(self.position.frontier):
                    self.policy.progressed()  # quiet sources, a transaction completed
                if self.observers.resolver(self.position.resolver):
                    self.publish(best_effort=True)
                self._after_batch()
                if self.observers.lags(self.position.frontier):
                    self.publish(best_effort=True)
            except HighwaterError as exc:
                self._error = exc

    def check_replicas(self) -> None:
        """Re-read the relied-on topics' replicas when due (outside the lock: batches go on)."""
        if self.observers.replicas():
            with self.lock:
                if self._error is None and not self._closing:
                    self.publish(best_effort=True)

    def write_checkpoint(self, *, last_marker: Hlc | None) -> None:
        """Write the checkpoint record of where the changefeed stands; the safepoint follows."""
        self.durable.checkpoint(self.position, last_marker=last_marker)

    def publish(
        self, state: str | None = None, *, error: str | None = None, best_effort: bool = False
    ) -> None:
        """Write the job status (``jobs.topic``) as things stand."""
        marker, position = self.policy.last_marker, self._position
        self.observers.publish(position, marker, state, error=error, best_effort=best_effort)


def _prepared(value: T | None) -> T:
    if value is None:
        raise HighwaterError("the changefeed is not prepared yet")
    return value


def run(config: ChangefeedConfig, spark: SparkSession, stop: StopRequest | None = None) -> None:
    """Run the changefeed described by ``config``.

    With ``databases``, each run reads the tables listed when it starts, and a run that meets
    a table created since ends so that the next one reads it too (``databases.py``).
    """
    appeared: set[str] = set()
    while True:
        changefeed = Changefeed(with_tables(config, appeared), spark, stop=stop)
        changefeed.run()
        appeared = changefeed.appeared
        if not appeared or changefeed.stop_request.is_set():
            return


def _failed(
    config: ChangefeedConfig, claim: Claim | None, batch_id: int, exc: Exception
) -> HighwaterError:
    """Spark or Kafka gave up on a batch (the clients retry with back-off first): one error.

    Nothing of the batch was checkpointed (or, exactly once, fenced: :func:`_taken`).
    """
    failed = SinkError(f"batch {batch_id} failed, not checkpointed: {cause(exc)}")
    return _taken(config, claim, batch_id) or failed


def _taken(config: ChangefeedConfig, claim: Claim | None, batch_id: int) -> FencedError | None:
    """Exactly once, after a failed write: the fence, if a newer run generation claimed.

    A newer instance's claim fails this run's tasks in Spark (``Pieces.java``); the run must
    stop then, not be restarted as after a Kafka failure.
    """
    if claim is None:
        return None
    try:
        newer = claim.newer(client_config(config.sink_kafka))
    except Exception as exc:  # the batch's own error is the one to report
        log.warning("could not read the run generation after batch %d failed: %s", batch_id, exc)
        return None
    if newer is None:
        return None
    return FencedError(
        f"{TAKEN}: batch {batch_id} not written, run generation {newer} claimed its "
        f"partitions (this run is generation {claim.generation})"
    )
