"""The initial scan's fast walk: a chunk of a native source read and written in the JVM.

A chunk (``scan.py``) is one source partition's range, sorted so that each key's versions come
together; the Python scan hands every version to Python and back. When the chunk's table is a
native source written by the JSON encoder's envelope of images and times
(``Encoder.scan_walk``), with nothing per row the JVM does not do (no CDC query, no columns'
defaults, no rate limit, not a table emitted again at a schema change), the JVM walks it
instead (``pipeline/jvm/walk``, ``Scan.java``): the same rows, byte for byte, sent straight to
the sink; the Python scan is held to the same output by ``tests/spark/test_scan_walk_on_spark.py``.

One code path still decides everything else. At the first key with a record the JVM does not
take (valid or not) it stops; the rest of the chunk from that key on, in the sort's order, goes
through the Python scan after the JVM's rows were acknowledged (:func:`rest`), so bad records go
where ``on_error`` says. Under exactly once a chunk is one transaction: one the JVM stopped in is
abandoned and the Python scan takes the chunk whole.
"""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..batch import (
    BatchResult,
    KafkaTransactions,
    PartitionSeen,
    RowSink,
    ScanWalkPlan,
    Summaries,
    read_result,
    scan_rows,
)
from .scan import ScanPlan, chunk_records

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from schemas.hlc import Hlc


def scan_walk_plan(plan: ScanPlan) -> str | None:
    """The JVM's plan (JSON) for ``plan``'s chunk, or None: the Python scan walks it."""
    walk = planned_scan_walk(plan)
    return None if walk is None else walk.to_json()


def planned_scan_walk(plan: ScanPlan) -> ScanWalkPlan | None:
    """The JVM's plan (:class:`~..batch.ScanWalkPlan`) for ``plan``'s chunk, or None."""
    batch, chunk, span = plan.batch, plan.chunk, plan.span
    assert chunk is not None  # noqa: S101 - InitialScan names it
    assert span is not None  # noqa: S101
    topic = chunk.topic
    envelope = batch.encoders[topic].scan_walk
    if (
        envelope is None
        or batch.formats[topic] != "native"
        or batch.shapes
        or (plan.defaults or {}).get(topic)
        or plan.again
        or plan.rate is not None
        or batch.skip is not None
    ):
        return None
    return ScanWalkPlan(
        source=topic,
        partition=chunk.partition,
        span=span,
        topic=batch.routes[topic],
        members=envelope["members"],
        statement_time=plan.statement_time,
        end_time=batch.end_time,
        changes=plan.changes,
        room=batch.room,
    )


def sorted_chunk(frame: DataFrame) -> DataFrame:
    """A chunk's records as the JVM walks them: key, value, offset, the key's hash; grouped.

    The order is the Python scan's (``scan.chunk_records``): the key's 64-bit hash, the key,
    the offset.
    """
    from pyspark.sql import functions as F  # noqa: PLC0415 - Spark stays out of the import path

    return frame.select(
        "key", "value", "offset", F.xxhash64("key").alias("hash")
    ).sortWithinPartitions("hash", "key", "offset")


@dataclass(frozen=True)
class Rest:
    """Where the JVM stopped: from the key ``key`` (None: the markers) of hash ``hash`` on.

    ``hash`` None: the whole chunk (exactly once abandoned the JVM's transaction).
    """

    hash: int | None
    key: bytes | None

    def of(self, frame: DataFrame) -> DataFrame:
        """``frame``'s records from here on, in the sort's order (Spark's: nulls first)."""
        if self.hash is None:
            return frame
        from pyspark.sql import functions as F  # noqa: PLC0415

        hashed = F.xxhash64("key")
        from_here: Column = hashed == F.lit(self.hash)
        if self.key is not None:
            from_here = from_here & (F.col("key") >= F.lit(self.key))
        return frame.where((hashed > F.lit(self.hash)) | from_here)


@dataclass(frozen=True)
class ScanWalked:
    """A chunk's walk in the JVM: its summary and where it stopped, once its rows are written."""

    reports: Summaries
    transactions: KafkaTransactions = field(default_factory=KafkaTransactions)

    @classmethod
    def write(
        cls, frame: DataFrame, walk: str, name: str, sink: RowSink, scan_time: Hlc
    ) -> ScanWalked:
        """Walk the chunk ``frame`` (Spark's Kafka rows) and send its rows to ``sink``.

        ``scan_time``: the scan's snapshot time (exactly once, the chunk's progress is the scan's).
        """
        reports = Summaries.new(frame.sparkSession, name)
        return cls(reports, sink.scan(sorted_chunk(frame), walk, reports, scan_time))

    @classmethod
    def rows(cls, frame: DataFrame, walk: str, name: str) -> tuple[DataFrame, ScanWalked]:
        """The same walk, its rows as rows (topic, key, value, headers) instead of sent."""
        reports = Summaries.new(frame.sparkSession, name)
        return scan_rows(sorted_chunk(frame), walk, reports), cls(reports)

    def result(self) -> tuple[BatchResult, Rest | None]:
        """The chunk's summary (none if the JVM read nothing) and its rest, if any."""
        summaries, rest = [], None
        for text in self.reports.texts():
            report = json.loads(text)
            if report["summary"] is not None:
                summaries.append(PartitionSeen.from_json(json.dumps(report["summary"])))
            if report["rest"] is not None:
                key = report["rest"]["key"]
                rest = Rest(report["rest"]["hash"], None if key is None else base64.b64decode(key))
        return BatchResult.of(summaries), rest


def write_chunk(frame: DataFrame, walk: str, plan: ScanPlan, sink: RowSink) -> BatchResult:
    """The chunk ``frame`` walked in the JVM and written, its rest (if any) by the Python scan.

    Returns once every row is acknowledged.
    """
    from pyspark.sql import Observation  # noqa: PLC0415 - Spark stays out of the import path

    name = f"scan-{plan.chunk}-{uuid.uuid4().hex[:8]}"
    walked = ScanWalked.write(frame, walk, name, sink, plan.statement_time)
    result, rest = walked.result()
    if rest is None:
        return result.counted(walked.transactions)
    observation = Observation(f"{name}-rest")
    records = chunk_records(rest.of(frame), plan, observation)
    transactions = sink.write(records, scan_time=plan.statement_time)
    merged = BatchResult.of([*result.partitions, *read_result(observation).partitions])
    return merged.counted(walked.transactions + transactions)
