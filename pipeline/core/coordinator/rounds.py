"""One batch's rows: planned, written in rounds (its rests as the driver settles them), seen.

:meth:`Rounds.write` plans the batch (each partition's floor and position, the encoders, the
commit times the resolver knows), has the writer write it, and moves the frontier past what
it read once Kafka acknowledged every row; the resolver hears what the batch saw.

The writer (``batch/writer.py``) writes what it is given and returns; it never calls back
into the coordinator. A source partition's rows can stop short of the batch's end at a change
the driver must first learn more about: a Debezium change whose transaction's END was not read
yet, or a row of a shape its table's output schema cannot hold. The writer returns those
*rests* in its result. :class:`Rounds` asks the resolver (the END read, its commit time known)
and the schema evolution (an evolved encoder; under ``backfill``, the table emitted again
first) what each rest waits for, and hands the writer the rests that can run now, round by
round, until none is left or none can run now (the batch's result then says where each
partition stopped, and why).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipeline.config import ChangefeedConfig
from schemas.errors import RecordRef

from ..batch import BatchPlan, BatchResult, BatchWriter, Deferred, Settled, faults
from ..evolution import Rescan, SchemaEvolution
from ..ledger import Frontier
from ..operators import Observers, StopRequest
from ..progress import Position
from ..resolved import Resolver
from .scan_driver import Scans
from .setup import Opened

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Rounds:
    """A run's batches written round by round: the writer's, settled by the driver."""

    config: ChangefeedConfig
    writer: BatchWriter
    resolver: Resolver
    schemas: SchemaEvolution
    observers: Observers
    rescan: Callable[[Rescan, BatchResult], None]  # a table emitted again (``Scans.again``)
    stopping: Callable[[], bool]  # a stop was asked for: do not wait for an END

    @classmethod
    def of(
        cls,
        opened: Opened,
        position: Position,
        observers: Observers,
        scans: Scans,
        stop: StopRequest,
    ) -> Rounds:
        """A run's: its writer and schemas, its resolver (``position.resolver``), its scans."""
        writer, schemas = opened.writer, opened.schemas
        config = writer.config
        return cls(config, writer, position.resolver, schemas, observers, scans.again, stop.is_set)

    def write(
        self, batch: DataFrame, batch_id: int, frontier: Frontier, skip: RecordRef | None
    ) -> tuple[BatchResult, float]:
        """Write ``batch`` and its rests, then move ``frontier``: the result and its seconds.

        Returns once Kafka acknowledged every row; the resolver has heard what the batch saw.
        ``skip``: the bad record an operator chose to divert.
        """
        started = time.perf_counter()
        encoders, commits = self.schemas.encoders, self.resolver.commit_times()
        plan = BatchPlan.at(self.config, encoders, frontier, skip=skip, commits=commits)
        result = self._rows(batch, batch_id, plan)
        seconds = time.perf_counter() - started
        result.forward(frontier)
        self.resolver.saw(result)
        self.resolver.advance(frontier)
        return result, seconds

    def _rows(self, batch: DataFrame, batch_id: int, plan: BatchPlan) -> BatchResult:
        """The writer's first pass, then the rests as they settle, round by round."""
        result = self.writer.write(batch, batch_id, plan)
        rounds = 0
        while result.rests:
            waited = time.perf_counter()
            settled = self.settle(plan, result)
            if not settled.run:
                break
            rounds += 1
            log.info(
                "batch %d: %d partition(s) run again after %.2fs (%s)",
                batch_id,
                len(settled.run),
                time.perf_counter() - waited,
                ", ".join(sorted(_waited(rest) for rest in settled.run)),
            )
            plan = settled.plan
            result = self.writer.again(batch.sparkSession, batch_id, settled, result, rounds)
        faults.reached("after_write")
        return result

    def settle(self, plan: BatchPlan, result: BatchResult) -> Settled:
        """Rests that wait for a transaction's END (read first), or for an evolved schema.

        A table evolved under ``backfill`` is emitted again before its rests run.
        """
        plan, ends = self.resolver.settle(plan, result.rests, self.stopping)
        plan, evolved, later = self.schemas.settle(plan, result.rests)
        self.observers.schemas(self.schemas)
        for rescan in self.schemas.take_rescans():
            self.rescan(rescan, result)
        return Settled(plan, [*ends, *evolved], later)


def _waited(rest: Deferred) -> str:
    if rest.waits_for is not None:
        return f"{rest.partition} for the END of transaction {rest.waits_for}"
    return f"{rest.partition}@{rest.start} with an evolved schema"
