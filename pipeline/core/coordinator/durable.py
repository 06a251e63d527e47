"""What is durable: the checkpoint record, and the safepoint that holds what a restart needs.

:class:`Durable` writes the checkpoint record of a :class:`~.position.Position` and keeps the
changefeed's safepoint at the restart position that record gives (its TTL renewed), and it
notices a high-water mark that stood still past ``gc_ttl``: such a changefeed would hold GC
back for ever, so it stops instead.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from pipeline.config import ChangefeedConfig
from schemas.hlc import Hlc

from ..ledger import Checkpoint, CheckpointStore, SourcePartition
from ..operators import Observers
from ..progress import ChangefeedSafepoint, HighWaterWatch, Position
from .setup import Outputs

log = logging.getLogger(__name__)


class Durable:
    """The checkpoint store, the safepoint following it, and the stall watch."""

    def __init__(
        self,
        config: ChangefeedConfig,
        checkpoints: CheckpointStore,
        safepoint: ChangefeedSafepoint | None,
        observers: Observers,
    ) -> None:
        self.config = config
        self.checkpoints = checkpoints
        self.safepoint = safepoint
        self.observers = observers
        self._watch = HighWaterWatch(config.safepoints.gc_ttl.total_seconds())
        # what a restart would read, as of the last durable checkpoint: the safepoint holds it
        self._restart: tuple[Hlc, dict[SourcePartition, int]] | None = None

    @classmethod
    def of(
        cls, config: ChangefeedConfig, outputs: Outputs, observers: Observers, start: Position
    ) -> Durable:
        """A run's, starting at ``start`` (its safepoint already held there)."""
        durable = cls(config, outputs.checkpoints, outputs.safepoint, observers)
        durable._restart = (start.restart_time(), start.needed_offsets())
        return durable

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
