"""Our Java (``pipeline/jvm/walk``) as the Python side calls it: the one module that names it.

Every call into our classes goes through py4j to the JVM of a classic (not Connect) Spark
session; the rest of the Python side calls these typed functions instead. They run on the
driver; the Java they start runs in Spark's tasks on the executors.

* ``dev.highwater.sink.Sink``: every changefeed write of rows to Kafka (:func:`write_rows`);
* ``dev.highwater.walk.Walk``: the fast walk of a micro-batch (:func:`walk_and_write`,
  :func:`walk_rows`), its summaries in a :class:`Summaries` accumulator;
* ``dev.highwater.walk.Scan``: an initial scan's chunk walked (:func:`scan_and_write`,
  :func:`scan_rows`), its task's report in a :class:`Summaries` accumulator;
* ``dev.highwater.placement.Placement``: a batch's source ranges in one task per core, each
  on the executor Spark's Kafka source prefers for it (:func:`coalesce_in_place`);
* ``dev.highwater.sink.ExtraHeaders``: not called, named in producer settings
  (:data:`EXTRA_HEADERS`, ``interceptor.classes``): the fixed headers on every record.

A rename or a changed signature on the Java side is a change here, and only here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SINK = "dev.highwater.sink.Sink"
WALK = "dev.highwater.walk.Walk"
SCAN = "dev.highwater.walk.Scan"
PLACEMENT = "dev.highwater.placement.Placement"
EXTRA_HEADERS = "dev.highwater.sink.ExtraHeaders"  # a producer interceptor (boundary.py)


def _jvm(spark: SparkSession) -> Any:
    """The py4j view of ``spark``'s JVM."""
    jvm = spark._jvm
    if jvm is None:  # a Spark Connect session has no JVM of its own here
        raise RuntimeError("our Java needs a classic Spark session (not Spark Connect)")
    return jvm


def driver_pid(spark: SparkSession) -> int:
    """The process id of ``spark``'s driver JVM (in local mode, where its tasks run too)."""
    return int(_jvm(spark).java.lang.ProcessHandle.current().pid())


def _class(spark: SparkSession, name: str) -> Any:
    """One of our classes by its full name, in ``spark``'s JVM."""
    found = _jvm(spark)
    for part in name.split("."):
        found = getattr(found, part)
    return found


@dataclass(frozen=True)
class Summaries:
    """A JVM accumulator of the walk's partition summaries (JSON texts), one per batch."""

    accumulator: Any  # org.apache.spark.util.CollectionAccumulator<String>

    @classmethod
    def new(cls, spark: SparkSession, name: str) -> Summaries:
        """A new accumulator, registered with ``spark``'s context (tasks add to it)."""
        context = spark.sparkContext._jsc.sc()
        return cls(context.collectionAccumulator(name))

    def texts(self) -> list[str]:
        """The summaries added so far (read once the tasks finished)."""
        return [str(text) for text in self.accumulator.value()]


@dataclass(frozen=True)
class KafkaTransactions:
    """A write's Kafka transactions (exactly once; none at least once), failed tasks' too."""

    committed: int = 0
    aborted: int = 0

    def __add__(self, other: KafkaTransactions) -> KafkaTransactions:
        return KafkaTransactions(self.committed + other.committed, self.aborted + other.aborted)

    @classmethod
    def of(cls, counts: Any) -> KafkaTransactions:
        """From ``Delivery.counts`` (a Java ``long[]``: committed, aborted)."""
        committed, aborted = list(counts)
        return cls(int(committed), int(aborted))


def write_rows(records: DataFrame, options: Mapping[str, str]) -> KafkaTransactions:
    """``Sink.write``: rows ``topic, key, value, headers`` to Kafka; returns once all are answered.

    ``options``: Spark's Kafka writer options (``kafka.``-prefixed), and ``highwater.``-prefixed
    ones for exactly once (``progress.Claim.options``).
    """
    sink = _class(records.sparkSession, SINK)
    return KafkaTransactions.of(sink.write(records._jdf, dict(options)))


def coalesce_in_place(batch: DataFrame, tasks: int) -> DataFrame:
    """``Placement.inPlace``: ``batch`` in at most ``tasks`` partitions, in place.

    No source range moves off the executor Spark's Kafka source prefers for it (Spark's own
    coalesce moves them for balance).
    """
    from pyspark.sql import DataFrame  # noqa: PLC0415 - Spark stays out of the import path

    placement = _class(batch.sparkSession, PLACEMENT)
    return DataFrame(placement.inPlace(batch._jdf, tasks), batch.sparkSession)


def walk_and_write(
    batch: DataFrame, plan: str, summaries: Summaries, options: Mapping[str, str]
) -> KafkaTransactions:
    """``Walk.write``: walk ``batch`` (Spark's Kafka source rows) and send what it takes.

    ``plan``: the walk's plan (JSON); returns once Kafka acknowledged every record sent.
    """
    walk = _class(batch.sparkSession, WALK)
    return KafkaTransactions.of(walk.write(batch._jdf, plan, summaries.accumulator, dict(options)))


def walk_rows(batch: DataFrame, plan: str, summaries: Summaries) -> DataFrame:
    """``Walk.walk``: the same walk, its records as rows (topic, key, value, headers)."""
    from pyspark.sql import DataFrame  # noqa: PLC0415 - Spark stays out of the import path

    walk = _class(batch.sparkSession, WALK)
    return DataFrame(walk.walk(batch._jdf, plan, summaries.accumulator), batch.sparkSession)


def scan_and_write(
    chunk: DataFrame, plan: str, reports: Summaries, options: Mapping[str, str]
) -> KafkaTransactions:
    """``Scan.write``: walk a scan's sorted ``chunk`` and send its rows.

    ``plan``: the chunk's plan (JSON); returns once Kafka acknowledged every record sent.
    """
    scan = _class(chunk.sparkSession, SCAN)
    return KafkaTransactions.of(scan.write(chunk._jdf, plan, reports.accumulator, dict(options)))


def scan_rows(chunk: DataFrame, plan: str, reports: Summaries) -> DataFrame:
    """``Scan.rows``: the same walk, its records as rows (topic, key, value, headers)."""
    from pyspark.sql import DataFrame  # noqa: PLC0415 - Spark stays out of the import path

    scan = _class(chunk.sparkSession, SCAN)
    return DataFrame(scan.rows(chunk._jdf, plan, reports.accumulator), chunk.sparkSession)
