"""Where the Spark engine reads: offset ranges of the output topics, and their markers.

The driver never decodes a row. Per step it asks Kafka (confluent-kafka, on the driver) for
each output partition's end, reads ``[start, end)`` of every partition as **one Spark batch**
(``spark.read.format("kafka")`` with ``startingOffsets``/``endingOffsets``), and one Spark job
finds each partition's latest marker (the highest R, and the first offset that said it). The
frontier, the lowest of them, is a resolved time every table gets: every row at or below it
is in the ranges read (a marker R on a partition promises that no row at or below R it has
not shown follows; a row above the previous R may come before the previous marker, a
replay at or below it after: both are read, as :mod:`highwater_consumer.windows` reads them).

Progress is the consumer group's committed offsets, with R in their metadata as the local
engine commits them (the same group a target's local engine uses: an applier may switch
engines): per partition the first offset of a row above the new R, or its latest marker's
(read again, so a restart need not wait for the next marker). Committed only once every
table holds R; rows a table already holds are skipped by their time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from confluent_kafka import Consumer, KafkaException, TopicPartition

from highwater_consumer.consumer import METADATA_PREFIX, committed_offsets
from highwater_consumer.decoding import ConsumerError
from highwater_consumer.output import Output
from schemas.hlc import Hlc

from .rows import MARKER_SCHEMA, MarkerReader

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

Partition = tuple[str, int]
_TIMEOUT = 30.0


@dataclass(frozen=True)
class Marker:
    """A partition's latest marker: its R (packed and as written) and where it was read."""

    packed: int
    text: str
    offset: int


class Offsets:
    """The output's partitions for one consumer group: where to read from, to, and commits.

    Making one touches nothing; :meth:`open` reaches the broker.
    """

    def __init__(self, output: Output, group: str) -> None:
        self.output = output
        self.group = group
        self.starts: dict[Partition, int] = {}
        self._consumer: Consumer | None = None

    def open(self) -> dict[Partition, int]:
        """Find the partitions and where the group left off (its beginning where it did not)."""
        consumer = self._consumer = Consumer(
            {
                "bootstrap.servers": self.output.bootstrap,
                "group.id": self.group,
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                **self.output.kafka,
            }
        )
        partitions = []
        for topic in sorted(self.output.topics):
            metadata = consumer.list_topics(topic, timeout=_TIMEOUT).topics.get(topic)
            if metadata is None or metadata.error is not None or not metadata.partitions:
                raise ConsumerError(f"output topic {topic!r} cannot be read")
            partitions += [TopicPartition(topic, p) for p in sorted(metadata.partitions)]
        # a new broker's group coordinator may need a moment: the consumer's own wait
        committed = committed_offsets(consumer, [(tp.topic, tp.partition) for tp in partitions])
        for tp in committed:
            low, _ = consumer.get_watermark_offsets(tp, timeout=_TIMEOUT)
            self.starts[(tp.topic, tp.partition)] = max(tp.offset, low)
        return dict(self.starts)

    @property
    def consumer(self) -> Consumer:
        """The driver's client (:meth:`open` made it)."""
        if self._consumer is None:
            raise ConsumerError("the offsets were not opened")
        return self._consumer

    def ends(self) -> dict[Partition, int]:
        """Each partition's end now (the last stable offset: committed transactions only)."""
        out = {}
        for partition in self.starts:
            _, high = self.consumer.get_watermark_offsets(
                TopicPartition(*partition), timeout=_TIMEOUT
            )
            out[partition] = high
        return out

    def commit(self, offsets: Mapping[Partition, int], resolved: Hlc) -> None:
        """Every table holds ``resolved``: a restart reads on from ``offsets``."""
        metadata = f"{METADATA_PREFIX}{resolved}"
        commit = [TopicPartition(t, p, o, metadata=metadata) for (t, p), o in offsets.items()]
        try:
            self.consumer.commit(offsets=commit, asynchronous=False)
        except KafkaException as exc:
            raise ConsumerError(f"committing the offsets of {resolved} failed: {exc}") from exc
        self.starts.update(offsets)

    def close(self) -> None:
        """Leave (nothing is held between steps)."""
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def read(
    spark: SparkSession,
    output: Output,
    starts: Mapping[Partition, int],
    ends: Mapping[Partition, int],
) -> DataFrame:
    """The records of ``[start, end)`` of every partition, as one Spark batch."""
    begin: dict[str, dict[str, int]] = {}
    end: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in starts.items():
        begin.setdefault(topic, {})[str(partition)] = offset
        end.setdefault(topic, {})[str(partition)] = ends[(topic, partition)]
    assign = {topic: sorted(int(p) for p in parts) for topic, parts in begin.items()}
    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", output.bootstrap)
        .option("kafka.isolation.level", "read_committed")
        .option("assign", json.dumps(assign))
        .option("startingOffsets", json.dumps(begin))
        .option("endingOffsets", json.dumps(end))
    )
    return reader.load().select("key", "value", "topic", "partition", "offset")


def markers(records: DataFrame, output: Output) -> dict[Partition, Marker]:
    """Each partition's latest marker among ``records`` (a partition without one: absent).

    One Spark job: the records without a key read by the output's decoder on the executors
    (:class:`~.rows.MarkerReader`: JSON or Avro; one that is no marker stops the step, named),
    the highest per partition and the first offset that said it.
    """
    from pyspark.sql import functions as f  # noqa: PLC0415

    keyless = records.where(records.key.isNull()).select("value", "topic", "partition", "offset")
    found = keyless.mapInArrow(MarkerReader(output), MARKER_SCHEMA)
    latest = found.groupBy("topic", "partition").agg(
        f.max(f.struct("packed", (-f.col("offset")).alias("first"), "text")).alias("m")
    )
    out = {}
    for row in latest.collect():
        marker = row["m"]
        out[(row["topic"], row["partition"])] = Marker(
            int(marker["packed"]), marker["text"], -int(marker["first"])
        )
    return out


def frontier(latest: Mapping[Partition, Marker], partitions: list[Partition]) -> Marker | None:
    """The lowest latest marker of every partition; None while one has none."""
    if not partitions or any(p not in latest for p in partitions):
        return None
    lowest = min((latest[p] for p in partitions), key=lambda marker: marker.packed)
    Hlc.parse(lowest.text)  # a marker's text is an HLC: refused here by name if it is not
    return lowest
