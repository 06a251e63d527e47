"""The Spark side of the stream: the streaming query.

Spark Structured Streaming reads the source topics from where the changefeed's position
stands and hands every micro-batch to the coordinator (``foreachBatch``), which writes it
through ``rounds.Rounds`` and the run's ``batch.BatchWriter``.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.config import ChangefeedConfig

from ..batch import source_reader

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
    source records' headers are read (not for the walk: ``writer.WalkWriter``).
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
