"""What is durable, in its order: the checkpoint record, then the marker it covers.

:class:`Durable` carries out the :class:`~.policy.Policy`'s decisions after a batch, chunk or
tick: it writes the checkpoint record of a :class:`~.position.Position` (durable on return),
and only then broadcasts the resolved marker that checkpoint covers; the job status says so,
and the changefeed's safepoint follows the restart position the durable record gives (its
TTL renewed). It also notices a high-water mark that stood still past ``gc_ttl``: such a
changefeed would hold GC back for ever, so it stops instead.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from pipeline.config import ChangefeedConfig
from schemas.hlc import Hlc
from sinks.resolved import ResolvedBroadcaster

from ..batch import faults
from ..ledger import Checkpoint, CheckpointStore, SourcePartition
from ..operators import Observers
from ..progress import ChangefeedSafepoint, Decision, HighWaterWatch, Policy, Position
from .setup import Opened

log = logging.getLogger(__name__)


class Durable:
    """The checkpoints, the markers after them, the safepoint following, and the stall watch."""

    def __init__(
        self,
        config: ChangefeedConfig,
        opened: Opened,
        observers: Observers,
        policy: Policy,
        clock: Callable[[], float],
    ) -> None:
        self.config = config
        self.checkpoints: CheckpointStore = opened.checkpoints
        self.safepoint: ChangefeedSafepoint | None = opened.safepoint
        self.broadcaster: ResolvedBroadcaster = opened.broadcaster
        self.observers = observers
        self.policy = policy
        self._clock = clock
        self._watch = HighWaterWatch(config.safepoints.gc_ttl.total_seconds())
        # what a restart would read, as of the last durable checkpoint: the safepoint holds it
        self._restart: tuple[Hlc, dict[SourcePartition, int]] | None = None

    @classmethod
    def of(
        cls,
        config: ChangefeedConfig,
        opened: Opened,
        observers: Observers,
        policy: Policy,
        start: Position,
        *,
        clock: Callable[[], float],
    ) -> Durable:
        """A run's, starting at ``start`` (its safepoint already held there)."""
        durable = cls(config, opened, observers, policy, clock)
        durable._restart = (start.restart_time(), start.needed_offsets())
        return durable

    def resume(self, restored: Checkpoint, position: Position) -> None:
        """A resumed run: the marker its checkpoint says was due, perhaps never sent, goes out."""
        pending = self.policy.resume(
            restored.high_water, restored.last_marker, restored.marker_sent
        )
        if pending is not None:
            log.info("re-sending marker %s: checkpointed, perhaps never sent", pending)
            self.emit(pending)
            self.checkpoint(position, last_marker=pending)  # which now says it was sent

    def carry_out(self, decision: Decision, position: Position, *, final: bool = False) -> None:
        """The checkpoint first, then the marker it covers; at a run's end, confirm it."""
        if decision.checkpoint:
            self.checkpoint(position, last_marker=decision.record_marker)
        if decision.marker is not None:
            faults.reached("before_marker")
            self.emit(decision.marker)
        if (final or decision.finished) and self.policy.unconfirmed():
            self.checkpoint(position, last_marker=self.policy.last_marker)

    def checkpoint(self, position: Position, *, last_marker: Hlc | None) -> None:
        """Write where the changefeed stands (durable on return); the status says so."""
        checkpoint = self.write(position, last_marker, self.policy.sent)
        self.policy.checkpointed(checkpoint.high_water, self._clock())
        self.observers.publish(position, self.policy.last_marker, None)

    def emit(self, marker: Hlc) -> None:
        """Broadcast ``marker`` to every output partition (its checkpoint is durable already)."""
        started = time.perf_counter()
        self.broadcaster.emit(marker)
        self.observers.marker(marker, time.perf_counter() - started)
        self.policy.marker_sent(marker, self._clock())
        faults.reached("after_marker")

    def write(
        self, position: Position, last_marker: Hlc | None, marker_sent: Hlc | None
    ) -> Checkpoint:
        """Write ``position``'s checkpoint record (durable on return); the safepoint follows."""
        checkpoint = position.checkpoint(self.config, last_marker, marker_sent)
        started = time.perf_counter()
        size = self.checkpoints.write(checkpoint)
        seconds = time.perf_counter() - started
        self.observers.checkpoint(seconds, size)
        self._restart = (position.restart_time(), position.needed_offsets())
        log.info(
            "checkpoint at high-water %s (%d bytes, %.1f ms)",
            checkpoint.high_water,
            size,
            seconds * 1000,
        )
        self.refresh()
        return checkpoint

    def refresh(self) -> None:
        """Keep the safepoint at the durable restart position, its TTL renewed (once a minute)."""
        if self.safepoint is not None and self._restart is not None:
            self.safepoint.refresh(*self._restart)

    def check_stall(self, position: Position, quiet: Callable[[], bool]) -> None:
        """Fail when the high-water mark stood still for longer than ``gc_ttl``.

        Not while starting up (no batch yet: standing still is not stalling), nor for unmarked
        sources (nothing resolves them); ``quiet()``: nothing waits to resolve, so a standing
        mark is a quiet source, counted from now.
        """
        safepoint = self.safepoint
        if safepoint is None or not self.observers.stats.batches or self.config.unmarked_sources:
            return
        now = safepoint.registry.clock()
        if quiet():
            self._watch.quiet(now)
        self._watch.check(position.frontier.high_water(), now)

    def release(self) -> None:
        """The source data is not needed any more (finished, or removed): let GC have it."""
        if self.safepoint is not None:
            self.safepoint.release()
