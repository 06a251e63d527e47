"""Kafka client settings and topic administration, built from the config in one place.

Every Kafka client Highwater makes (Spark's source and sink, confluent-kafka producers,
consumers and admin clients) takes its settings from :func:`client_config` or
:func:`spark_kafka_options`, so security settings given once in ``kafka.options`` reach all
of them.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from pipeline.config import KafkaOptions
from schemas.errors import SourceError

from ..ledger import SourcePartition
from .boundary import extra_headers_settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrameReader
    from pyspark.sql.streaming.readwriter import DataStreamReader

    Reader = TypeVar("Reader", DataFrameReader, DataStreamReader)


def client_config(kafka: KafkaOptions, **extra: Any) -> dict[str, Any]:
    """Settings for a confluent-kafka client of this cluster."""
    return {"bootstrap.servers": kafka.bootstrap_servers, **kafka.options, **extra}


# Spark reads each source partition's range with one consumer per task; when a range ends at
# the partition's end, the consumer's next fetch waits fetch.max.wait.ms (500 ms by default)
# for data that is not coming, and a batch pays that once per partition. Measured on 300
# partitions: 88 s per batch at the default, 8 s at 20 ms. A user's kafka.options still win.
# read_committed: a transaction the upstream aborted never reaches the output (the Java
# client's default would read it).
SOURCE_DEFAULTS = {"kafka.fetch.max.wait.ms": "20", "kafka.isolation.level": "read_committed"}


def spark_kafka_options(kafka: KafkaOptions, *, source: bool = False) -> dict[str, str]:
    """Options for Spark's Kafka source or sink (``kafka.``-prefixed client settings)."""
    options = {"kafka.bootstrap.servers": kafka.bootstrap_servers}
    if source:
        options.update(SOURCE_DEFAULTS)
    options.update({f"kafka.{k}": v for k, v in kafka.options.items()})
    return options


def source_reader(reader: Reader, kafka: KafkaOptions, *, headers: bool = True) -> Reader:
    """Spark's Kafka source as every changefeed read uses it (stream and initial scan).

    Data loss fails the read (a trimmed offset is never skipped), and headers come along for
    the dead-letter topic and CDC queries (``headers=False``: a stream the JVM walk takes,
    whose rests are read again with them).
    """
    return (
        reader.format("kafka")
        .options(**spark_kafka_options(kafka, source=True))
        .option("failOnDataLoss", "true")
        .option("includeHeaders", str(headers).lower())
    )


# The rows' producers wait up to 5 ms to fill batches of up to 256 KiB (Kafka's own defaults
# before 4.0: no wait, 16 KiB). A task writes its partition's records in one burst, so the
# wait costs nothing and the fuller batches halve the produce requests: 1.4x the rows/s of the
# walk at least once, 1.5x exactly once, where each source partition has its own
# transactional producer (docs/benchmarks.md, session 23). Kafka 4.0 made 5 ms its default.
PRODUCER_BATCHING = {"linger.ms": "5", "batch.size": "262144"}
INTERCEPTORS = "interceptor.classes"


def writer_options(
    kafka: KafkaOptions, producer: Mapping[str, str], headers: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Spark's Kafka writer options for every changefeed write (Spark's writer and the walk's).

    ``acks=all``, idempotent, and batching (:data:`PRODUCER_BATCHING`); ``producer``: the
    user's producer settings (``sink.producer_settings``, which win; the config refuses unsafe
    ones); ``headers``: fixed headers on every record (``sink.extra_headers``).
    """
    settings = {**producer, **extra_headers_settings(headers or {}, producer.get(INTERCEPTORS))}
    return {
        **spark_kafka_options(kafka),
        "kafka.acks": "all",
        "kafka.enable.idempotence": "true",
        **{f"kafka.{k}": v for k, v in PRODUCER_BATCHING.items()},
        **{f"kafka.{k}": v for k, v in settings.items()},
    }


# What the rows' producer settings say of the changefeed's producers, which the driver's own
# writer (markers, checkpoints) takes too, by librdkafka's same name: the client id (quotas).
# Not the batching (a marker is one record a partition), nor the compression (librdkafka sends
# a one-record batch as it is; a wrong codec must fail the first batch's write, named there).
OUTPUT_WIDE = ("client.id",)


def own_writer_settings(producer: Mapping[str, str]) -> dict[str, str]:
    """The driver's writer's share of the rows' producer settings (:data:`OUTPUT_WIDE`)."""
    return {k: v for k, v in producer.items() if k in OUTPUT_WIDE}


