"""The Spark side of the stream: the streaming query, and one micro-batch's write.

Spark Structured Streaming reads the source topics from where the changefeed's position
stands and hands every micro-batch to the coordinator (``foreachBatch``), which calls
:func:`write_batch`: the batch goes through ``pipeline/core/batch.py`` on the executors
(decode, drop what is resolved, encode) straight into the sink (``write_records``: every
record answered by Kafka before the batch counts), and the summaries of what each source
partition contributed come back through a Spark ``Observation``; or through the JVM walk
(``pipeline/core/walk.py``), which sends what it takes itself.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.config import ChangefeedConfig

from . import faults
from .batch import BatchPlan, BatchResult, Deferred, Settled, kafka_records, read_result
from .kafka_clients import source_reader, write_records
from .queries import apply_query
from .walk import Walked, walk_plan, write_rest

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)


def start_query(
    spark: SparkSession,
    config: ChangefeedConfig,
    starting_offsets: str,
    on_batch: Callable[[DataFrame, int], None],
    resources: ExitStack,
    *,
    headers: bool,
) -> StreamingQuery:
    """Start the streaming query at ``starting_offsets`` (returns at once).

    Spark's checkpoint location is a scratch folder, removed when ``resources`` close: a
    cache, never the truth (contract §6); the checkpoint record is. ``headers``: whether the
    source records' headers are read (not when the walk takes every batch: ``walk.walkable``).
    """
    scratch = Path(
        tempfile.mkdtemp(
            prefix=f"highwater-{config.changefeed_id}-", dir=config.spark.checkpoint_location
        )
    )
    resources.callback(shutil.rmtree, scratch, ignore_errors=True)
    reader = (
        source_reader(spark.readStream, config.kafka, headers=headers)
        .option("subscribe", ",".join(config.routes))
        .option("startingOffsets", starting_offsets)
    )
    if config.spark.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(config.spark.max_offsets_per_trigger))
    writer = (
        reader.load()
        .writeStream.foreachBatch(on_batch)
        .option("checkpointLocation", str(scratch))
        .queryName(f"highwater-{config.changefeed_id}")
    )
    trigger = config.spark.trigger
    if trigger.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{trigger.processing_time.total_seconds()} seconds")
    log.info("changefeed %s: %s", config.changefeed_id, config.routes)
    return writer.start()


# What the driver does with a batch's rests that wait for something (``result.rests``; the
# batch so far, where a table emitted again at a schema change ends): the plan to run them
# again with, those that run now, those that wait for the next round (the others stay where
# they stopped).
Settle = Callable[[BatchPlan, BatchResult], Settled]


def write_batch(
    batch: DataFrame,
    batch_id: int,
    plan: BatchPlan,
    config: ChangefeedConfig,
    settle: Settle | None = None,
) -> tuple[BatchResult, float]:
    """Write one micro-batch's rows; returns once Kafka acknowledged them, with the seconds.

    Through the JVM walk where it can take the batch (``pipeline/core/walk.py``), each
    partition's rest from the first record it does not take then through the Python loop;
    else all through the Python loop (``pipeline/core/batch.py``). A partition the loop
    stopped at a binlog change whose transaction's END was not read yet, or at a row of a new
    shape, runs again from there once ``settle`` gave a plan with the END's time or an
    evolved schema; one it does not run stays where it stopped.
    """
    from pyspark.sql import Observation  # noqa: PLC0415 - Spark stays out of the import path

    query = config.query
    if query is not None:
        batch = apply_query(batch, *query, config.encoder, source_format=config.sources[0].format)
    walk = walk_plan(plan)
    faults.reached("during_write")
    started = time.perf_counter()
    if walk is None:
        observation = Observation(f"batch-{batch_id}")
        write_records(
            kafka_records(batch, plan, observation), config.sink_kafka, config.sink.producer
        )
        result = read_result(observation)
    else:
        walked = Walked.write(batch, walk, batch_id, config.sink_kafka, config.sink.producer)
        result, rests = walked.result()
        if rests:
            more = Observation(f"batch-{batch_id}-rest")
            write_rest(batch.sparkSession, rests, plan, config, more)
            result = BatchResult.of([*result.partitions, *read_result(more).partitions])
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
        write_rest(batch.sparkSession, again, plan, config, more)
        result = result.with_rests(read_result(more), later)
    seconds = time.perf_counter() - started
    faults.reached("after_write")
    return result, seconds


def _waited(rest: Deferred) -> str:
    if rest.waits_for is not None:
        return f"{rest.partition} for the END of transaction {rest.waits_for}"
    return f"{rest.partition}@{rest.start} with an evolved schema"
