"""The initial scan: a consistent snapshot of every table at the statement time (contract §7).

The statement time T is the sources' high-water mark when the changefeed is created (or its
``cursor``); every change at or below it lies before the end offsets read with it
(``pipeline/core/scan/statement.py``). The snapshot is, for every key, its version with the highest
time at or below T, deleted keys left out, emitted with ``updated`` = T and
``mvcc_timestamp`` = the version's own time.

**Chunks.** Every version of a key lives on one source partition, so a source partition's range
``[first offset, end offset)`` holds everything the snapshot of its keys needs: a *chunk*
(``backfill.py``). A chunk is one Spark batch job of one task, no shuffle: Spark's Kafka reader
reads the range and groups it by key (Spark's external sort, spilling to disk, so a table never
has to fit in memory); :class:`ScanTask` drops the versions at or below T that a later one
supersedes, reading their times without decoding them (:func:`drop_superseded`), and walks the
rest one key at a time (``key_versions.py``), decoding and encoding about one record per key.
This module is the executors' side; ``scan_driver.py`` runs the chunks from driver threads, one
per core, and the coordinator records each finished one in the checkpoint record (``backfill``)
before it counts, so a restart skips finished chunks and re-emits only those that were in
flight.

**Hand-over.** Versions after T that lie in a chunk's range are emitted by the scan too,
after the key's snapshot row, in commit order; the stream then starts at the end offsets,
each partition's floor at its latest marker, so the stream's floor mechanism (``batch/loop.py``)
emits every change after T exactly once more: none twice, none lost. Nothing upstream waits
for the scan: the sources are a log, and the stream reads what arrived meanwhile when the
scan is done.

**Rate limit and progress.** ``initial_scan.rate_limit`` rows per second is shared evenly by
the chunks in flight; each task paces the rows it hands to the sink. Progress (chunks,
records, rows, rate, ETA) is counted per finished chunk.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from encoders.base import ChangeRow, Origin
from encoders.headers import split_headers
from schemas.errors import SchemaChange
from schemas.hlc import Hlc

from ..batch import (
    OUTPUT_SCHEMA,
    BatchPlan,
    OutputColumns,
    PartitionSeen,
    PieceAbandon,
    PieceBegin,
    PieceEnd,
    Task,
    claim_checked,
    count_transaction,
    headed_bytes,
    pick_row,
    records_observed,
    source_columns,
)
from ..ledger import SourcePartition
from ..sources import BadRecord, Change, Marker, Rows, SourceUnavailable, adapter, commit_time_of
from .key_versions import KeyVersions, Version

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, Observation


@dataclass(frozen=True)
class ScanPlan:
    """What a chunk's task needs; pickled to it."""

    batch: BatchPlan  # tables, formats, routes, encoders, dead-letter topic, end_time
    statement_time: Hlc
    changes: bool = True  # also emit the versions after the statement time (not for ``only``)
    rate: float | None = None  # rows per second for this task
    step: int = 10_000  # records walked between two looks at the pace
    chunk: SourcePartition | None = None  # the partition the task walks (set per chunk)
    span: tuple[int, int] | None = None  # and its offsets [start, end) (set per chunk)
    # a table emitted again at a schema change (``rescan.py``): a key with a version after
    # the time in the chunk is left out (the stream wrote that one already)
    again: bool = False
    # per source topic, its columns' defaults for the rows whose records predate them
    # (``schema_change_policy: backfill``)
    defaults: Mapping[str, Mapping[str, Any]] | None = None


