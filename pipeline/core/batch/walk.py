"""The fast walk: a micro-batch of changes read and written in the JVM.

The walk (``pipeline/jvm/walk``, Java, built by ``highwater fetch-jars``; called through
``pipeline/core/batch/jvm.py``) reads Spark's
Kafka rows in Spark's own task and sends what it takes to Kafka by Spark's pooled producer
(the writer options of every changefeed write), without handing the records to Python and
back or through the Kafka writer's rows: each costs more than the speed target leaves
(``docs/benchmarks.md``). Each encoder says whether and how it can write its records there
(``Encoder.walk``):

* ``verbatim`` (the JSON encoder whose envelope is the source value's own members): per
  record only the checks the Python loop (``pipeline/core/batch/loop.py``) makes before passing
  the bytes on: a valid JSON value of exactly those members, a time written as the
  changefeed writes times, a compact key;
* ``avro`` (the Avro encoder, for tables of primitive column types): the row's JSON is read
  by the table's schema and written in the Confluent or single-object framing, byte for byte
  what the Python loop's encoder writes; a Debezium or Canal-JSON change is read as below
  into the JSON encoder's envelope, the form a native record has, and written from it so
  (``AvroOut.java``);
* ``debezium`` sources (JSON, or Avro in Confluent's wire format read by the registry's
  writer schemas as ``sources/wire.py`` reads it; to the JSON encoder's walked envelope):
  PostgreSQL's and binlogs' events (a binlog change at its transaction's END's time, from
  the plan's ``commits``; one whose END was not read yet stops the walk there) read as
  ``sources/debezium.py`` reads them (the key's fields, the commit's clock and the
  event's place in it, values by their Connect schema) and written as the JSON encoder
  writes them (or in Avro, from that); each re-send dropped and each change counted for
  its transaction as the loop does (the summary carries the highest position and the
  transactions' places and times);
* ``canal-json`` sources (to the same envelope, or Avro from it): each row of an event a
  record, at its commit time (``_tidb.commitTs``), numeric ``mysqlType`` columns as the
  numbers their text spells; watermarks are markers, DDL events carry nothing;
* ``key_column`` on any of those JSON routes: each change keyed by ``[value]`` of the
  column in its envelope's new version (a delete: its old one), where that value is one a
  compact key holds as it came (``KeyColumn.java``); ``headers_json_column_name``: the
  column's object the record's headers and out of both versions, where the envelope is
  already what the Python loop writes again (``HeadersColumn.java``, ``Compact.java``);
  on an ``avro`` route both read by ``Avro.java`` itself: the key record the column's value,
  the headers from the column's compact object, which is not in the row record;

One code path still decides everything else. The walk takes a partition's records in offset
order, as the loop does (markers raise the floor; changes at or below it are dropped), until
the first record it does not take: anything else, valid or not. There it stops that
partition; the summary says where (*deferred*: from, to, the floor there), and
the writer (``writer.py``) reads that rest again and runs it through the Python loop, after
the walk's records were acknowledged, so per-key order holds and bad records go where
``on_error`` says.
Whether the walk takes a changefeed is a property of its config (:func:`walkable`): such a
stream is read without Kafka headers, and the rests with them (dead letters carry them).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from .boundary import WalkPlan, WalkRoute
from .contract import BatchPlan, BatchResult, Deferred, PartitionSeen
from .jvm import KafkaTransactions, Summaries, walk_rows
from .sink import RowSink

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def walkable(plan: BatchPlan) -> bool:
    """Whether the walk can take ``plan``'s batches: a property of the config alone.

    Every source native, Debezium (JSON or Avro) or Canal-JSON with an encoder the walk can
    write (``Encoder.walk``: the JSON encoder's envelope, or Avro); no CDC query, no end
    time. Such a changefeed's stream needs no headers (the rests are read again with them).
    """
    if plan.shapes or plan.end_time is not None:
        return False
    return all(_walks(plan, topic, fmt) for topic, fmt in plan.formats.items())


def _walks(plan: BatchPlan, topic: str, fmt: str) -> bool:
    walk = plan.encoders[topic].walk
    if walk is None:
        return False
    if fmt in ("debezium", "canal-json"):
        return walk["kind"] in ("verbatim", "avro")
    return fmt == "native"


def walk_plan(plan: BatchPlan) -> str | None:
    """The walk's plan (JSON) when :func:`walkable`, else None."""
    walk = planned_walk(plan)
    return None if walk is None else walk.to_json()


def planned_walk(plan: BatchPlan) -> WalkPlan | None:
    """The walk's plan (:class:`~.boundary.WalkPlan`) when :func:`walkable`, else None."""
    if not walkable(plan):
        return None
    routes = {
        topic: WalkRoute(
            topic=plan.routes[topic],
            encoding=walk,
            format=fmt,
            registry=plan.registries.get(topic),  # Debezium's Avro: its writer schemas
            counted=topic in plan.counted,
        )
        for topic, fmt in plan.formats.items()
        if (walk := plan.encoders[topic].walk) is not None  # every one, as walkable says
    }
    return WalkPlan(
        routes=routes,
        thresholds=plan.thresholds,
        new_partition_floor=plan.new_partition_floor,
        positions=plan.positions,
        commits=plan.commits,
        room=plan.room,
    )


@dataclass(frozen=True)
class Walked:
    """A batch's walk: what it saw of each source partition, once its records are written."""

    summaries: Summaries
    # exactly once: the walk's
    transactions: KafkaTransactions = field(default_factory=KafkaTransactions)

    @classmethod
    def write(cls, batch: DataFrame, walk: str, batch_id: int, sink: RowSink) -> Walked:
        """Walk ``batch`` (Spark's Kafka source rows) and send what it takes to ``sink``.

        ``walk``: the plan. Returns once the brokers acknowledged every record.
        """
        summaries = Summaries.new(batch.sparkSession, f"walk-{batch_id}")
        return cls(summaries, sink.walk(batch, walk, summaries))

    @classmethod
    def rows(cls, batch: DataFrame, walk: str, batch_id: int) -> tuple[DataFrame, Walked]:
        """The same walk, its records as rows (topic, key, value, headers) instead of sent.

        The summaries are there once the rows were computed (collected).
        """
        summaries = Summaries.new(batch.sparkSession, f"walk-{batch_id}")
        return walk_rows(batch, walk, summaries), cls(summaries)

    def result(self) -> tuple[BatchResult, list[Deferred]]:
        """The summaries merged, and the partitions' rests left to the Python loop.

        Read once the records were written (the tasks report as they finish).
        """
        summaries, rests = [], []
        for text in self.summaries.texts():
            seen = PartitionSeen.from_json(text)
            rest = seen.rest()
            if rest is not None:
                rests.append(rest)
            seen.deferred = None  # the walk's rest runs through the loop next
            summaries.append(seen)
        return BatchResult.of(summaries), rests


def rest_plan(plan: BatchPlan, rests: list[Deferred]) -> BatchPlan:
    """``plan`` for the rests: each partition's floor and position where the walk stopped.

    The walk's floor is never below the plan's but for a floor above
    :data:`~.boundary.CEILING`.
    """
    floors, positions = {}, {}
    for rest in rests:
        place = (rest.partition.topic, rest.partition.partition)
        floors[place] = max(rest.floor, plan.thresholds.get(place, plan.new_partition_floor))
        position = plan.positions.get(place) if rest.position is None else rest.position
        if position is not None:  # (the walk leaves out one beyond a Java long)
            positions[place] = position
    return replace(plan, thresholds=floors, positions=positions)
