"""Writing one micro-batch: the contract, and its two writers, chosen once when a run starts.

A :class:`BatchWriter` takes a batch of source records and a :class:`~.batch.BatchPlan` and
writes the batch's output records to the sink; what it saw of each source partition comes
back as a :class:`~.batch.BatchResult` (``summary.Summary`` per partition):

* :class:`LoopWriter`: every record through the Python loop (``batch/loop.py``) on the executors;
* :class:`WalkWriter`: the JVM walk (``walk.py``) writes each partition in Spark's own task
  until the first record it does not take; the rest of that partition then goes through the
  Python loop, after the walk's records were acknowledged. A batch whose plan the walk cannot
  take (an encoder evolved to one it cannot write) goes through the loop whole.

:func:`batch_writer` picks one from the config (``walk.walkable``). Either way, the rests a
partition left waiting (a Debezium change before its transaction's END was read, a row of a
shape its output schema cannot hold) run again through the loop once the driver's ``settle``
gave a plan that has what they wait for.

**Delivery.** :meth:`BatchWriter.write` returns only once Kafka acknowledged every record it
wrote (``Sink.java``: a task ends when every record was answered), and in each source
partition's offset order. *At least once*: a write that fails or is abandoned may have
written some of the batch; nothing of it was checkpointed, so the next run writes those
records again (a consumer drops them by ``(key, updated)``). *Exactly once*
(``delivery``: the run's ``progress.Claim.options``): each source partition's piece of the
batch commits in one Kafka transaction with its progress record (``Pieces.java``); a piece
committed already is not written again, and a failed write committed only whole pieces,
which the next run starts after (``progress.Claim.overlay``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from pipeline.config import ChangefeedConfig

from ..ledger import SourcePartition
from . import faults
from .contract import BatchPlan, BatchResult, Deferred, Settled, read_result
from .jvm import Transactions
from .kafka_clients import write_records
from .loop import kafka_records
from .queries import apply_query
from .walk import Walked, walk_plan, walkable, write_rest

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

# What the driver does with a batch's rests that wait for something (``result.rests``; the
# batch so far, where a table emitted again at a schema change ends): the plan to run them
# again with, those that run now, those that wait for the next round (the others stay where
# they stopped).
Settle = Callable[[BatchPlan, BatchResult], Settled]


class BatchWriter:
    """Writes a micro-batch and reports what it saw (the module's contract)."""

    headers = True  # whether the stream reads the source records' headers

    def __init__(self, config: ChangefeedConfig, delivery: Mapping[str, str]) -> None:
        self.config = config
        self.delivery = delivery  # the Java writers' options for exactly once ({}: at least once)
        self._transactions = Transactions()  # the write's so far

    def write(
        self, batch: DataFrame, batch_id: int, plan: BatchPlan, settle: Settle | None = None
    ) -> tuple[BatchResult, float]:
        """Write ``batch``; returns once Kafka acknowledged it, with the seconds it took."""
        query = self.config.query
        if query is not None:
            source_format = self.config.sources[0].format
            batch = apply_query(batch, *query, self.config.encoder, source_format=source_format)
        faults.reached("during_write")
        started = time.perf_counter()
        self._transactions = Transactions()
        result = self._first(batch, batch_id, plan)
        result = self._settle(batch, batch_id, plan, result, settle)
        seconds = time.perf_counter() - started
        faults.reached("after_write")
        counted = self._transactions
        return replace(result, committed=counted.committed, aborted=counted.aborted), seconds

    def _count(self, transactions: Transactions) -> None:
        self._transactions += transactions

    def _first(self, batch: DataFrame, batch_id: int, plan: BatchPlan) -> BatchResult:
        """The batch's first pass: every record through the Python loop."""
        from pyspark.sql import Observation  # noqa: PLC0415 - Spark stays out of the import path

        observation = Observation(f"batch-{batch_id}")
        sink, producer = self.config.sink_kafka, self.config.sink.producer
        records = kafka_records(batch, plan, observation)
        self._count(write_records(records, sink, producer, self.delivery))
        return read_result(observation)

    def _settle(
        self,
        batch: DataFrame,
        batch_id: int,
        plan: BatchPlan,
        result: BatchResult,
        settle: Settle | None,
    ) -> BatchResult:
        """Run the rests that waited, once ``settle`` has what they wait for (round by round)."""
        from pyspark.sql import Observation  # noqa: PLC0415 - Spark stays out of the import path

        runs = 0
        while result.rests and settle is not None:
            waited = time.perf_counter()
            plan, again, later = settle(plan, result)
            if not again:
                break
            runs += 1
            log.info(
                "batch %d: %d partition(s) run again after %.2fs (%s)",
                batch_id,
                len(again),
                time.perf_counter() - waited,
                ", ".join(sorted(_waited(r) for r in again)),
            )
            more = Observation(f"batch-{batch_id}-again-{runs}")
            self._count(
                write_rest(
                    batch.sparkSession, again, plan, self.config, more, delivery=self.delivery
                )
            )
            result = result.with_rests(read_result(more), later)
        return result


class LoopWriter(BatchWriter):
    """Every record through the Python loop."""


class WalkWriter(BatchWriter):
    """The JVM walk first; what it does not take, through the Python loop after it."""

    headers = False  # the walk reads none; the rests are read again with theirs

    def _first(self, batch: DataFrame, batch_id: int, plan: BatchPlan) -> BatchResult:
        from pyspark.sql import Observation  # noqa: PLC0415 - Spark stays out of the import path

        walk = walk_plan(plan)
        if walk is None:  # an encoder evolved to one the walk cannot write
            return self._through_the_loop(batch, batch_id, plan)
        config = self.config
        walked = Walked.write(
            batch, walk, batch_id, config.sink_kafka, config.sink.producer, delivery=self.delivery
        )
        self._count(walked.transactions)
        result, rests = walked.result()
        if not rests:
            return result
        more = Observation(f"batch-{batch_id}-rest")
        self._count(
            write_rest(batch.sparkSession, rests, plan, config, more, delivery=self.delivery)
        )
        return BatchResult.of([*result.partitions, *read_result(more).partitions])

    def _through_the_loop(self, batch: DataFrame, batch_id: int, plan: BatchPlan) -> BatchResult:
        """The whole batch through the Python loop, read again with its records' headers.

        The walk's stream reads no headers, which the loop keeps on dead letters: each
        partition's offset range of the batch runs as a rest (as the walk's rests do).
        """
        from pyspark.sql import Observation  # noqa: PLC0415 - Spark stays out of the import path
        from pyspark.sql import functions as F  # noqa: PLC0415

        ranges = batch.groupBy("topic", "partition").agg(F.min("offset"), F.max("offset"))
        rests = [
            Deferred(
                SourcePartition(topic, partition),
                first,
                last + 1,
                plan.thresholds.get((topic, partition), plan.new_partition_floor),
            )
            for topic, partition, first, last in ranges.collect()
        ]
        if not rests:
            return BatchResult.of([])
        more = Observation(f"batch-{batch_id}-loop")
        self._count(
            write_rest(batch.sparkSession, rests, plan, self.config, more, delivery=self.delivery)
        )
        return read_result(more)


def batch_writer(
    config: ChangefeedConfig, plan: BatchPlan, delivery: Mapping[str, str]
) -> BatchWriter:
    """The writer of a run's batches: the walk where it can take ``plan``'s, else the loop.

    ``delivery``: the Java writers' options for exactly once (``{}``: at least once).
    """
    kind = WalkWriter if walkable(plan) else LoopWriter
    return kind(config, delivery)


def _waited(rest: Deferred) -> str:
    if rest.waits_for is not None:
        return f"{rest.partition} for the END of transaction {rest.waits_for}"
    return f"{rest.partition}@{rest.start} with an evolved schema"