class ScanTask(Task):
    """One chunk's walk: a source partition's records grouped by key, each key's in offset order.

    For the key being walked it keeps its latest version at or below the statement time and
    its versions after it (in offset order, which is commit order); when the key changes,
    they are emitted. A version whose time is not above the one kept before it is a
    duplicate. Undecodable records follow ``on_error`` as in the stream; one whose time can
    still be read (``times``) takes part as a version that emits nothing, so the latest
    version decides a key whether it was decoded or not, as it does in
    :func:`drop_superseded`, which only spares the walk work: fed every version or only
    what it keeps, the walk emits the same rows.
    """

    clock: Callable[[], float] = staticmethod(time.monotonic)  # injectable for tests
    sleep: Callable[[float], None] = staticmethod(time.sleep)

    def __init__(self, plan: ScanPlan) -> None:
        super().__init__(plan.batch)
        self.scan = plan
        chunk = plan.chunk
        assert chunk is not None  # noqa: S101 - InitialScan names it
        self.chunk = chunk
        self.source = adapter(
            plan.batch.formats[chunk.topic], plan.batch.registries.get(chunk.topic)
        )
        self.times = self.source.times
        # one chunk, one topic: what emit() needs for every row, looked up once
        self.ctx, self.table = self.contexts[chunk.topic], plan.batch.tables[chunk.topic]
        self.defaults = (plan.defaults or {}).get(chunk.topic)
        self.encode_key = plan.batch.encoders[chunk.topic].key
        self.encode_value = plan.batch.encoders[chunk.topic].value
        # envelope: enriched: each row's op and origin, its key's names declared, else read
        enriched = plan.batch.encoders[chunk.topic].wants_origin
        self.names = (
            (plan.batch.key_names.get(chunk.topic) or self.source.key_names) if enriched else None
        )
        self.pending = 0  # rows appended to the output since its topic run was recorded
        self.walking = KeyVersions(
            plan.statement_time, plan.batch.end_time, changes=plan.changes, again=plan.again
        )
        self.state: PartitionSeen | None = None
        self.sent = 0
        self.read_to = 0  # past the highest offset read (superseded versions included)
        self.started: float | None = None
        if plan.rate is not None:
            self.flush_rows = plan.step  # rows go out in small steps, each paced

    def pieces(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        """Slices of ``step`` records, superseded versions left out (a chunk is one partition)."""
        import pyarrow.compute as pc  # noqa: PLC0415 - executors only

        if self.started is None:
            self.started = self.clock()  # after Spark's sort: pacing starts here
        if batch.num_rows:  # read, whether or not dropped next
            self.read_to = max(self.read_to, pc.max(batch.column("offset")).as_py() + 1)
        batch = drop_superseded(batch, self.scan.statement_time, self.times)
        for start in range(0, batch.num_rows, self.scan.step):
            yield batch.slice(start, self.scan.step)

    def wrote(self, count: int) -> None:
        """Sleep while the rows sent are ahead of the rate limit."""
        self.sent += count
        if self.scan.rate is None or self.started is None:
            return
        ahead = self.sent / self.scan.rate - (self.clock() - self.started)
        if ahead > 0:
            self.sleep(ahead)

    def stretch(self, piece: pa.RecordBatch) -> tuple[str, int]:
        """The chunk's partition (its records carry no topic and partition)."""
        return self.chunk.topic, self.chunk.partition

    def begins(self, sp: tuple[str, int], piece: pa.RecordBatch) -> str:
        """Exactly once: the chunk starts at its range's start (its rows go by key)."""
        assert self.scan.span is not None  # noqa: S101 - InitialScan names it
        return PieceBegin(sp[0], sp[1], self.scan.span[0]).to_json()

    def ended(self, sp: tuple[str, int], out: OutputColumns) -> None:
        """Exactly once: the chunk is done to its range's end (for this scan's time).

        A chunk that met what stops the run (a schema change; a bad record with no dead-letter
        topic) is not done: its transaction is abandoned (``Pieces.abandon``), so none of its
        rows is seen, and it runs again whole once the run goes on (resumed, evolved).
        """
        assert self.scan.span is not None  # noqa: S101 - InitialScan names it
        state = self.seen[sp]
        stopped = state.schema_change is not None or (
            state.first_bad is not None and self.plan.dlq_topic is None
        )
        progress = PieceAbandon() if stopped else PieceEnd(self.scan.span[1])
        out.mark(state.to_json(), progress.to_json())

    def partition(self, run: pa.RecordBatch) -> tuple[tuple[str, int], PartitionSeen]:
        """The chunk's partition (from the plan) and its summary so far."""
        chunk = self.chunk
        sp = (chunk.topic, chunk.partition)
        state = self.seen.get(sp)
        if state is None:
            state = self.seen[sp] = PartitionSeen(chunk, run.column("offset")[0].as_py(), None)
        return sp, state

    def records(self, run: pa.RecordBatch, out: OutputColumns) -> None:
        """Walk a slice of the sorted records."""
        _, state = self.partition(run)
        self.state = state
        source = self.source
        names = run.schema.names
        keeps = run.column("keep").to_pylist() if "keep" in names else None
        query = self.plan.shapes.get(self.chunk.topic)
        shape = None if query is None else query.stretch(run)
        offsets = run.column("offset").to_pylist()
        exact = source.exact(run.column("key"), run.column("value"))
        keys, values = run.column("key").to_pylist(), run.column("value").to_pylist()
        read = self.reader(run, exact, offsets)
        groups = run.column("group").to_pylist() if "group" in names else keys
        for i, group in enumerate(groups):
            if group != self.walking.key:
                self.end_key(out)
                self.walking.start(group, source.key if groups is keys else _carried)
            try:
                item = read(i, keys[i], values[i])
                if type(item) is not Change:
                    continue  # a marker is the stream's concern; or nothing to emit
                if item.order is not None and item.tx is not None:  # a binlog change
                    item = item._replace(ts=self.commit_time(item))
                if item.tx is not None:  # Debezium: the stream's transaction log counts it
                    state.saw(item.tx, item.ts)
                if item.position is not None and (
                    state.position is None or item.position > state.position
                ):
                    state.position = item.position  # where the stream tells re-sends after
                if shape is not None:
                    item = shape(i, item)
            except SourceUnavailable:
                raise  # an outage, not the record's fault: the chunk runs again
            except Exception as exc:  # no record, however strange, stops a scan
                count_transaction(state, exc)
                self.flush(out)  # the rows before it, then its dead-letter record
                self.bad_records.dead_letter(out, state, offsets[i], exc, run, i)
                self.keep_undecodable(run, i, offsets[i])
                continue
            kept = Version(item.ts, item, keeps is None or bool(keeps[i]), offsets[i], run, i)
            self.walking.keep(kept, state)
        state.next_offset = max(state.next_offset, self.read_to)
        self.flush(out)

    def commit_time(self, change: Change) -> Hlc:
        """A binlog change's commit time: its transaction's END's, where the driver read it.

        A transaction that ENDed after the scan's plan was made has only its statement's
        time (``sources/debezium.py``): it commits after the statement time, so only its
        order against later changes rests on that.
        """
        ts = commit_time_of(change, self.plan.commits.get(self.chunk.topic) or {})
        return change.ts if ts is None else ts

    def reader(
        self, run: pa.RecordBatch, exact: list[bool], offsets: list[int]
    ) -> Callable[[int, bytes | None, bytes | None], Change | Marker | Rows | None]:
        """Decodes Spark row ``i`` of the slice.

        A native record is read by its key, parsed once per key; a Spark row of
        :func:`~.rows.with_rows` is change ``row`` of its record.
        """
        source = self.source
        if "row" in run.schema.names:
            return pick_row(
                lambda i, key, value: source.decode(key, value, exact[i]),
                offsets,
                run.column("row").to_pylist(),
            )

        def read(i: int, key: bytes | None, value: bytes | None) -> Change | Marker | None:
            if key is None:
                return source.marker(value)
            walking = self.walking
            if walking.values is None:
                raise BadRecord(walking.error or "no key")
            return source.change(walking.values, value, exact[i])

        return read

    def keep_undecodable(self, run: pa.RecordBatch, i: int, offset: int) -> None:
        """An undecodable version of a key still supersedes older ones, if its time is read."""
        if self.walking.key is None:
            return  # a marker: no key to supersede
        wall, logical = self.times(run.column("value").slice(i, 1))
        if wall[0].is_valid:
            ts = Hlc(wall[0].as_py(), logical[0].as_py())
            assert self.state is not None  # noqa: S101 - records() set it
            self.walking.keep(Version(ts, None, False, offset, run, i), self.state)

    def finish(self, out: OutputColumns) -> None:
        """The last key of the chunk."""
        self.end_key(out)
        self.flush(out)

    def flush(self, out: OutputColumns) -> None:
        """Record the rows emitted since the last flush (one topic run, not one per row)."""
        if self.pending:
            out.topic_run(self.ctx.topic, self.pending)
            assert self.state is not None  # noqa: S101 - rows were emitted
            self.state.emitted += self.pending
            self.pending = 0

    def end_key(self, out: OutputColumns) -> None:
        """Emit the key just walked: its snapshot row, then its versions after T."""
        taken = self.walking.take()
        if taken is None:
            return
        best, later = taken
        state = self.state
        assert state is not None  # noqa: S101 - a key was walked
        statement = self.scan.statement_time
        if best is not None and best.keep and best.change and best.change.after is not None:
            self.emit(out, state, best, statement)
        for version in later:
            if version.keep:
                self.emit(out, state, version, version.ts)

    def emit(
        self, out: OutputColumns, state: PartitionSeen, version: Version, updated: Hlc
    ) -> None:
        """Encode one row (``updated`` as given, ``mvcc_timestamp`` its own) into ``out``."""
        ctx, row = self.ctx, version_row(self.table, version, updated, self.defaults)
        if self.names is not None:  # envelope: enriched
            row = originated(row, version, updated != row.mvcc_timestamp, self.chunk, self.names)
        headers = None
        try:
            if self.plan.headers_column is not None:  # headers_json_column_name
                row, headers = split_headers(row, self.plan.headers_column)
            key, value = self.encode_key(row, ctx), self.encode_value(row, ctx)
            if len(key) + len(value or b"") + headed_bytes(headers) > self.plan.room:
                value, headers = claim_checked(self.plan, ctx.topic, key, value, headers)
        except SchemaChange as exc:  # the chunk is not done: schema_change_policy decides
            if state.schema_change is None:
                state.schema_change = [version.offset, exc.reason, str(version.ts)]
            return
        except Exception as exc:  # e.g. a value that does not fit its Avro type
            self.flush(out)
            self.bad_records.dead_letter(
                out, state, version.offset, exc, version.run, version.position
            )
            return
        out.key.append(key)
        out.value.append(value)
        if headers:
            out.headed(headers)
        state.bytes += len(key) + len(value or b"")
        self.pending += 1


def _carried(key: bytes) -> list[Any]:
    """A key of :func:`~.rows.with_rows` (``group``): its changes carry their key values."""
    return []


def drop_superseded(
    batch: pa.RecordBatch,
    statement_time: Hlc,
    times: Callable[[pa.Array], tuple[pa.Array, pa.Array]],
) -> pa.RecordBatch:
    """``batch`` (grouped by key) without the versions at or below T that another supersedes.

    Of a key's versions at or below the statement time only the latest can be in the
    snapshot; the others need not be decoded at all, which is most of a history's records.
    ``times`` reads the versions' times without decoding them (vectorised, see
    ``NativeAdapter.times``); among the versions of a key in this batch whose time it can read
    and is at or below T, only the latest (the first offset of equal times) stays. The rest
    stay too: versions after T, markers, times it cannot read, and the candidates of a key
    that continues in another batch, which the walk compares. The walk never relies on what
    is dropped: fed every version, it emits the same rows. What is dropped is not decoded, so
    an undecodable version is not reported when a later one supersedes it: it has no part in
    the state at T.
    """
    import numpy as np  # noqa: PLC0415 - executors only
    import pyarrow as pa  # noqa: PLC0415
    import pyarrow.compute as pc  # noqa: PLC0415

    n = batch.num_rows
    keys = batch.column("key")
    wall, logical = times(batch.column("value"))
    t_wall = min(statement_time.wall, np.iinfo(np.int64).max)  # times() reads int64 walls
    t_logical = statement_time.logical
    at_or_below = pc.or_(
        pc.less(wall, t_wall), pc.and_(pc.equal(wall, t_wall), pc.less_equal(logical, t_logical))
    )
    candidate = pc.fill_null(pc.and_(pc.is_valid(keys), at_or_below), False).to_numpy(
        zero_copy_only=False
    )
    rows = np.flatnonzero(candidate)
    if len(rows) < 2:  # nothing can supersede anything
        return batch
    new_key = np.ones(n, dtype=bool)
    changed = pc.not_equal(keys.slice(1), keys.slice(0, n - 1))  # null beside a marker
    new_key[1:] = pc.fill_null(changed, True).to_numpy(zero_copy_only=False)
    group = np.cumsum(new_key)[rows]
    # as int64 (with nulls numpy would make them float64, and 19-digit walls lose digits)
    walls, logicals = (pc.fill_null(a, 0).to_numpy() for a in (wall, logical))
    # per key, ascending time, the first offset last: each key's last entry is its latest
    order = np.lexsort((-rows, logicals[rows], walls[rows], group))
    latest = np.ones(len(order), dtype=bool)
    latest[:-1] = group[order][1:] != group[order][:-1]
    keep = ~candidate
    keep[rows[order[latest]]] = True
    return batch if keep.all() else batch.filter(pa.array(keep))


def process_chunk(plan: ScanPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The task body of a chunk (``mapInArrow``); output as :func:`~.batch.loop.process`."""
    return ScanTask(plan).run(batches)


def chunk_records(frame: DataFrame, plan: ScanPlan, observation: Observation) -> DataFrame:
    """A chunk's Kafka records: grouped by key in offset order, walked, summaries observed.

    Keys only need to be grouped, not ordered: the sort leads with the key's 64-bit hash,
    which settles almost every comparison on its own (a JSON key's first bytes are often the
    same: ``["eu-west",…``). A chunk is one partition, named in the plan: its topic and
    partition columns are not sorted nor shipped to Python with every record.
    """
    from pyspark.sql import functions as F  # noqa: PLC0415 - Spark stays out of the import path

    columns = [c for c in source_columns(frame, plan.batch) if c not in ("topic", "partition")]
    if "group" in columns:  # one Spark row per change, keyed by the change's key (rows.py)
        order: tuple[Any, ...] = (F.xxhash64("group"), "group", "offset", "row")
    else:
        order = (F.xxhash64("key"), "key", "offset")
    source = frame.select(*columns).sortWithinPartitions(*order)
    return records_observed(
        source.mapInArrow(partial(process_chunk, plan), OUTPUT_SCHEMA),
        observation,
        framed=plan.batch.exactly_once,
    )


def version_row(
    table: str, version: Version, updated: Hlc, defaults: Mapping[str, Any] | None
) -> ChangeRow:
    """A version's row at ``updated`` (a snapshot's row: without its version before).

    A column the record predates takes its default (``defaults``, of an evolved table).
    """
    change = version.change
    assert change is not None  # noqa: S101 - only decoded versions are kept to emit
    before = None if updated != change.ts else change.before  # a snapshot row has none
    after = change.after
    if defaults and after is not None:
        after = {**defaults, **after}
    return ChangeRow(table, change.key, after, before, updated, change.ts)


def originated(
    row: ChangeRow,
    version: Version,
    snapshot: bool,
    chunk: SourcePartition,
    names: tuple[str, ...] | Callable[[bytes | None, bytes | None], tuple[str, ...] | None],
) -> ChangeRow:
    """``row`` with its op (a snapshot's row: an insert) and where it came from.

    ``names``: the key's declared names, or how the source's records name them.
    """
    change = version.change
    assert change is not None  # noqa: S101 - only decoded versions are emitted
    if callable(names):
        key, value = (version.run.column(c)[version.position].as_py() for c in ("key", "value"))
        named = names(key, value)
    else:
        named = names
    tx = None if snapshot or change.tx is None else change.tx[0]
    position = None if snapshot else change.position
    origin = Origin(chunk.topic, chunk.partition, version.offset, position, tx, named)
    return row._replace(op="insert" if snapshot else change.op, origin=origin)
