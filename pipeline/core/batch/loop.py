"""One micro-batch on the executors: decode, drop what is already resolved, encode, route.

Spark's Kafka source reads every source partition's offset range of a batch in offset order;
the ranges are coalesced into one task per core, each range on the executor the source prefers
for it (``Placement.java``). Each task runs :func:`process` over its records as Arrow batches
(``mapInArrow``), in one pass, keeping a state per source partition:

* the source adapter decodes the record (``pipeline/core/sources/``);
* a marker raises the partition's *floor*, which starts at the frontier's resolved time for
  the partition (shipped in the :class:`~.contract.BatchPlan`);
* a row at or below the floor is an upstream duplicate or a replay and is dropped; any other
  row is encoded by the encoder (``encoders/``) and routed to its output topic;
* a change that carries its source's position (Debezium) at or below the highest position
  already read on its partition is a *re-send* (the connector restarted and sent again what
  it had sent) and is dropped, whatever its time: the partition's highest position travels
  from batch to batch in the :class:`~.contract.BatchPlan` and the checkpoint, like the floor;
* a binlog change (Debezium's MySQL, MariaDB) takes its commit time from its transaction's
  END (``BatchPlan.commits``, from the transaction topic the driver read): one whose END was
  not read yet *defers* the rest of its partition's batch (:class:`~.contract.Deferred`); the
  driver reads the transaction topic until that END is there and runs the rest again
  (``writer.BatchWriter``);
* a row whose columns are not its output schema's (an encoder's :class:`SchemaChange`: the
  table changed shape upstream) defers the rest of its partition, whatever ``on_error``
  says: the driver evolves the schema and runs it again (``schema_change_policy: evolve``),
  or checkpoints just before it and pauses the changefeed, naming it;
* an undecodable record goes to the dead-letter topic with the reason in headers
  (``on_error: dlq``), or is only reported, and the driver stops the job (``fail``, ``pause``).

At the end each task adds one *summary* per source partition (where the batch ended, the
highest marker, counts, the first bad record). Summaries travel to the driver through a Spark
``Observation`` of the write itself and are filtered out before the sink, so a batch
is read once and written once, with no shuffle: every version of a key lives on one source
partition, so each key's versions reach the output topic in commit order.

The per-record loop is plain Python over Arrow columns; it is the changefeed's hot path,
measured against the plain Spark copy in ``docs/benchmarks.md``. What the driver ships and
gets back is ``contract.py``'s; what a task writes, ``output.py``'s.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING

from encoders.base import ChangeRow, Context, Origin
from encoders.headers import split_headers
from schemas.errors import EncodingError, SchemaChange
from schemas.hlc import ZERO, Hlc

from ..ledger import SourcePartition
from ..sources import (
    Adapter,
    BadRecord,
    Change,
    LogPosition,
    Marker,
    Rows,
    SourceUnavailable,
    adapter,
    in_commit,
    snapshot_read,
    timed,
)
from .bad_records import BadRecords
from .boundary import PieceBegin, PieceEnd
from .contract import BatchPlan, PartitionSeen
from .jvm import coalesce_in_place
from .output import (
    OUTPUT_SCHEMA,
    OutputColumns,
    claim_checked,
    count_transaction,
    headed_bytes,
    records_observed,
)
from .rows import pick_row

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, Observation


def process(plan: BatchPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The task body (``mapInArrow``).

    In: source records (``key, value, topic, partition, offset``; ``headers`` for the
    dead-letter topic; ``error`` from a CDC query). Out: Kafka records, then one summary per
    source partition.
    """
    return Task(plan).run(batches)


def _runs(batch: pa.RecordBatch) -> list[tuple[int, int]]:
    """``(start, stop)`` of each stretch of records from one source partition."""
    import pyarrow.compute as pc  # noqa: PLC0415 - pyarrow loads on the executors only

    n = batch.num_rows
    if n < 2:
        return [(0, n)] if n else []
    topic, partition = batch.column("topic"), batch.column("partition")
    changed = pc.or_(
        pc.not_equal(partition.slice(1), partition.slice(0, n - 1)),
        pc.not_equal(topic.slice(1), topic.slice(0, n - 1)),
    )
    starts = [0, *(i + 1 for i in pc.indices_nonzero(changed).to_pylist())]
    return list(zip(starts, [*starts[1:], n], strict=True))


