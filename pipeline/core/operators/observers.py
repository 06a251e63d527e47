"""Who watches a run, behind one interface: its numbers, its metrics, its job status, its replicas.

The coordinator tells :class:`Observers` what happened (a batch, a scan chunk, a checkpoint, a
marker, a state) and each observer keeps what it keeps: :class:`~.status.ChangefeedStats` (logs,
benchmarks), :class:`~.metrics.ChangefeedMetrics` (Prometheus), the
:class:`~.status.StatusPublisher` (the job status an operator reads) and the replica watch of
the topics the changefeed relies on. None of them decides anything.
"""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from datetime import timedelta
from typing import TYPE_CHECKING

from pipeline.config import ChangefeedConfig
from schemas.errors import HighwaterError, SinkError
from schemas.hlc import Hlc

from ..evolution import written
from .lagging import Lagging, Stuck
from .metrics import STATES, ChangefeedMetrics
from .status import ChangefeedStats, StatusPublisher

if TYPE_CHECKING:
    from sinks.admin import DurabilityWatch

    from ..batch import BatchResult
    from ..evolution import SchemaEvolution
    from ..ledger import Frontier, ScanProgress
    from ..progress import Position
    from ..resolved import Resolver

log = logging.getLogger(__name__)


class Observers:
    """The run's stats, metrics, job status and replica watch (the last two from prepare on)."""

    def __init__(
        self,
        changefeed_id: str,
        lagging_threshold: timedelta = timedelta(0),
        stuck_threshold: timedelta = timedelta(0),
    ) -> None:
        self.stats = ChangefeedStats()
        self.metrics = ChangefeedMetrics(changefeed_id)
        self._lagging = Lagging(lagging_threshold)
        self._stuck = Stuck(stuck_threshold)
        self._status: StatusPublisher | None = None
        self._replicas: DurabilityWatch | None = None
        self._schema_changes = 0  # as counted in the metrics so far

    @classmethod
    def of(cls, config: ChangefeedConfig) -> Observers:
        """A run's observers, with its config's thresholds."""
        return cls(config.changefeed_id, config.lagging_threshold, config.stuck_threshold)

    def serve(self, config: ChangefeedConfig, resources: ExitStack) -> None:
        """Serve the metrics when ``config`` asks, until ``resources`` close."""
        if config.metrics.enabled:
            self.metrics.serve(config.metrics.host, config.metrics.port)
            resources.callback(self.metrics.close)

    def attach(self, status: StatusPublisher, replicas: DurabilityWatch) -> None:
        """The job status and the replica watch, once the run's topics are set up.

        The run starts now (its admission may have waited while paused): a partition that
        resolved nothing yet lags from here.
        """
        self._lagging.start()
        self._status, self._replicas = status, replicas
        status.metrics_url = self.metrics.url
        self.metrics.replicas(replicas.found)

    @property
    def status(self) -> StatusPublisher:
        """The job status publisher (after :meth:`attach`)."""
        if self._status is None:
            raise HighwaterError("the changefeed is not prepared yet")
        return self._status

    # -- what happened ------------------------------------------------------------------------

    def batch(self, batch_id: int, result: BatchResult, seconds: float, frontier: Frontier) -> None:
        """A stream batch was written in ``seconds``; ``frontier`` moved past it."""
        log.info(
            "batch %d: %s in %.2fs; high-water %s", batch_id, result, seconds, frontier.high_water()
        )
        self.stats.count(result)
        self.metrics.batch(result, seconds)
        self.metrics.lags(frontier)
        self._stuck.read(result.emitted + result.duplicates + result.resent + result.bad)
        if self._status is not None:
            self._status.rows = self.stats.rows

    def scanning(self, progress: ScanProgress) -> None:
        """A scan starts (or goes on) with ``progress``."""
        self.status.progress = progress
        self.metrics.scan(progress)

    def chunk(self, result: BatchResult, progress: ScanProgress) -> None:
        """A scan chunk's rows were acknowledged and recorded."""
        self.stats.count(result, scan=True)
        self.metrics.batch(result, None, scan=True)
        self.metrics.scan(progress)

    def checkpoint(self, seconds: float, size: int) -> None:
        """A checkpoint record of ``size`` bytes was written in ``seconds``."""
        self.stats.checkpoint_seconds.append(seconds)
        self.metrics.checkpoint(seconds, size)

    def marker(self, marker: Hlc, seconds: float) -> None:
        """``marker`` went out (to every partition) in ``seconds``."""
        log.info("marker %s sent in %.1f ms", marker, seconds * 1000)
        self.stats.markers.append((time.time(), marker))
        self.metrics.markers.inc()

    def schemas(self, evolution: SchemaEvolution) -> None:
        """The output schemas after a batch settled: what evolved is counted and shown."""
        if evolution.changes > self._schema_changes:
            self.metrics.schema_changes.inc(evolution.changes - self._schema_changes)
            self.show_schemas(evolution)
        self._schema_changes = evolution.changes

    def show_schemas(self, evolution: SchemaEvolution) -> None:
        """The job status shows the output schemas as they stand (and appliers read them)."""
        self.status.schemas = evolution.status() or None
        self.status.output = evolution.config.output_description(written(evolution))

    def resolver(self, resolver: Resolver) -> bool:
        """What cannot resolve (stuck transactions); True when the job status should say so."""
        self.metrics.transactions(*resolver.stuck_topics())
        warnings = resolver.warnings()
        if self._status is None:
            return False
        self._status.waiting_for = resolver.waiting_for()
        if warnings == self._status.transactions:
            return False
        self._status.transactions = warnings
        return True

    def lags(self, frontier: Frontier) -> bool:
        """The lags as of now (metrics); True when lagging or stuck changed (publish)."""
        self.metrics.lags(frontier)
        stuck = self._stuck.look(frontier)
        self.metrics.stuck_high_water.set(self._stuck.warning is not None)
        lagging = self._lagging.look(frontier)
        if lagging:
            self.metrics.lagging.set(len(self._lagging.found))
        if self._status is None:
            return False
        self._status.stuck = self._stuck.warning
        self._status.lagging = self._lagging.warnings()
        return stuck or lagging

    def replicas(self) -> bool:
        """Re-read the relied-on topics' replicas when due; True when the warnings changed.

        Called outside the coordinator's lock (a batch goes on meanwhile): what changed is
        logged and counted here, and the caller publishes it under the lock.
        """
        watch = self._replicas
        if watch is None or not watch.due():
            return False
        before = watch.warnings()
        try:
            self.metrics.replicas(watch.check())
        except SinkError as exc:
            log.warning("could not re-read the topics' replicas: %s", exc)
            return False
        now = watch.warnings()
        if now == before:
            return False
        for warning in now:
            log.warning("%s", warning)
        if not now:
            log.info("every topic the changefeed relies on is fully replicated again")
        self.status.replication = now
        return True

    def publish(
        self,
        position: Position | None,
        last_marker: Hlc | None,
        state: str | None = None,
        *,
        error: str | None = None,
        best_effort: bool = False,
    ) -> None:
        """Write the job status (``jobs.topic``) an operator reads with ``highwater changefeed``."""
        current = state
        if self._status is not None:  # else it failed before the topic was set up
            self._status.publish(position, last_marker, state, error=error, best_effort=best_effort)
            current = self._status.state
        if current in STATES:
            self.metrics.state.state(current)
