"""The fast walk: a micro-batch whose output is the source's own bytes, walked in the JVM.

A native JSON source whose encoder passes values on as they came (``Encoder.verbatim``: the
envelope's members are the source value's) needs, per record, only the checks the Python loop
(``pipeline/core/batch.py``) would make before passing the bytes on: a valid JSON value of
exactly those members, a time written as the changefeed writes times, a compact key. The
walk (``pipeline/jvm/walk``, Java, built by ``highwater dev fetch-jars``) makes them over the
bytes in Spark's own task, without handing the records to Python and back: that hand-over
alone costs more than the speed target leaves (``docs/benchmarks.md``).

One code path still decides everything else. The walk takes a partition's records in offset
order, as the loop does (markers raise the floor; changes at or below it are dropped), until
the first record it does not take: anything else, valid or not. There it stops that
partition; the summary says where (*deferred*: from, to, the floor there), and
:func:`write_rest` reads that rest again and runs it through the Python loop, after the
walk's rows were written, so per-key order holds and bad records go where ``on_error`` says.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pipeline.config import ChangefeedConfig
from schemas.hlc import Hlc

from .batch import BatchPlan, BatchResult, PartitionSeen, kafka_records, records_observed
from .frontier import SourcePartition
from .kafka_clients import source_reader, write_records

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, Observation, SparkSession

_LONG = 2**63  # the walk keeps times as two Java longs


@dataclass(frozen=True)
class Deferred:
    """The rest of a source partition's batch, from the first record the walk did not take."""

    partition: SourcePartition
    start: int
    stop: int  # just past the batch's last offset
    floor: Hlc  # the partition's floor at ``start``


def walk_plan(plan: BatchPlan) -> str | None:
    """The walk's plan (JSON) when every source of ``plan`` can take the walk, else None.

    Every source native, every encoder passing the whole value on as it came (``verbatim``
    with ``updated``: only the JSON encoder, which writes keys compact), no CDC query, no
    end time, every floor within a long.
    """
    if plan.shapes or plan.end_time is not None:
        return None
    routes = {}
    for topic, fmt in plan.formats.items():
        members = plan.encoders[topic].verbatim
        if fmt != "native" or members is None or "updated" not in members:
            return None
        routes[topic] = {"topic": plan.routes[topic], "members": list(members)}
    floors = [plan.new_partition_floor, *plan.thresholds.values()]
    if any(ts.wall >= _LONG for ts in floors):
        return None
    return json.dumps(
        {
            "routes": routes,
            "thresholds": [[t, p, ts.wall, ts.logical] for (t, p), ts in plan.thresholds.items()],
            "new_partition_floor": list(plan.new_partition_floor),
            "room": plan.room,
        }
    )


def walked_records(batch: DataFrame, walk: str, observation: Observation) -> DataFrame:
    """The batch's Kafka records as the walk writes them; summaries go to ``observation``."""
    from pyspark.sql import DataFrame  # noqa: PLC0415 - Spark stays out of the import path

    spark = batch.sparkSession
    walked = spark._jvm.dev.highwater.walk.Walk.walk(batch._jdf, walk)  # type: ignore[union-attr]
    return records_observed(DataFrame(walked, spark), observation)


def read_walk(observation: Observation) -> tuple[BatchResult, list[Deferred]]:
    """The walk's summaries merged, and the partitions' rests it left to the Python loop."""
    summaries, rests = [], []
    for text in json.loads(observation.get.get("summaries") or "[]"):
        seen = PartitionSeen.from_json(text)
        summaries.append(seen)
        rest = json.loads(text).get("deferred")
        if rest is not None:
            rests.append(
                Deferred(seen.partition, rest["from"], rest["to"], Hlc.parse(rest["floor"]))
            )
    return BatchResult.of(summaries), rests


def write_rest(
    spark: SparkSession,
    rests: list[Deferred],
    plan: BatchPlan,
    config: ChangefeedConfig,
    observation: Observation,
) -> None:
    """Read the rests again and write them through the Python loop (summaries observed)."""
    assign: dict[str, list[int]] = {}
    starts: dict[str, dict[str, int]] = {}
    stops: dict[str, dict[str, int]] = {}
    for rest in rests:
        topic, partition = rest.partition.topic, rest.partition.partition
        assign.setdefault(topic, []).append(partition)
        starts.setdefault(topic, {})[str(partition)] = rest.start
        stops.setdefault(topic, {})[str(partition)] = rest.stop
    records = (
        source_reader(spark.read, config.kafka)
        .option("assign", json.dumps(assign))
        .option("startingOffsets", json.dumps(starts))
        .option("endingOffsets", json.dumps(stops))
        .load()
    )
    floors = {(r.partition.topic, r.partition.partition): r.floor for r in rests}
    rest_plan = replace(plan, thresholds=floors)
    write_records(
        kafka_records(records, rest_plan, observation), config.sink_kafka, config.sink.producer
    )