def _reader(
    source: Adapter, keys: pa.Array, values: pa.Array, verbatim: tuple[str, ...] | None
) -> Callable[[int, bytes | None, bytes | None], Change | Marker | Rows | None]:
    """Decodes record ``i`` of a stretch (its key and value), its numbers as exact as needed.

    The exact JSON reader reads the records the source adapter flags (``exact``), for the
    whole stretch at once. A change the encoder passes on as the source wrote it
    (``verbatim``: its members) needs no exact numbers: with such an encoder, records are read
    by orjson alone, and the flags are found at the first change it would write itself, or
    at a bad record: its reason quotes its values as read exactly, whatever came before it in
    the stretch (where a batch or the JVM walk stopped must not change a dead letter's reason).
    """
    decode = source.decode
    if not verbatim:
        flags = source.exact(keys, values)
        return lambda i, key, value: decode(key, value, flags[i])
    exact: list[bool] = []

    def read(i: int, key: bytes | None, value: bytes | None) -> Change | Marker | Rows | None:
        if exact:
            return decode(key, value, exact[i])
        try:
            item = decode(key, value, False)
        except BadRecord:
            exact.extend(source.exact(keys, values))
            return decode(key, value, exact[i])
        written = type(item) is tuple or (
            type(item) is Change and (item.text is None or item.text.members != verbatim)
        )
        if written:  # rows the encoder writes itself (several rows of one record are)
            exact.extend(source.exact(keys, values))
            return decode(key, value, exact[i])
        return item

    return read


class Frames:
    """Exactly once: the rows a task writes around each source partition's stretch.

    A begin row (where the partition's piece starts) before its records, its summary row
    with where its progress is after them; the sink writes the records between in one Kafka
    transaction with that progress (``Sink.java``'s ``PieceRows``).
    """

    seen: dict[tuple[str, int], PartitionSeen]
    floors: dict[tuple[str, int], Hlc]

    def stretch(self, piece: pa.RecordBatch) -> tuple[str, int]:
        """The source partition of a stretch (:meth:`pieces` gives one partition's each)."""
        return piece.column("topic")[0].as_py(), piece.column("partition")[0].as_py()

    def begins(self, sp: tuple[str, int], piece: pa.RecordBatch) -> str:
        """Exactly once: the begin row's progress text, where the partition's piece starts."""
        return PieceBegin(sp[0], sp[1], piece.column("offset")[0].as_py()).to_json()

    def ended(self, sp: tuple[str, int], out: OutputColumns) -> None:
        """Exactly once: a partition's stretch ended; its summary, and where its progress is."""
        state = self.seen[sp]
        progress = PieceEnd(state.next_offset, self.floors[sp], state.position)
        out.mark(state.to_json(), progress.to_json())


