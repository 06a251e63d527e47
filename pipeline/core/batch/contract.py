"""The driver↔executor contract of a micro-batch: the plan shipped, the summaries sent back.

The driver decides a batch's :class:`BatchPlan` (each source partition's floor, the routes and
encoders, the dead-letter topic, what is known of Debezium's positions and commit times) and
pickles it to every task; each task sends back, per source partition, what it saw of it
(:class:`PartitionSeen`, a ``summary.Summary`` on the wire, the JVM walk's alike), which the
driver merges into one :class:`BatchResult` (:func:`read_result`) and moves the frontier by. A
partition's batch left unfinished comes back as its rest (:class:`Deferred`), run again once
the driver has what it waits for (:class:`Settled`); a batch given up is
:class:`BatchAbandoned`. The Python loop that keeps the executors' side is ``loop.py``; the
JVM walk's is ``walk.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NamedTuple

from encoders.base import Encoder
from pipeline.config import ChangefeedConfig
from schemas.errors import RecordRef, SchemaChangeError, SourceDecodeError
from schemas.hlc import ZERO, Hlc

from ..ledger import Frontier, SourcePartition
from ..sources import LogPosition
from .queries import RowShape
from .summary import Summary

if TYPE_CHECKING:
    from pyspark.sql import Observation

    from .jvm import KafkaTransactions

DEFAULT_MAX_REQUEST = 1_048_576  # Kafka producers' max.request.size
# what Kafka adds to a record's key and value (batch header, varints), with room to spare
RECORD_FRAMING = 512
HEADER_FRAMING = 10  # a header's varints (its name's and value's lengths), at most


def header_bytes(headers: Iterable[tuple[str, bytes]]) -> int:
    """What ``headers`` (name, value) add to a record, as Kafka counts it towards its size."""
    return sum(len(name.encode()) + len(value) + HEADER_FRAMING for name, value in headers)


@dataclass(frozen=True)
class BatchPlan:
    """What the driver decided before the batch; pickled to every task."""

    thresholds: Mapping[tuple[str, int], Hlc]  # (topic, partition) -> frontier's resolved
    tables: Mapping[str, str]  # source topic -> table
    formats: Mapping[str, str]  # source topic -> source format
    routes: Mapping[str, str]  # source topic -> output topic
    encoders: Mapping[str, Encoder]  # source topic -> its output topic's encoder
    dlq_topic: str | None  # None: bad records are reported, not written
    end_time: Hlc | None = None
    max_record_bytes: int = DEFAULT_MAX_REQUEST  # the sink producer's max.request.size
    new_partition_floor: Hlc = ZERO  # for a source partition the frontier does not know yet
    shapes: Mapping[str, RowShape] = field(default_factory=dict)  # source topic -> its CDC query's
    # source topic -> its schema registry's client configuration (Debezium's Avro)
    registries: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # resume --skip-bad-record: this bad record goes to the dead-letter topic, whatever on_error
    skip: RecordRef | None = None
    skip_topic: str | None = None
    # (topic, partition) -> the highest source position read there (Debezium: re-sends)
    positions: Mapping[tuple[str, int], LogPosition] = field(default_factory=dict)
    # source topic -> {transaction: its END's time} (Debezium: binlog changes' commit times)
    commits: Mapping[str, Mapping[str, Hlc]] = field(default_factory=dict)
    # delivery: exactly_once (stream batches): each partition's stretch between a begin row
    # and its summary row, which the sink writes in one transaction with its progress
    exactly_once: bool = False
    # source topics whose transactions the driver completes (a transaction topic read): only
    # their changes' places are kept in the summaries (many, one or more per change)
    counted: frozenset[str] = frozenset()
    # oversized_rows: dlq: where a row too large for Kafka goes, whatever on_error says
    oversized_topic: str | None = None
    # oversized_rows: claim_check: the store such a row is written to, under this folder
    claim_store: str | None = None
    claim_folder: str = ""
    # headers_json_column_name: the column whose JSON object is each record's headers
    headers_column: str | None = None
    # the bytes sink.extra_headers add to every record (the producers' interceptor adds them)
    header_room: int = 0
    # envelope: enriched: each source topic's declared primary-key columns (its key's names
    # where the source's records do not name them)
    key_names: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def room(self) -> int:
        """The largest key and value an output record may have.

        The rest is Kafka's framing, and the fixed headers every record carries
        (``extra_headers``).
        """
        return self.max_record_bytes - RECORD_FRAMING - self.header_room

    @classmethod
    def at(
        cls,
        config: ChangefeedConfig,
        encoders: Mapping[str, Encoder],
        frontier: Frontier,
        *,
        skip: RecordRef | None,
        commits: Mapping[str, Mapping[str, Hlc]] | None,
    ) -> BatchPlan:
        """The plan of a stream batch read from where ``frontier`` stands."""
        floors = {(sp.topic, sp.partition): p.resolved for sp, p in frontier.progress().items()}
        high_water, positions = frontier.high_water(), frontier.positions()
        plan = cls.of(
            config, encoders, floors, high_water, skip=skip, positions=positions, commits=commits
        )
        return replace(plan, exactly_once=config.delivery == "exactly_once")

    @classmethod
    def of(
        cls,
        config: ChangefeedConfig,
        encoders: Mapping[str, Encoder],
        thresholds: Mapping[tuple[str, int], Hlc],
        new_partition_floor: Hlc = ZERO,
        *,
        skip: RecordRef | None = None,
        positions: Mapping[tuple[str, int], LogPosition] | None = None,
        commits: Mapping[str, Mapping[str, Hlc]] | None = None,
    ) -> BatchPlan:
        """The plan of a changefeed's batch, each partition's floor at ``thresholds``.

        A partition added to a source topic since the frontier was made enters at
        ``new_partition_floor`` (the high-water mark), as it would after a restart. ``skip``:
        a bad record an operator chose to divert to the dead-letter topic.
        """
        query = config.query
        return cls(
            shapes={}
            if query is None
            else {config.sources[0].topic: RowShape.of(query[1], config.encoder)},
            thresholds=thresholds,
            new_partition_floor=new_partition_floor,
            tables=config.tables,
            formats=config.formats,
            registries=config.registries,
            routes=config.routes,
            encoders=encoders,
            dlq_topic=config.effective_dlq_topic if config.on_error == "dlq" else None,
            end_time=config.end_time,
            max_record_bytes=int(
                config.sink.producer_settings.get("max.request.size", DEFAULT_MAX_REQUEST)
            ),
            skip=skip,
            skip_topic=config.effective_dlq_topic,
            positions=positions or {},
            commits=commits or {},
            counted=frozenset(s.topic for s in config.sources if s.transactions is not None),
            oversized_topic=config.effective_dlq_topic if config.oversized_rows == "dlq" else None,
            claim_store=config.claim_store,
            claim_folder=config.changefeed_id,
            headers_column=config.encoder.headers_json_column_name,
            header_room=header_bytes(
                (k, v.encode()) for k, v in (config.sink.extra_headers or {}).items()
            ),
            key_names={
                s.topic: tuple(s.primary_key) for s in config.sources if s.primary_key is not None
            },
        )


class BatchAbandoned(Exception):
    """A batch given up before it was done (a stop while it waited): not checkpointed."""


@dataclass(frozen=True)
class Deferred:
    """The rest of a source partition's batch, from the first record a walk did not take.

    Left by the JVM walk (a record it does not take) or by the Python loop: a binlog change
    whose transaction's END was not read yet (``waits_for``), or a row of a shape its output
    schema cannot hold (``new_shape``); run again through the loop once the driver has what
    it waits for (the END's time, an evolved schema).
    """

    partition: SourcePartition
    start: int
    stop: int  # just past the batch's last offset
    floor: Hlc  # the partition's floor at ``start``
    position: LogPosition | None = None  # the highest source position read before ``start``
    waits_for: str | None = None  # the transaction whose END it waits for
    # it starts at a schema change (``PartitionSeen.schema_change``): its row's commit time
    new_shape: str | None = None


class Settled(NamedTuple):
    """What the driver made of a batch's rests: the plan, the rests run now, and those later.

    A rest waits for another round, after those run now, when it is a schema change behind
    another table's being emitted again (``backfill``).
    """

    plan: BatchPlan
    run: list[Deferred]
    later: tuple[Deferred, ...] = ()


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
    bytes: int = 0  # the emitted rows' keys and values
    # Debezium: per transaction id, [its places read, lowest time, highest time]
    transactions: dict[str, list[Any]] = field(default_factory=dict)
    position: LogPosition | None = None  # the highest source position read (Debezium)
    resent: int = 0  # changes dropped as re-sends (at or below a position already read)
    # [from offset, to offset, floor, transaction]: the rest left for a transaction's END
    deferred: list[Any] | None = None
    schema_change: list[Any] | None = None  # [offset, reason, commit time]: stopped there
    reread: int | None = None  # the offset of the last snapshot read (Debezium's ``op: r``)
    # whether its transactions' places are kept (BatchPlan.counted); not part of the summary
    counting: bool = field(default=True, compare=False, repr=False)

    def saw(self, tx: tuple[str, int], ts: Hlc | None) -> None:
        """A change of transaction ``tx`` (id, place) at ``ts`` (None: not known) was read.

        Kept only where ``counting``: the driver completes the partition's transactions.
        """
        if not self.counting:
            return
        entry = self.transactions.get(tx[0])
        if entry is None:
            self.transactions[tx[0]] = [[tx[1]], ts, ts]
            return
        entry[0].append(tx[1])
        entry[1], entry[2] = _low(entry[1], ts), _high(entry[2], ts)

    def rest(self) -> Deferred | None:
        """The rest of the batch this partition left for an END or a schema, if any."""
        if self.deferred is None:
            return None
        start, stop, floor, tx_id = self.deferred
        change = self.schema_change
        shape = None if change is None or change[0] != start else str(change[2])
        return Deferred(self.partition, start, stop, Hlc.parse(floor), self.position, tx_id, shape)

    def to_json(self) -> str:
        """The summary row's text (``summary.Summary``)."""
        return Summary(
            transactions={
                t: (orders, _text(low), _text(high))
                for t, (orders, low, high) in self.transactions.items()
            },
            topic=self.partition.topic,
            partition=self.partition.partition,
            next_offset=self.next_offset,
            resolved=None if self.resolved is None else str(self.resolved),
            emitted=self.emitted,
            duplicates=self.duplicates,
            bad=self.bad,
            first_bad=self.first_bad,
            bytes=self.bytes,
            position=None if self.position is None else list(self.position),
            resent=self.resent,
            deferred=None if self.deferred is None else tuple(self.deferred),
            schema_change=None if self.schema_change is None else tuple(self.schema_change),
            reread=self.reread,
        ).model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> PartitionSeen:
        """Read a summary row (either producer's: ``summary.Summary``)."""
        s = Summary.parse(text)
        return cls(
            SourcePartition(s.topic, s.partition),
            s.next_offset,
            None if s.resolved is None else Hlc.parse(s.resolved),
            s.emitted,
            s.duplicates,
            s.bad,
            s.first_bad,
            s.bytes,
            {
                t: [orders, _parsed(low), _parsed(high)]
                for t, (orders, low, high) in s.transactions.items()
            },
            None if s.position is None else tuple(s.position),
            s.resent,
            None if s.deferred is None else list(s.deferred),
            None if s.schema_change is None else list(s.schema_change),
            s.reread,
        )

    def merge(self, other: PartitionSeen) -> PartitionSeen:
        """Two summaries of the same partition (should Spark ever split its range)."""
        tops = [ts for ts in (self.resolved, other.resolved) if ts is not None]
        bads = [b for b in (self.first_bad, other.first_bad) if b is not None]
        positions = [p for p in (self.position, other.position) if p is not None]
        rereads = [o for o in (self.reread, other.reread) if o is not None]
        return PartitionSeen(
            self.partition,
            max(self.next_offset, other.next_offset),
            max(tops) if tops else None,
            self.emitted + other.emitted,
            self.duplicates + other.duplicates,
            self.bad + other.bad,
            min(bads) if bads else None,
            self.bytes + other.bytes,
            _merged(self.transactions, other.transactions),
            max(positions) if positions else None,
            self.resent + other.resent,
            self.deferred or other.deferred,
            _first(self.schema_change, other.schema_change),
            max(rereads) if rereads else None,
        )


def _merged(one: dict[str, list[Any]], two: dict[str, list[Any]]) -> dict[str, list[Any]]:
    out = {t: list(entry) for t, entry in one.items()}
    for t, (orders, low, high) in two.items():
        if t in out:
            mine = out[t]
            out[t] = [mine[0] + orders, _low(mine[1], low), _high(mine[2], high)]
        else:
            out[t] = [orders, low, high]
    return out


def _first(one: list[Any] | None, two: list[Any] | None) -> list[Any] | None:
    """The schema change at the lower offset, of two summaries'."""
    return two if one is None else one if two is None else min(one, two)


def _low(one: Hlc | None, two: Hlc | None) -> Hlc | None:
    return two if one is None else one if two is None else min(one, two)


def _high(one: Hlc | None, two: Hlc | None) -> Hlc | None:
    return two if one is None else one if two is None else max(one, two)


def _text(ts: Hlc | None) -> str | None:
    return None if ts is None else str(ts)


def _parsed(text: str | None) -> Hlc | None:
    return None if text is None else Hlc.parse(text)


@dataclass(frozen=True)
class BatchResult:
    """What the driver learns after the write: every partition's summary, and totals."""

    partitions: list[PartitionSeen]
    emitted: int = 0
    duplicates: int = 0
    bad: int = 0
    first_bad: tuple[RecordRef, str] | None = None
    bytes: int = 0
    resent: int = 0  # changes dropped as an upstream's re-sends (see the module)
    schema_change: SchemaChangeError | None = None  # the first row of a new shape
    # exactly once: the write's Kafka transactions (:meth:`counted`)
    committed: int = 0
    aborted: int = 0

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
        changes = sorted(  # the earliest change by commit time: the one a pause names
            (
                (
                    RecordRef(s.partition.topic, s.partition.partition, int(c[0])),
                    str(c[1]),
                    str(c[2]),
                )
                for s in merged.values()
                if (c := s.schema_change) is not None
            ),
            key=lambda change: (Hlc.parse(change[2]), change[0]),
        )
        return cls(
            sorted(merged.values(), key=lambda s: s.partition),
            emitted=sum(s.emitted for s in merged.values()),
            duplicates=sum(s.duplicates for s in merged.values()),
            bad=sum(s.bad for s in merged.values()),
            first_bad=bads[0] if bads else None,
            bytes=sum(s.bytes for s in merged.values()),
            resent=sum(s.resent for s in merged.values()),
            schema_change=None if not changes else SchemaChangeError(*changes[0]),
        )

    @property
    def rests(self) -> list[Deferred]:
        """The partitions' rests left for their transactions' ENDs or a new schema."""
        return [rest for seen in self.partitions if (rest := seen.rest()) is not None]

    def with_rests(self, rests: BatchResult, later: Iterable[Deferred] = ()) -> BatchResult:
        """One result of the batch: its first run's and that of its rests, run again.

        A partition not run again keeps its schema change (the changefeed stops there); one
        whose rest waits for another round (``later``) keeps its rest too.
        """
        again = {seen.partition for seen in rests.partitions}
        waiting = {rest.partition for rest in later}
        done = [
            replace(seen, deferred=None, schema_change=None)
            if seen.partition in again
            else seen
            if seen.partition in waiting
            else replace(seen, deferred=None)
            for seen in self.partitions
        ]
        merged = BatchResult.of([*done, *rests.partitions])
        return replace(
            merged,
            committed=self.committed + rests.committed,
            aborted=self.aborted + rests.aborted,
        )

    def counted(self, transactions: KafkaTransactions) -> BatchResult:
        """The result with a write's Kafka transactions counted in."""
        return replace(
            self,
            committed=self.committed + transactions.committed,
            aborted=self.aborted + transactions.aborted,
        )

    def __str__(self) -> str:
        resent = f", {self.resent} re-sent dropped" if self.resent else ""
        counted = self.committed or self.aborted
        transactions = (
            f", {self.committed} transactions committed, {self.aborted} aborted" if counted else ""
        )
        return (
            f"{self.emitted} rows emitted, {self.duplicates} duplicates dropped{resent}, "
            f"{self.bad} bad{transactions}"
        )

    def stops(self, on_error: str) -> bool:
        """Whether the run stops at this batch (or chunk): the one place ``on_error`` decides.

        Its rows stopped at a schema change, or at a bad record with nowhere to divert it
        (``on_error`` not ``dlq``); :meth:`stop_error` names where.
        """
        return self.schema_change is not None or (self.first_bad is not None and on_error != "dlq")

    def stop_error(
        self, on_error: str, explain: Callable[[SchemaChangeError], SchemaChangeError]
    ) -> SourceDecodeError | SchemaChangeError:
        """What the run stops at (:meth:`stops`): the schema change explained, or the record."""
        if self.schema_change is not None:
            return explain(self.schema_change)
        assert self.first_bad is not None  # noqa: S101 - stops() said so
        ref, reason = self.first_bad
        return SourceDecodeError(ref, reason, action="paused" if on_error == "pause" else "stopped")

    def forward(self, frontier: Frontier) -> None:
        """Move ``frontier`` past what this batch read."""
        for seen in self.partitions:
            frontier.forward(
                seen.partition,
                resolved=seen.resolved,
                next_offset=seen.next_offset,
                position=seen.position,
            )


def read_result(observation: Observation) -> BatchResult:
    """The summaries of a finished write, merged."""
    summaries = json.loads(observation.get.get("summaries") or "[]")
    return BatchResult.of([PartitionSeen.from_json(text) for text in summaries])
