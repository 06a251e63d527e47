"""The row sink: the one owner of every row the changefeed writes to its output topics.

A run builds one :class:`RowSink` from its config (:meth:`RowSink.of`): the sink cluster,
the producer settings every changefeed write uses (:func:`~.kafka_clients.writer_options`)
and, exactly once, the run's claim (``progress.Claim``), whose options make each source
partition's piece a Kafka transaction with its progress record. Every row goes out through
it, by our Java's writers (``jvm.py``), and each call returns once Kafka acknowledged every
record it sent, with the transactions it committed and aborted:

* :meth:`RowSink.write`: rows the Python loop made (``topic, key, value, headers``): a
  micro-batch, the rests the walk left, an initial scan's chunk;
* :meth:`RowSink.walk`: a micro-batch walked in the JVM (``walk.py``);
* :meth:`RowSink.scan`: an initial scan's chunk walked in the JVM (``scan/scan_walk.py``).

Our Java's, not Spark's Kafka writer (Spark's pooled producer and its option checks are
kept): a task ends only once Kafka answered every record it sent, where Spark's writer trusts
the producer's ``flush()``, which can return before a refused batch's records are answered
(KAFKA-19479), and such records would be lost unseen.

A scan's chunk is written at its snapshot time (``scan_time``): exactly once, its progress
records are the scan's, not the stream's. Markers, checkpoints and status records are not
rows; the coordinator writes those, after the rows they cover.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from pipeline.config import ChangefeedConfig, KafkaOptions
from schemas.hlc import Hlc

from .jvm import KafkaTransactions, Summaries, scan_and_write, walk_and_write, write_rows
from .kafka_clients import writer_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class Delivery(Protocol):
    """Exactly once: the Java writers' options of a run's claim (``progress.Claim.options``)."""

    def options(self, kind: str = "rows", scan_time: Hlc | None = None) -> dict[str, str]:
        """The options of a stream's pieces (``rows``) or a scan's chunks (``scan``)."""
        ...


@dataclass(frozen=True)
class RowSink:
    """Where a run's rows go, and how: at least once, or exactly once by its claim."""

    kafka: KafkaOptions  # the sink cluster
    producer: Mapping[str, str]  # the user's producer settings (``sink.producer_settings``)
    delivery: Delivery | None = None  # exactly once: the run's claim
    headers: Mapping[str, str] = field(default_factory=dict)  # on every row (``extra_headers``)

    @classmethod
    def of(cls, config: ChangefeedConfig, delivery: Delivery | None = None) -> RowSink:
        """A run's sink: ``delivery`` is its claim when the config says exactly once."""
        sink = config.sink
        return cls(config.sink_kafka, sink.producer_settings, delivery, sink.extra_headers or {})

    def options(self, scan_time: Hlc | None = None) -> dict[str, str]:
        """The Java writers' options: a stream's pieces, or (``scan_time``) a scan's chunks."""
        options = writer_options(self.kafka, self.producer, self.headers)
        if self.delivery is not None:
            kind = "rows" if scan_time is None else "scan"
            options.update(self.delivery.options(kind, scan_time))
        return options

    def write(self, records: DataFrame, *, scan_time: Hlc | None = None) -> KafkaTransactions:
        """Write the Python loop's rows (``topic, key, value, headers``)."""
        return write_rows(records, self.options(scan_time))

    def walk(self, batch: DataFrame, plan: str, summaries: Summaries) -> KafkaTransactions:
        """Walk a micro-batch (Spark's Kafka source rows) in the JVM and write what it takes."""
        return walk_and_write(batch, plan, summaries, self.options())

    def scan(
        self, chunk: DataFrame, plan: str, reports: Summaries, scan_time: Hlc
    ) -> KafkaTransactions:
        """Walk a scan's sorted chunk in the JVM and write its rows."""
        return scan_and_write(chunk, plan, reports, self.options(scan_time))