class Task(Frames):
    """One task's walk over its records; the state of each source partition it meets."""

    flush_rows = sys.maxsize  # records out before an Arrow batch is handed on mid-batch

    def __init__(self, plan: BatchPlan) -> None:
        self.plan = plan
        self.adapters = {
            topic: adapter(fmt, plan.registries.get(topic)) for topic, fmt in plan.formats.items()
        }
        self.contexts = {topic: Context(output) for topic, output in plan.routes.items()}
        self.seen: dict[tuple[str, int], PartitionSeen] = {}
        self.floors: dict[tuple[str, int], Hlc] = {}
        self.latest: dict[tuple[str, int], LogPosition | None] = {}  # highest source position read
        self.halted: set[tuple[str, int]] = set()  # stopped at a bad record
        self.bad_records = BadRecords(plan, self.adapters)  # dead letters, retyped columns

    def run(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Records out for each input batch, then the summaries.

        Exactly once, each source partition's stretch (coalesce walks a task's partitions one
        after the other) is framed: a begin row before its records, its summary row right
        after them (:meth:`ended`).
        """
        framed = self.plan.exactly_once
        current: tuple[str, int] | None = None
        for batch in batches:
            out = OutputColumns()
            for piece in self.pieces(batch):
                if framed:
                    sp = self.stretch(piece)
                    if sp != current:
                        if current is not None:
                            self.ended(current, out)
                        out.mark(None, self.begins(sp, piece))
                        current = sp
                self.records(piece, out)
                if len(out.key) >= self.flush_rows:
                    yield out.arrow()
                    self.wrote(len(out.key))
                    out = OutputColumns()
            if out.key:
                yield out.arrow()
                self.wrote(len(out.key))
        out = OutputColumns()
        self.finish(out)
        if current is not None:
            self.ended(current, out)
        elif not framed:
            for state in self.seen.values():
                out.mark(state.to_json(), None)
        if out.key:
            yield out.arrow()

    def pieces(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        """The stretches of one source partition each that :meth:`records` walks."""
        for start, stop in _runs(batch):
            yield batch.slice(start, stop - start)

    def wrote(self, count: int) -> None:
        """Called after ``count`` records went out (a hook: the initial scan paces here)."""

    def finish(self, out: OutputColumns) -> None:
        """Called once after the last batch (a hook: the initial scan ends its last key)."""

    def partition(self, run: pa.RecordBatch) -> tuple[tuple[str, int], PartitionSeen]:
        """The stretch's source partition and its summary so far.

        A partition met for the first time starts at the frontier's resolved time.
        """
        topic = run.column("topic")[0].as_py()
        partition = run.column("partition")[0].as_py()
        sp = (topic, partition)
        state = self.seen.get(sp)
        if state is None:
            first = run.column("offset")[0].as_py()
            state = self.seen[sp] = PartitionSeen(
                SourcePartition(topic, partition), first, None, counting=topic in self.plan.counted
            )
            self.floors[sp] = self.plan.thresholds.get(sp, self.plan.new_partition_floor)
            self.latest[sp] = self.plan.positions.get(sp)
        return sp, state

    def records(self, run: pa.RecordBatch, out: OutputColumns) -> None:  # noqa: PLR0912, PLR0915 - one frame
        """Decode, filter and encode a stretch of one source partition's records into ``out``.

        The hot loop of the changefeed: Python objects only for keys and values, appends
        through bound methods, the partition's floor in a local.
        """
        offsets = run.column("offset")
        sp, state = self.partition(run)
        if sp in self.halted:  # stopped at a bad record or deferred: nothing after it
            if state.deferred is not None:
                state.deferred[1] = offsets[-1].as_py() + 1
            return
        topic = sp[0]
        commits = self.plan.commits.get(topic) or {}
        waits: str | None = None  # the transaction whose END a binlog change waits for
        floor, end_time, latest = self.floors[sp], self.plan.end_time, self.latest[sp]
        source, ctx, table = self.adapters[topic], self.contexts[topic], self.plan.tables[topic]
        encoder = self.plan.encoders[topic]
        encode_key, encode_value = encoder.key, encoder.value
        add_key, add_value = out.key.append, out.value.append
        query = self.plan.shapes.get(topic)
        shape = None if query is None else query.stretch(run)
        names = run.schema.names
        keeps = run.column("keep").to_pylist() if "keep" in names else None  # a query's where
        # rows appended since the last topic run was recorded; rows of this stretch, their bytes
        emitted = kept = size = 0
        keys, values = run.column("key"), run.column("value")
        decode = _reader(source, keys, values, encoder.verbatim if shape is None else None)
        if "row" in names:  # one Spark row per change (rows.py)
            decode = pick_row(decode, offsets.to_pylist(), run.column("row").to_pylist())
        stop = len(run)  # where the walk ends: the stretch's end, or a bad record it stops at
        reread = -1  # the last snapshot read of the stretch (the summary says where it lies)
        room = self.plan.room  # a sink-side dead letter beyond
        headers_column = self.plan.headers_column
        # envelope: enriched: each row's op and where it came from (the key's names declared,
        # else as the record names them)
        origin = encoder.wants_origin
        declared_names = self.plan.key_names.get(topic)
        for i, (key, value) in enumerate(zip(keys.to_pylist(), values.to_pylist(), strict=True)):
            held = latest  # where a walk stopped at this record resumes
            ts: Hlc | None = None
            try:
                item = decode(i, key, value)
                if isinstance(item, Change):
                    changes: Rows = (item,)
                elif isinstance(item, Marker):
                    floor = max(floor, item.resolved)
                    state.resolved = max(state.resolved or ZERO, item.resolved)
                    continue
                else:
                    changes = item or ()  # several rows (canal-json), or none (a tombstone)
                for change in changes:
                    ts = change.ts
                    position, tx = change.position, change.tx
                    if change.point is not None:  # a snapshot's read: never a re-send
                        reread = i
                        if ts <= floor:  # Debezium's own time: a snapshot before the start
                            state.duplicates += 1
                            continue
                        ts, latest = snapshot_read(change.point, floor, latest)
                    resent = position is not None and latest is not None and position <= latest
                    if change.order is not None and tx is not None:  # a binlog change
                        end = commits.get(tx[0])
                        if end is None and not resent:
                            waits = tx[0]
                            break
                        ts = None if end is None else in_commit(end, change.order)
                    if tx is not None:  # Debezium: counted for its transaction
                        state.saw(tx, ts)
                    if resent:
                        state.resent += 1
                        continue
                    assert ts is not None  # noqa: S101 - only a re-send's commit may be unknown
                    if position is not None:
                        latest = timed(position, ts)  # a read after it starts above its time
                    if ts <= floor:
                        state.duplicates += 1
                        continue
                    if keeps is not None and not keeps[i]:
                        continue
                    if shape is not None:
                        change = shape(i, change)  # noqa: PLW2901 - the query's change
                    if end_time is not None and ts > end_time:
                        continue
                    row = ChangeRow(
                        table, change.key, change.after, change.before, ts, ts, change.text
                    )
                    if origin:
                        names = declared_names or source.key_names(key, value)
                        place = Origin(
                            topic, sp[1], offsets[i].as_py(), position, tx[0] if tx else None, names
                        )
                        row = row._replace(op=change.op, origin=place)
                    headers = None
                    try:
                        if headers_column is not None:  # headers_json_column_name
                            row, headers = split_headers(row, headers_column)
                        key_bytes, value_bytes = encode_key(row, ctx), encode_value(row, ctx)
                    except EncodingError as exc:  # a type changed upstream, or a bad value
                        raise self.bad_records.retyped(topic, key, value, exc) from None
                    # a column's headers (headers_json_column_name) count: Kafka counts them
                    record_size = len(key_bytes) + len(value_bytes or b"") + headed_bytes(headers)
                    if record_size > room:  # claimed (oversized_rows: claim_check), or bad
                        value_bytes, headers = claim_checked(
                            self.plan, ctx.topic, key_bytes, value_bytes, headers
                        )
                        record_size = len(key_bytes) + len(value_bytes)
                    add_key(key_bytes)  # a record's rows before a bad one of it stay written
                    add_value(value_bytes)
                    if headers:
                        out.headed(headers)
                    emitted += 1
                    kept += 1
                    size += record_size
                if waits is not None:  # the rest waits for the END (the driver runs it again)
                    stop, latest = i, held
                    state.deferred = [offsets[i].as_py(), offsets[-1].as_py() + 1, "", waits]
                    break
            except SourceUnavailable:
                raise  # an outage, not the record's fault: the batch runs again
            except SchemaChange as exc:  # the table changed shape: the driver decides
                out.topic_run(ctx.topic, emitted)
                emitted = 0
                state.schema_change = [offsets[i].as_py(), exc.reason, str(ts)]
                # the rest runs again with an evolved schema, or from here on resume
                state.deferred = [offsets[i].as_py(), offsets[-1].as_py() + 1, "", None]
                stop, latest = i, held
                break
            except Exception as exc:  # no record, however strange, stops a feed
                count_transaction(state, exc)
                position = exc.position if isinstance(exc, BadRecord) else None
                if position is not None and latest is not None and position <= latest:
                    state.resent += 1  # a bad change sent again: dealt with the first time
                    continue
                out.topic_run(ctx.topic, emitted)
                emitted = 0
                if self.bad_records.dead_letter(out, state, offsets[i].as_py(), exc, run, i):
                    stop, latest = i, held  # read again on resume: its position not passed
                    break
                latest = position or latest
        out.topic_run(ctx.topic, emitted)
        if reread >= 0:  # the driver learns of a new snapshot by it (resolved/resnapshots.py)
            state.reread = offsets[reread].as_py()
        self.latest[sp] = state.position = latest
        self.walked(sp, state, floor, (kept, size), offsets, stop)

    def walked(  # noqa: PLR0917 - where a stretch's walk got to
        self,
        sp: tuple[str, int],
        state: PartitionSeen,
        floor: Hlc,
        kept: tuple[int, int],
        offsets: pa.Array,
        stop: int,
    ) -> None:
        """Record a stretch's end: its rows and their bytes, its floor, where it resumes."""
        state.emitted += kept[0]
        state.bytes += kept[1]
        self.floors[sp] = floor
        if state.deferred is not None:
            state.deferred[2] = str(floor)
        if stop < len(offsets):  # the checkpoint resumes at the bad record, which is named
            self.halted.add(sp)
            state.next_offset = offsets[stop].as_py()
        else:
            state.next_offset = offsets[-1].as_py() + 1


