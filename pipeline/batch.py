"""One micro-batch on the executors: drop what is already resolved, encode, route.

A batch takes two passes over its source records, neither of which shuffles them:

1. :func:`scan` reads only offsets and the markers (null keys): per source partition, the
   last offset and the markers with their offsets. This is small and goes to the driver.
2. :func:`plan_records` decodes every record and keeps a row only if its time is above its
   partition's resolved time *at that point of the partition*: the frontier's time, raised by
   each marker earlier in the same batch (from pass 1, broadcast with the frontier). The rest
   are upstream duplicates or replays and are dropped. It then encodes and routes the rows.

Rows stay in the order Spark's Kafka source reads them, one task per source partition in
offset order, and every version of a key lives on one source partition, so each key's
versions reach the output topic in commit order. Undecodable records go to the dead-letter
topic (``on_error: dlq``) with the reason in headers, or are reported to the driver, which
stops the job (``fail``, ``pause``). Counts come back through a Spark ``Observation`` of the
write itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from encoders.base import EnvelopeOptions
from schemas.errors import RecordRef
from schemas.hlc import Hlc

from .frontier import SourcePartition
from .sources import hlc_struct, hlc_text
from .spark_encoding import json_value

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Observation, SparkSession

ERROR_HEADER = "highwater.error"
SOURCE_HEADER = "highwater.source"


@dataclass(frozen=True)
class BatchPlan:
    """What the driver decided before the batch: thresholds, routes, options."""

    thresholds: Mapping[SourcePartition, Hlc]  # the frontier when the batch started
    markers: Mapping[SourcePartition, list[tuple[int, Hlc]]]  # pass 1: (offset, resolved)
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

    emitted: int
    duplicates: int
    bad: int
    first_bad: tuple[RecordRef, str] | None


def _ts_lit(ts: Hlc) -> Column:
    from pyspark.sql import functions as F  # noqa: PLC0415

    return F.struct(
        F.lit(ts.wall).cast("bigint").alias("wall"),
        F.lit(ts.logical).cast("bigint").alias("logical"),
    )


def scan(raw: DataFrame) -> list[tuple[PartitionSeen, list[tuple[int, Hlc]]]]:
    """Pass 1: per source partition, where the batch ends and which markers it holds."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    resolved = hlc_struct(F.get_json_object(F.col("value").cast("string"), "$.resolved"))
    marker = F.when(F.col("key").isNull(), resolved)
    summary = (
        raw.select("topic", "partition", "offset", marker.alias("resolved"))
        .groupBy("topic", "partition")
        .agg(
            F.max("offset").alias("last"),
            F.to_json(
                F.collect_list(
                    F.when(F.col("resolved").isNotNull(), F.struct("offset", "resolved"))
                )
            ).alias("markers"),
        )
        .collect()
    )
    out = []
    for row in summary:
        markers = sorted(
            (int(m["offset"]), Hlc(int(m["resolved"]["wall"]), int(m["resolved"]["logical"])))
            for m in json.loads(row["markers"])
        )
        top = max((ts for _, ts in markers), default=None)
        sp = SourcePartition(str(row["topic"]), int(row["partition"]))
        out.append((PartitionSeen(sp, int(row["last"]) + 1, top), markers))
    return out


def _floors(spark: SparkSession, plan: BatchPlan) -> DataFrame:
    """Per source partition: the frontier's time and the in-batch markers as running maxima."""
    rows = []
    for sp, start in plan.thresholds.items():
        steps, top = [], start
        for offset, ts in plan.markers.get(sp, []):
            top = max(top, ts)
            steps.append((offset, (top.wall, top.logical)))
        rows.append((sp.topic, sp.partition, (start.wall, start.logical), steps))
    return spark.createDataFrame(
        rows,
        "f_topic string, f_partition int, start struct<wall:bigint,logical:bigint>, "
        "steps array<struct<offset:bigint,resolved:struct<wall:bigint,logical:bigint>>>",
    )


def plan_records(
    spark: SparkSession, decoded: DataFrame, plan: BatchPlan, observation: Observation
) -> DataFrame:
    """Pass 2: the records to write (``topic``, ``key``, ``value``, ``headers``), observed."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    joined = decoded.join(
        F.broadcast(_floors(spark, plan)),
        (F.col("src_topic") == F.col("f_topic")) & (F.col("src_partition") == F.col("f_partition")),
        "left",
    )
    # The highest marker before this record in its partition, or the frontier's time.
    floor = F.aggregate(
        F.coalesce(
            F.col("steps"),
            F.array().cast(
                "array<struct<offset:bigint,resolved:struct<wall:bigint,logical:bigint>>>"
            ),
        ),
        F.col("start"),
        lambda acc, step: F.when(step["offset"] < F.col("src_offset"), step["resolved"]).otherwise(
            acc
        ),
    )
    is_row = F.col("kind") == "row"
    duplicate = is_row & F.col("floor").isNotNull() & (F.col("ts") <= F.col("floor"))
    emit = is_row & ~duplicate
    if plan.end_time is not None:
        emit = emit & (F.col("ts") <= _ts_lit(plan.end_time))
    bad = F.col("kind") == "bad"
    observed = (
        joined.withColumn("floor", floor)
        .withColumn("emit", emit)
        .observe(
            observation,
            F.count(F.when(F.col("emit"), 1)).alias("emitted"),
            F.count(F.when(duplicate, 1)).alias("duplicates"),
            F.count(F.when(bad, 1)).alias("bad"),
            # A struct would come back to Python as a Java object; JSON text travels well.
            F.to_json(
                F.min(F.when(bad, F.struct("src_topic", "src_partition", "src_offset", "error")))
            ).alias("first_bad"),
        )
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
    """The observed counts of a finished write."""
    metrics = observation.get
    first = json.loads(metrics["first_bad"]) if metrics.get("first_bad") else None
    first_bad = None
    if first is not None:
        ref = RecordRef(
            str(first["src_topic"]), int(first["src_partition"]), int(first["src_offset"])
        )
        first_bad = (ref, str(first["error"]))
    return BatchResult(
        emitted=int(metrics.get("emitted") or 0),
        duplicates=int(metrics.get("duplicates") or 0),
        bad=int(metrics.get("bad") or 0),
        first_bad=first_bad,
    )
