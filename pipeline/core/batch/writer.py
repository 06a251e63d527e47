"""Writing one micro-batch's rows: its two writers, chosen once when a run starts.

A :class:`BatchWriter` takes a batch of source records and a :class:`~.batch.BatchPlan` and
writes the batch's output records through the run's :class:`~.sink.RowSink`; what it saw of
each source partition comes back as a :class:`~.batch.BatchResult` (``summary.Summary`` per
partition):

* :class:`LoopWriter`: every record through the Python loop (``batch/loop.py``) on the executors;
* :class:`WalkWriter`: the JVM walk (``walk.py``) writes each partition in Spark's own task
  until the first record it does not take; the rest of that partition is then read again and
  goes through the Python loop, after the walk's records were acknowledged. A batch whose
  plan the walk cannot take (an encoder evolved to one it cannot write) goes through the loop
  whole.

:func:`batch_writer` picks one from the config (``walk.walkable``). A writer never calls back
into the coordinator: a partition that stopped at what the driver must first learn more about
(a Debezium change before its transaction's END was read, a row of a shape its output schema
cannot hold) comes back as a rest in the result; the coordinator settles it
(``coordinator/rounds.py``) and hands it to :meth:`BatchWriter.again`, round by round.

**Delivery.** Each call returns only once Kafka acknowledged every record it wrote
(``sink.py``), and in each source partition's offset order. *At least once*: a write that
fails or is abandoned may have written some of the batch; nothing of it was checkpointed, so
the next run writes those records again (a consumer drops them by ``(key, updated)``).
*Exactly once* (the sink's ``delivery``: the run's ``progress.Claim``): a task's pieces of the
batch (each source partition's rows) commit in one Kafka transaction with their progress
records (``Pieces.java``); a piece committed already is not written again, and a failed write
committed only whole pieces, which the next run starts after (``progress.Claim.overlay``).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from pipeline.config import ChangefeedConfig

from ..ledger import SourcePartition
from . import faults
from .contract import BatchPlan, BatchResult, Deferred, Settled, read_result
from .jvm import KafkaTransactions
from .kafka_clients import source_reader
from .loop import kafka_records
from .queries import apply_query
from .sink import RowSink
from .walk import Walked, rest_plan, walk_plan, walkable

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Observation, SparkSession


class BatchWriter:
    """Writes a micro-batch and reports what it saw (the module's contract)."""

    headers = True  # whether the stream reads the source records' headers

    def __init__(self, config: ChangefeedConfig, sink: RowSink) -> None:
        self.config = config
        self.sink = sink

    def write(self, batch: DataFrame, batch_id: int, plan: BatchPlan) -> BatchResult:
        """Write ``batch``; returns once Kafka acknowledged it (its rests in ``result.rests``)."""
        query = self.config.query
        if query is not None:
            source_format = self.config.sources[0].format
            batch = apply_query(batch, *query, self.config.encoder, source_format=source_format)
        faults.reached("during_write")
        return self._first(batch, batch_id, plan)

    def again(
        self, spark: SparkSession, batch_id: int, settled: Settled, result: BatchResult, round_: int
    ) -> BatchResult:
        """Run the rests the driver settled (``settled.run``) by its plan: ``result`` with theirs.

        ``round_``: the batch's how-manieth round of rests this is (from 1).
        """
        from pyspark.sql import Observation  # noqa: PLC0415 - Spark stays out of the import path

        more = Observation(f"batch-{batch_id}-again-{round_}")
        transactions = self._rest(spark, settled.run, settled.plan, more)
        return result.with_rests(read_result(more).counted(transactions), settled.later)

    def _first(self, batch: DataFrame, batch_id: int, plan: BatchPlan) -> BatchResult:
        """The batch's first pass: every record through the Python loop."""
        from pyspark.sql import Observation  # noqa: PLC0415 - Spark stays out of the import path

        observation = Observation(f"batch-{batch_id}")
        transactions = self.sink.write(kafka_records(batch, plan, observation))
        return read_result(observation).counted(transactions)

    def _rest(
        self,
        spark: SparkSession,
        rests: list[Deferred],
        plan: BatchPlan,
        observation: Observation,
    ) -> KafkaTransactions:
        """Read the rests again, with their headers, and write them through the Python loop."""
        assign: dict[str, list[int]] = {}
        starts: dict[str, dict[str, int]] = {}
        stops: dict[str, dict[str, int]] = {}
        for rest in rests:
            topic, partition = rest.partition.topic, rest.partition.partition
            assign.setdefault(topic, []).append(partition)
            starts.setdefault(topic, {})[str(partition)] = rest.start
            stops.setdefault(topic, {})[str(partition)] = rest.stop
        records = (
            source_reader(spark.read, self.config.kafka)
            .option("assign", json.dumps(assign))
            .option("startingOffsets", json.dumps(starts))
            .option("endingOffsets", json.dumps(stops))
            .load()
        )
        return self.sink.write(kafka_records(records, rest_plan(plan, rests), observation))


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
        walked = Walked.write(batch, walk, batch_id, self.sink)
        result, rests = walked.result()
        if not rests:
            return result.counted(walked.transactions)
        places = [f"{rest.partition} offset {rest.start}" for rest in rests]
        log.info(  # where the walk stopped: a record it could not be sure to write as the loop
            "batch %d: the JVM walk left %d record(s) to the Python loop, from %s%s",
            batch_id,
            sum(rest.stop - rest.start for rest in rests),
            ", ".join(places[:5]),
            f" and {len(places) - 5} more partition(s)" if len(places) > 5 else "",
        )
        more = Observation(f"batch-{batch_id}-rest")
        transactions = self._rest(batch.sparkSession, rests, plan, more)
        return BatchResult.of([*result.partitions, *read_result(more).partitions]).counted(
            walked.transactions + transactions
        )

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
        transactions = self._rest(batch.sparkSession, rests, plan, more)
        return read_result(more).counted(transactions)


def batch_writer(config: ChangefeedConfig, plan: BatchPlan, sink: RowSink) -> BatchWriter:
    """The writer of a run's batches: the walk where it can take ``plan``'s, else the loop."""
    kind = WalkWriter if walkable(plan) else LoopWriter
    return kind(config, sink)