def kafka_records(batch: DataFrame, plan: BatchPlan, observation: Observation) -> DataFrame:
    """The batch's Kafka records (``topic, key, value, headers``); summaries are observed."""
    source = batch.select(*source_columns(batch, plan))
    # A Python task costs ~0.2 s to set up, whatever its size: at most one task per core,
    # each walking several source partitions one after the other (in order within each), each
    # partition on the executor Spark's Kafka source prefers for it, batch after batch (under
    # exactly once its transactional producer stays there; Spark's coalesce moves it).
    source = coalesce_in_place(source, source.sparkSession.sparkContext.defaultParallelism)
    processed = source.mapInArrow(partial(process, plan), OUTPUT_SCHEMA)
    return records_observed(processed, observation, framed=plan.exactly_once)


def source_columns(batch: DataFrame, plan: BatchPlan) -> list[str]:
    """The source columns a task reads (headers only for the dead-letter topic)."""
    columns = ["key", "value", "topic", "partition", "offset"]
    if plan.dlq_topic is not None or plan.skip is not None:
        columns.append("headers")
    # a CDC query's: values that do not fit their table, the selected values, its where clause
    columns.extend(c for c in ("error", "projected", "keep") if c in batch.columns)
    # one Spark row per change (rows.py): which change of its record, its key (the scan's)
    columns.extend(c for c in ("row", "group") if c in batch.columns)
    return columns
