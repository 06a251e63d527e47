"""The JVM walk against the Python loop on a local SparkSession: one comparison for every format.

A batch's records go through the Python loop alone, and through the walk with its rests
(the records from the first it does not take, per partition) through the Python loop after
it, as ``stream.write_batch`` does; the two must write the same records, per source
partition in the same order, with the same summaries.
"""

import io
import operator
from collections.abc import Callable
from functools import reduce
from typing import Any

from fastavro import parse_schema, schemaless_reader
from pyspark.sql import Observation
from pyspark.sql import functions as F

from encoders.avro import AvroEncoder, Framing
from pipeline.config import EncoderConfig
from pipeline.core.batch.contract import BatchPlan, BatchResult, read_result
from pipeline.core.batch.loop import kafka_records
from pipeline.core.batch.walk import Walked, rest_plan, walk_plan
from schemas.avro import OutputSchemas
from schemas.tables import TableSchema
from tests.support.json_text import exact

SCHEMA = (
    "key binary, value binary, topic string, partition int, offset bigint, "
    "headers array<struct<key: string, value: binary>>"
)


# Avro output in the parity tests of the sources the walk reads: every envelope member or a
# few, key only (each with Confluent's framing and a single object's)
AVRO_OPTIONS = [
    EncoderConfig(format="avro", updated=True, diff=True, mvcc_timestamp=True, key_in_value=True),
    EncoderConfig(format="avro", topic_in_value=True),
    EncoderConfig(format="avro", envelope="key_only"),
]


def avro_encoder(table: TableSchema, options: EncoderConfig, *, confluent: bool) -> AvroEncoder:
    """``table``'s Avro encoder: Confluent's framing (schema ids 1, 2, 3) or a single object's."""
    schemas = OutputSchemas.of(table, options)
    framing = Framing.confluent(1, 2, 3) if confluent else Framing.single_object(schemas)
    return AvroEncoder(schemas, framing, options, table.name)


def keyed(options: EncoderConfig, column: str, headers: str | None = None) -> EncoderConfig:
    """``options`` with the records keyed by ``column`` (and their headers from ``headers``)."""
    given = options.model_dump(exclude_unset=True)
    return EncoderConfig(
        **given, key_column=column, unordered=True, headers_json_column_name=headers
    )


def avro_key_partition(
    table: TableSchema, field: str, per: int = 1, options: EncoderConfig = AVRO_OPTIONS[1]
) -> Callable[[bytes], int]:
    """The source partition an Avro key of ``table`` names (its ``field`` // ``per``)."""
    key = parse_schema(OutputSchemas.of(table, options).key)

    def partition(data: bytes) -> int:
        header = 5 if data[0] == 0 else 10  # Confluent's framing, or a single object's
        return int(schemaless_reader(io.BytesIO(data[header:]), key, None)[field]) // per

    return partition


def frame(spark: Any, records: list[tuple[Any, ...]], partitions: int) -> Any:
    """The records as Spark's Kafka source gives them: a task per partition, in offset order."""
    return (
        spark.createDataFrame(records, SCHEMA)
        .repartition(partitions, "partition")
        .sortWithinPartitions("offset")
    )


def python_loop(batch: Any, the_plan: BatchPlan) -> tuple[list[Any], BatchResult]:
    observation = Observation("python")
    rows = kafka_records(batch, the_plan, observation).collect()
    return rows, read_result(observation)


def walk_then_rests(batch: Any, the_plan: BatchPlan) -> tuple[list[Any], BatchResult]:
    """As ``writer.WalkWriter`` does it: the walk, then its rests through the Python loop.

    The rests are cut from the same frame, all in one job (the changefeed reads them from
    Kafka again).
    """
    walk = walk_plan(the_plan)
    assert walk is not None
    records, walked = Walked.rows(batch, walk, 0)
    rows = records.collect()
    result, rests = walked.result()
    summaries = list(result.partitions)
    if rests:
        cut = [
            (F.col("partition") == rest.partition.partition)
            & (F.col("offset") >= rest.start)
            & (F.col("offset") < rest.stop)
            for rest in rests
        ]
        more, more_result = python_loop(
            batch.where(reduce(operator.or_, cut)), rest_plan(the_plan, rests)
        )
        rows += more
        summaries += more_result.partitions
    return rows, BatchResult.of(summaries)


def json_key_partition(key: bytes) -> int:
    """The source partition a JSON key names (its first element)."""
    return int(exact(key)[0][1])


def by_partition(
    rows: list[Any], partition_of: Callable[[bytes], int] = json_key_partition
) -> dict[int, list[tuple[Any, ...]]]:
    """The output in order per source partition: data rows by their key, dead letters by header."""
    out: dict[int, list[tuple[Any, ...]]] = {}
    for r in rows:
        headers = [(h["key"], bytes(h["value"])) for h in r["headers"] or []]
        if r["topic"] == "dlq":
            source = dict(headers)["highwater.source"].decode()
            p = int(source.split("/")[1].split("@")[0])
        else:
            p = partition_of(bytes(r["key"]))
        value = None if r["value"] is None else bytes(r["value"])
        out.setdefault(p, []).append((r["topic"], bytes(r["key"] or b""), value, headers))
    return out


def summaries(result: BatchResult) -> list[tuple[Any, ...]]:
    """What each partition's summary says: where it ended, counts, markers, Debezium's places."""
    return [
        (
            p.partition.partition,
            p.next_offset,
            p.resolved,
            p.emitted,
            p.duplicates,
            p.bad,
            p.first_bad,
            p.position,
            p.resent,
            {t: (sorted(places), low, high) for t, (places, low, high) in p.transactions.items()},
        )
        for p in result.partitions
    ]


def same_as_the_python_loop(
    batch: Any, the_plan: BatchPlan, partition_of: Callable[[bytes], int] = json_key_partition
) -> tuple[list[Any], BatchResult]:
    """Assert the walk and its rests write what the Python loop writes; their rows, summaries."""
    expected_rows, expected = python_loop(batch, the_plan)
    rows, result = walk_then_rests(batch, the_plan)
    assert by_partition(rows, partition_of) == by_partition(expected_rows, partition_of)
    assert summaries(result) == summaries(expected)
    return rows, result


def counted_walks(monkeypatch: Any) -> list[int]:
    """The ids of the batches the JVM walk writes from now on (``Walked.write`` counted)."""
    from pipeline.core.batch.walk import Walked  # noqa: PLC0415

    walks: list[int] = []
    write = Walked.write

    def counted(*args: Any, **kwargs: Any) -> Walked:
        walks.append(args[2])  # the batch id
        return write(*args, **kwargs)

    monkeypatch.setattr(Walked, "write", counted)
    return walks


def walked_rests(monkeypatch: Any) -> list[Any]:
    """The rests the JVM walk leaves to the Python loop from now on (``Walked.result`` seen)."""
    from pipeline.core.batch.walk import Walked  # noqa: PLC0415

    rests: list[Any] = []
    result = Walked.result

    def seen(self: Walked) -> Any:
        merged, left = result(self)
        rests.extend(left)
        return merged, left

    monkeypatch.setattr(Walked, "result", seen)
    return rests
