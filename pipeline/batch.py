"""One micro-batch on the executors: drop what is already resolved, encode, route.

Given the decoded batch (``pipeline.sources``) and, per source partition, the resolved time
the driver's frontier had when the batch started, this builds the records to write and the
metrics the driver needs afterwards, all in one Spark job:

* A row is news only if its time is above its partition's resolved time *at that point of
  the partition*: the frontier's time, raised by every marker earlier in the same batch.
  Anything else is an upstream duplicate or a replay and is dropped.
* Rows keep their source partition's offset order (the window sorts by offset within a
  source partition, and every version of a key lives on one source partition), so each key's
  versions reach the output topic in commit order.
* Undecodable records go to the dead-letter topic (``on_error: dlq``) with the reason in
  headers, or are reported to the driver, which stops the job (``fail``, ``pause``).

Metrics come back through a Spark ``Observation`` of the same job: per source partition the
last offset read and the highest resolved time, and counts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from encoders.base import EnvelopeOptions
from schemas.errors import RecordRef
from schemas.hlc import Hlc

from .frontier import SourcePartition
from .sources import hlc_text
from .spark_encoding import json_value

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Observation, SparkSession

ERROR_HEADER = "highwater.error"
SOURCE_HEADER = "highwater.source"


@dataclass(frozen=True)
class BatchPlan:
    """What the driver decided before the batch: thresholds, routes, options."""

    thresholds: Mapping[SourcePartition, Hlc]
    routes: Mapping[str, str]  # source topic -> output topic
    envelope: EnvelopeOptions
    dlq_topic: str | None  # None: bad records are reported, not written
    end_time: Hlc | None = None


@dataclass(frozen=True)
class PartitionSeen:
    """What one source partition contributed to a batch."""

    partition: SourcePartition
    next_offset: int
    resolved: Hlc | None


@dataclass(frozen=True)
class BatchResult:
    """The metrics the driver reads after the write."""

    partitions: list[PartitionSeen]
    emitted: int
    duplicates: int
    bad: int
    first_bad: tuple[RecordRef, str] | None


def _struct_to_hlc(value: Any) -> Hlc | None:
    return None if value is None else Hlc(int(value["wall"]), int(value["logical"]))


def _ts_lit(ts: Hlc) -> Column:
    from pyspark.sql import functions as F  # noqa: PLC0415

    return F.struct(
        F.lit(ts.wall).cast("bigint").alias("wall"),
        F.lit(ts.logical).cast("bigint").alias("logical"),
    )


def plan_records(
    spark: SparkSession, decoded: DataFrame, plan: BatchPlan, observation: Observation
) -> DataFrame:
    """The records to write (``topic``, ``key``, ``value``, ``headers``), observed."""
    from pyspark.sql import Window  # noqa: PLC0415
    from pyspark.sql import functions as F  # noqa: PLC0415

    thresholds = spark.createDataFrame(
        [(sp.topic, sp.partition, ts.wall, ts.logical) for sp, ts in plan.thresholds.items()],
        "t_topic string, t_partition int, t_wall bigint, t_logical bigint",
    )
    joined = decoded.join(
        F.broadcast(thresholds),
        (F.col("src_topic") == F.col("t_topic")) & (F.col("src_partition") == F.col("t_partition")),
        "left",
    ).withColumn(
        "start",
        F.when(
            F.col("t_wall").isNotNull(),
            F.struct(F.col("t_wall").alias("wall"), F.col("t_logical").alias("logical")),
        ),
    )
    by_offset = Window.partitionBy("src_topic", "src_partition").orderBy("src_offset")
    before_me = by_offset.rowsBetween(Window.unboundedPreceding, -1)
    up_to_me = by_offset.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    floor = F.greatest(F.col("start"), F.max("resolved").over(before_me))
    windowed = joined.select(
        "*",
        floor.alias("floor"),
        F.greatest(F.col("start"), F.max("resolved").over(up_to_me)).alias("resolved_so_far"),
        F.lead("src_offset").over(by_offset).isNull().alias("is_last"),
    )
    is_row = F.col("kind") == "row"
    duplicate = is_row & F.col("floor").isNotNull() & (F.col("ts") <= F.col("floor"))
    emit = is_row & ~duplicate
    if plan.end_time is not None:
        emit = emit & (F.col("ts") <= _ts_lit(plan.end_time))
    bad = F.col("kind") == "bad"
    observed = windowed.withColumn("emit", emit).observe(
        observation,
        # Nested values come back to Python as JSON text (py4j would hand over Java objects).
        F.to_json(
            F.collect_list(
                F.when(
                    F.col("is_last"),
                    F.struct("src_topic", "src_partition", "src_offset", "resolved_so_far"),
                )
            )
        ).alias("partitions"),
        F.count(F.when(F.col("emit"), 1)).alias("emitted"),
        F.count(F.when(duplicate, 1)).alias("duplicates"),
        F.count(F.when(bad, 1)).alias("bad"),
        F.to_json(
            F.min(F.when(bad, F.struct("src_topic", "src_partition", "src_offset", "error")))
        ).alias("first_bad"),
    )
    records = _rows(observed.where(F.col("emit")), plan)
    if plan.dlq_topic is not None:
        records = records.unionByName(_dead_letters(observed.where(bad), plan.dlq_topic))
    return records


def _rows(rows: DataFrame, plan: BatchPlan) -> DataFrame:
    from pyspark.sql import functions as F  # noqa: PLC0415

    topic = F.lit(None).cast("string")
    for source, output in plan.routes.items():
        topic = F.when(F.col("src_topic") == source, F.lit(output)).otherwise(topic)
    ts_text = hlc_text(F.col("ts"))
    value = json_value(
        plan.envelope,
        key=F.col("key").cast("string"),
        after=F.col("after"),
        before=F.col("before"),
        updated=ts_text,
        mvcc_timestamp=ts_text,
        topic=topic,
    )
    return rows.select(
        topic.alias("topic"),
        F.col("key"),
        value.cast("binary").alias("value"),
        F.lit(None).cast("array<struct<key:string,value:binary>>").alias("headers"),
    )


def _dead_letters(bad: DataFrame, dlq_topic: str) -> DataFrame:
    from pyspark.sql import functions as F  # noqa: PLC0415

    source = F.concat_ws("/", F.col("src_topic"), F.col("src_partition").cast("string"))
    where = F.concat(source, F.lit("@"), F.col("src_offset").cast("string"))
    ours = F.array(
        F.struct(F.lit(ERROR_HEADER).alias("key"), F.col("error").cast("binary").alias("value")),
        F.struct(F.lit(SOURCE_HEADER).alias("key"), where.cast("binary").alias("value")),
    )
    none = F.array().cast("array<struct<key:string,value:binary>>")
    headers = F.concat(F.coalesce(F.col("headers"), none), ours)
    return bad.select(
        F.lit(dlq_topic).alias("topic"), F.col("key"), F.col("value"), headers.alias("headers")
    )


def read_result(observation: Observation) -> BatchResult:
    """The observed metrics of a finished batch."""
    metrics = observation.get
    seen = json.loads(metrics.get("partitions") or "[]")
    partitions = [
        PartitionSeen(
            SourcePartition(str(p["src_topic"]), int(p["src_partition"])),
            int(p["src_offset"]) + 1,
            _struct_to_hlc(p["resolved_so_far"]),
        )
        for p in seen
    ]
    first = json.loads(metrics["first_bad"]) if metrics.get("first_bad") else None
    first_bad = None
    if first is not None:
        ref = RecordRef(
            str(first["src_topic"]), int(first["src_partition"]), int(first["src_offset"])
        )
        first_bad = (ref, str(first["error"]))
    return BatchResult(
        partitions=partitions,
        emitted=int(metrics.get("emitted") or 0),
        duplicates=int(metrics.get("duplicates") or 0),
        bad=int(metrics.get("bad") or 0),
        first_bad=first_bad,
    )
