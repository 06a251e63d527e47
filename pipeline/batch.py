"""One micro-batch on the executors: decode, drop what is already resolved, encode, route.

Spark's Kafka source gives every source partition's offset range of a batch to one task, in
offset order. Each task runs :func:`process` over its records as Arrow batches
(``mapInArrow``), in one pass:

* the source adapter decodes the record (``pipeline/sources.py``);
* a marker raises the partition's *floor*, which starts at the frontier's resolved time for
  the partition (shipped in the :class:`BatchPlan`);
* a row at or below the floor is an upstream duplicate or a replay and is dropped; any other
  row is encoded by the encoder (``encoders/``) and routed to its output topic;
* an undecodable record goes to the dead-letter topic with the reason in headers
  (``on_error: dlq``), or is only reported, and the driver stops the job (``fail``, ``pause``).

At the end each task adds one *summary* per source partition (where the batch ended, the
highest marker, counts, the first bad record). Summaries travel to the driver through a Spark
``Observation`` of the write itself and are filtered out before the Kafka writer, so a batch
is read once and written once, with no shuffle: every version of a key lives on one source
partition, so each key's versions reach the output topic in commit order.

The per-record loop is plain Python over Arrow columns; it is the changefeed's hot path,
measured against the plain Spark copy in ``docs/benchmarks.md``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from encoders.base import ChangeRow, Context, EnvelopeOptions
from encoders.json import JsonEncoder
from schemas.errors import RecordRef
from schemas.hlc import ZERO, Hlc

from .frontier import SourcePartition
from .sources import BadRecord, Marker, adapter

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, Observation

ERROR_HEADER = "highwater.error"
SOURCE_HEADER = "highwater.source"

# What process() yields: Kafka records (topic, key, value, headers) or, with a null topic,
# one summary per source partition (JSON text).
OUTPUT_SCHEMA = (
    "topic string, key binary, value binary, "
    "headers array<struct<key: string, value: binary>>, summary string"
)


@dataclass(frozen=True)
class BatchPlan:
    """What the driver decided before the batch; pickled to every task."""

    thresholds: Mapping[tuple[str, int], Hlc]  # (topic, partition) -> frontier's resolved
    tables: Mapping[str, str]  # source topic -> table
    formats: Mapping[str, str]  # source topic -> source format
    routes: Mapping[str, str]  # source topic -> output topic
    envelope: EnvelopeOptions
    dlq_topic: str | None  # None: bad records are reported, not written
    end_time: Hlc | None = None


@dataclass
class PartitionSeen:
    """What one source partition contributed to a batch (its summary)."""

    partition: SourcePartition
    next_offset: int
    resolved: Hlc | None  # the highest marker in the batch
    emitted: int = 0
    duplicates: int = 0
    bad: int = 0
    first_bad: tuple[int, str] | None = None  # (offset, reason)

    def to_json(self) -> str:
        """The summary row's text."""
        return json.dumps(
            {
                "topic": self.partition.topic,
                "partition": self.partition.partition,
                "next_offset": self.next_offset,
                "resolved": None if self.resolved is None else str(self.resolved),
                "emitted": self.emitted,
                "duplicates": self.duplicates,
                "bad": self.bad,
                "first_bad": self.first_bad,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> PartitionSeen:
        """Read a summary row."""
        data = json.loads(text)
        first_bad = data["first_bad"]
        return cls(
            SourcePartition(data["topic"], int(data["partition"])),
            int(data["next_offset"]),
            None if data["resolved"] is None else Hlc.parse(data["resolved"]),
            int(data["emitted"]),
            int(data["duplicates"]),
            int(data["bad"]),
            None if first_bad is None else (int(first_bad[0]), str(first_bad[1])),
        )

    def merge(self, other: PartitionSeen) -> PartitionSeen:
        """Two summaries of the same partition (should Spark ever split its range)."""
        tops = [ts for ts in (self.resolved, other.resolved) if ts is not None]
        bads = [b for b in (self.first_bad, other.first_bad) if b is not None]
        return PartitionSeen(
            self.partition,
            max(self.next_offset, other.next_offset),
            max(tops) if tops else None,
            self.emitted + other.emitted,
            self.duplicates + other.duplicates,
            self.bad + other.bad,
            min(bads) if bads else None,
        )


@dataclass(frozen=True)
class BatchResult:
    """What the driver learns after the write: every partition's summary, and totals."""

    partitions: list[PartitionSeen]
    emitted: int = 0
    duplicates: int = 0
    bad: int = 0
    first_bad: tuple[RecordRef, str] | None = None

    @classmethod
    def of(cls, summaries: list[PartitionSeen]) -> BatchResult:
        """Merge the tasks' summaries."""
        merged: dict[SourcePartition, PartitionSeen] = {}
        for seen in summaries:
            old = merged.get(seen.partition)
            merged[seen.partition] = seen if old is None else old.merge(seen)
        bads = sorted(
            (RecordRef(s.partition.topic, s.partition.partition, s.first_bad[0]), s.first_bad[1])
            for s in merged.values()
            if s.first_bad is not None
        )
        return cls(
            sorted(merged.values(), key=lambda s: s.partition),
            emitted=sum(s.emitted for s in merged.values()),
            duplicates=sum(s.duplicates for s in merged.values()),
            bad=sum(s.bad for s in merged.values()),
            first_bad=bads[0] if bads else None,
        )


@dataclass
class _Out:
    """Columns of the Arrow batch being built."""

    topic: list[str | None] = field(default_factory=list)
    key: list[bytes | None] = field(default_factory=list)
    value: list[bytes | None] = field(default_factory=list)
    headers: list[list[dict[str, Any]] | None] = field(default_factory=list)
    summary: list[str | None] = field(default_factory=list)

    def add(
        self,
        topic: str | None,
        key: bytes | None,
        value: bytes | None,
        headers: list[dict[str, Any]] | None = None,
        summary: str | None = None,
    ) -> None:
        self.topic.append(topic)
        self.key.append(key)
        self.value.append(value)
        self.headers.append(headers)
        self.summary.append(summary)

    def arrow(self) -> pa.RecordBatch:
        import pyarrow as pa  # noqa: PLC0415

        header = pa.struct([("key", pa.string()), ("value", pa.binary())])
        return pa.RecordBatch.from_arrays(
            [
                pa.array(self.topic, pa.string()),
                pa.array(self.key, pa.binary()),
                pa.array(self.value, pa.binary()),
                pa.array(self.headers, pa.list_(header)),
                pa.array(self.summary, pa.string()),
            ],
            names=["topic", "key", "value", "headers", "summary"],
        )


def process(plan: BatchPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The task body (``mapInArrow``).

    In: source records (``key, value, topic, partition, offset``; ``headers`` for the
    dead-letter topic; ``error`` from a CDC query). Out: Kafka records, then one summary per
    source partition.
    """
    return _Task(plan).run(batches)


class _Task:
    def __init__(self, plan: BatchPlan) -> None:
        self.plan = plan
        self.encoder = JsonEncoder(plan.envelope)
        self.decoders = {topic: adapter(fmt).decode for topic, fmt in plan.formats.items()}
        self.contexts = {topic: Context(output) for topic, output in plan.routes.items()}
        self.seen: dict[tuple[str, int], PartitionSeen] = {}
        self.floors: dict[tuple[str, int], Hlc] = {}

    def run(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            out = _Out()
            columns = batch.to_pydict()
            keys = columns["key"]
            for record in zip(
                keys,
                columns["value"],
                columns["topic"],
                columns["partition"],
                columns["offset"],
                columns.get("headers") or [None] * len(keys),
                columns.get("error") or [None] * len(keys),
                strict=True,
            ):
                self.record(out, *record)
            if out.topic:
                yield out.arrow()
        if self.seen:
            out = _Out()
            for state in self.seen.values():
                out.add(None, None, None, None, state.to_json())
            yield out.arrow()

    def record(  # noqa: PLR0917 - one source record, as its columns
        self,
        out: _Out,
        key: bytes | None,
        value: bytes | None,
        topic: str,
        partition: int,
        offset: int,
        headers: list[dict[str, Any]] | None,
        error: str | None,
    ) -> None:
        sp = (topic, partition)
        state = self.seen.get(sp)
        if state is None:
            state = self.seen[sp] = PartitionSeen(SourcePartition(topic, partition), offset, None)
            self.floors[sp] = self.plan.thresholds.get(sp, ZERO)
        state.next_offset = offset + 1
        try:
            item = self.decoders[topic](key, value)
            if error is not None:
                raise BadRecord(error)
        except BadRecord as exc:
            state.bad += 1
            if state.first_bad is None:
                state.first_bad = (offset, str(exc))
            if self.plan.dlq_topic is not None:
                where = f"{topic}/{partition}@{offset}".encode()
                ours = [
                    {"key": ERROR_HEADER, "value": str(exc).encode()},
                    {"key": SOURCE_HEADER, "value": where},
                ]
                out.add(self.plan.dlq_topic, key, value, [*(headers or []), *ours])
            return
        if isinstance(item, Marker):
            self.floors[sp] = max(self.floors[sp], item.resolved)
            state.resolved = max(state.resolved or ZERO, item.resolved)
            return
        ts = item.ts
        if ts <= self.floors[sp]:
            state.duplicates += 1
            return
        end_time = self.plan.end_time
        if end_time is not None and ts > end_time:
            return
        row = ChangeRow(self.plan.tables[topic], item.key, item.after, item.before, ts, ts)
        ctx = self.contexts[topic]
        out.add(ctx.topic, self.encoder.key(row, ctx), self.encoder.value(row, ctx))
        state.emitted += 1


def kafka_records(batch: DataFrame, plan: BatchPlan, observation: Observation) -> DataFrame:
    """The batch's Kafka records (``topic, key, value, headers``); summaries are observed."""
    from pyspark.sql import functions as F  # noqa: PLC0415

    columns = ["key", "value", "topic", "partition", "offset"]
    if plan.dlq_topic is not None:
        columns.append("headers")
    if "error" in batch.columns:  # a CDC query found values that do not fit their table
        columns.append("error")
    processed = batch.select(*columns).mapInArrow(partial(process, plan), OUTPUT_SCHEMA)
    # As JSON text: an array would come back to Python as a Java object.
    summaries = F.to_json(F.collect_list("summary")).alias("summaries")
    observed = processed.observe(observation, summaries)
    return observed.where(F.col("summary").isNull()).select("topic", "key", "value", "headers")


def read_result(observation: Observation) -> BatchResult:
    """The summaries of a finished write, merged."""
    summaries = json.loads(observation.get.get("summaries") or "[]")
    return BatchResult.of([PartitionSeen.from_json(text) for text in summaries])
