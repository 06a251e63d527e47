"""The changefeed job: source change topics in, output topics out.

Stage one (platform issue): a streaming query that carries every source record to its
table's output topic, keyed as it came, so broker, jars and Spark are proven to work
together. The core issue replaces the body with decoding, the frontier, encoders, resolved
markers and Kafka checkpoints; the shape (config in, one query, runs until the trigger ends
it) stays.

Runs on the driver; the per-record work is Spark column expressions on the executors.
"""

from __future__ import annotations

import logging
import tempfile
from typing import TYPE_CHECKING

from pipeline.config import ChangefeedConfig
from pipeline.kafka_clients import client_config, spark_kafka_options
from sinks.admin import ensure_topics

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)


def output_topics(config: ChangefeedConfig) -> dict[str, str]:
    """Source topic → output topic."""
    return {s.topic: config.output_topic(s) for s in config.sources}


def prepare_topics(config: ChangefeedConfig) -> None:
    """Create the output topics that are missing, with the configured partitions and RF."""
    ensure_topics(
        client_config(config.sink_kafka),
        dict.fromkeys(output_topics(config).values(), config.sink.partitions),
        replication_factor=config.sink.replication_factor,
    )


def read_sources(config: ChangefeedConfig, spark: SparkSession) -> DataFrame:
    """The source topics as a streaming DataFrame of raw Kafka records."""
    reader = (
        spark.readStream.format("kafka")
        .options(**spark_kafka_options(config.kafka))
        .option("subscribe", ",".join(s.topic for s in config.sources))
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
        .option("includeHeaders", "true")
    )
    if config.spark.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(config.spark.max_offsets_per_trigger))
    return reader.load()


def start(config: ChangefeedConfig, spark: SparkSession) -> StreamingQuery:
    """Create the output topics and start the streaming query."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    prepare_topics(config)
    routes = output_topics(config)
    target = F.lit(None).cast("string")
    for source_topic, out_topic in routes.items():
        target = F.when(F.col("topic") == source_topic, F.lit(out_topic)).otherwise(target)
    records = read_sources(config, spark).select(
        target.alias("topic"), F.col("key"), F.col("value"), F.col("headers")
    )
    checkpoint = config.spark.checkpoint_location or tempfile.mkdtemp(
        prefix=f"highwater-{config.changefeed_id}-"
    )
    writer = (
        records.writeStream.format("kafka")
        .options(**spark_kafka_options(config.sink_kafka))
        .option("kafka.acks", "all")
        .option("kafka.enable.idempotence", "true")
        .option("includeHeaders", "true")
        .option("checkpointLocation", checkpoint)
        .queryName(f"highwater-{config.changefeed_id}")
    )
    for key, value in config.sink.producer.items():
        writer = writer.option(f"kafka.{key}", value)
    trigger = config.spark.trigger
    if trigger.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{trigger.processing_time.total_seconds()} seconds")
    log.info("changefeed %s: %s", config.changefeed_id, routes)
    return writer.start()


def run(config: ChangefeedConfig, spark: SparkSession) -> None:
    """Run the changefeed until its trigger ends it (or the process is stopped)."""
    query = start(config, spark)
    query.awaitTermination()