def range_reader(client: Mapping[str, Any], group: str) -> Any:
    """A confluent-kafka consumer for :func:`read_range` (no group commits).

    Its fetches wait at most 10 ms for more data: a read stops at a known offset and moves on
    to another partition or range, and the default 500 ms long poll at a partition's end would
    hold up each next read (12 partitions' latest markers took 11 s; with it, well under 1).
    """
    return Consumer(
        {
            **client,
            "group.id": group,
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,  # a range may end in transaction control records
        }
    )


def read_range(consumer: Any, sp: SourcePartition, start: int, stop: int) -> Iterator[Any]:
    """The records of ``sp`` from offset ``start`` up to ``stop`` (confluent-kafka messages).

    For the driver's own short reads (a partition's tail, GC's prefix); a missing record or a
    read error is a :class:`SourceError` naming the partition and offset. The committed
    records end where the consumer reports the partition's end: offsets up to ``stop`` after
    it hold transaction markers or records not committed (yet), which no reader sees.
    """
    consumer.assign([TopicPartition(sp.topic, sp.partition, start)])
    position = start
    while position < stop:
        message = consumer.poll(10)
        if message is None:
            raise SourceError(f"{sp}: no record at offset {position} (end {stop}) in 10 s")
        error = message.error()
        if error is not None and error.code() == KafkaError._PARTITION_EOF:
            if (message.topic(), message.partition()) == (sp.topic, sp.partition):
                return
            continue  # the end of a partition read before
        if error is not None:
            raise SourceError(f"{sp}: reading offset {position}: {error}")
        position = message.offset() + 1
        yield message


# What a broker answers for a partition it lists but does not serve yet: a topic just created
# (Debezium's transaction topic, by Connect's producer) is in the metadata before its leader has
# taken the partition on, and a ListOffsets in that gap, seconds on a busy machine, answers
# NOT_LEADER_FOR_PARTITION (seen in CI, 2026-12-07). Asked again, it answers.
# A broker whose metadata lags may not know a topic just created (UNKNOWN_TOPIC_OR_PART) for
# a moment; a topic deleted for good answers so too, and is named after UNKNOWN_GRACE seconds,
# not the caller's whole timeout.
NOT_SERVING_YET = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE})
UNKNOWN_GRACE = 3.0


def watermarks(consumer: Any, tp: TopicPartition, timeout: float = 30.0) -> tuple[int, int]:
    """``tp``'s low and high offsets, asked again while its leader does not serve it yet.

    ``timeout`` bounds the whole wait; past it the broker's last error is raised (an unknown
    topic or partition's after :data:`UNKNOWN_GRACE`).
    """
    started = time.monotonic()
    deadline = started + timeout
    while True:
        try:
            low, high = consumer.get_watermark_offsets(
                tp, timeout=max(0.1, deadline - time.monotonic())
            )
        except KafkaException as exc:
            code, now = exc.args[0].code(), time.monotonic()
            unknown = code == KafkaError.UNKNOWN_TOPIC_OR_PART and now < started + UNKNOWN_GRACE
            if (code not in NOT_SERVING_YET and not unknown) or now >= deadline:
                raise
            time.sleep(0.1)
            continue
        return low, high


def low_offsets(
    client: Mapping[str, Any], partitions: Iterable[SourcePartition]
) -> dict[SourcePartition, int]:
    """Each partition's first offset still held (its low watermark)."""
    consumer = range_reader(client, "highwater-low-offsets")
    try:
        return {
            sp: watermarks(consumer, TopicPartition(sp.topic, sp.partition))[0] for sp in partitions
        }
    finally:
        consumer.close()
