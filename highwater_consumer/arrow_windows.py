"""Resolved windows as Arrow tables: :class:`~highwater_consumer.windows.Windows`, columnar.

The same windows as the per-row :class:`~highwater_consumer.windows.Windows` (the same rows
in the same order, each (table, key, updated) once, the same R, the same pieces and the same
offsets to commit), made from :class:`~highwater_consumer.columnar.Batch` columns by Arrow's
kernels: no Python object a row. Commit order is the per-row rows' tuple order: ``updated``,
table, key, then value, partition and offset (replays adjoin, the first kept); tables are
numbered in the order of their names, partitions in the order of (topic, partition), so the
numbers sort as the names do.

A window's rows (:attr:`ArrowWindow.rows`) are a table of :data:`COLUMNS`; ``updated`` is two
columns (``wall``, ``logical``: an HLC's wall is beyond 64 bits once packed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from schemas.hlc import Hlc

from .columnar import MARKER, ROW, Batch
from .windows import Partition, Reader, Row, Window

COLUMNS = ("wall", "logical", "table", "key", "value", "slot", "offset", "shape", "width")
_HELD = pa.schema(
    [
        ("wall", pa.uint64()),
        ("logical", pa.uint64()),
        ("table", pa.int32()),  # the table's number (names in order)
        ("key", pa.large_binary()),
        ("value", pa.large_binary()),
        ("slot", pa.int32()),  # the partition's number ((topic, partition) in order)
        ("offset", pa.int64()),
        ("shape", pa.large_binary()),  # JSON: after's names joined by NUL; null: deleted
        ("width", pa.int32()),  # JSON: the key's elements
    ]
)
_ORDER = [(c, "ascending") for c in ("wall", "logical", "table", "key", "value", "slot", "offset")]


@dataclass(frozen=True)
class ArrowWindow:
    """Rows resolved at ``resolved`` in commit order, as a table; ``last``: its last piece.

    ``tables``/``partitions``: what the ``table`` and ``slot`` numbers name.
    """

    resolved: Hlc
    rows: pa.Table
    tables: tuple[str, ...]
    partitions: tuple[Partition, ...]
    last: bool = True
    reader: Reader | None = None  # how a row's record is read whole (Row.change)

    def __len__(self) -> int:
        return int(self.rows.num_rows)

    def to_window(self) -> Window:
        """The same window as per-row :class:`Row` s (a Python object a row: tests, Avro)."""
        reader = self.reader
        columns = self.rows.to_pydict()
        rows = tuple(
            Row(w * 10**10 + lg, self.tables[t], k, v, self.partitions[s], o, reader)
            for w, lg, t, k, v, s, o in zip(
                columns["wall"],
                columns["logical"],
                columns["table"],
                columns["key"],
                columns["value"],
                columns["slot"],
                columns["offset"],
                strict=True,
            )
        )
        return Window(self.resolved, rows, self.last)


def _at_or_below(rows: pa.Table, wall: int, logical: int) -> pa.Array:
    """Which rows' updated is at or below (wall, logical)."""
    walls = rows.column("wall")
    return pc.or_(
        pc.less(walls, wall),
        pc.and_(pc.equal(walls, wall), pc.less_equal(rows.column("logical"), logical)),
    )


class _Held:
    """One partition: its latest marker, where it was read to, and its rows held (tables)."""

    __slots__ = ("chunks", "count", "marker", "marker_at", "read_to", "table")

    def __init__(self, table: int) -> None:
        self.table = table
        self.marker: Hlc | None = None
        self.marker_at: int | None = None
        self.read_to = 0
        self.chunks: list[pa.Table] = []
        self.count = 0

    def take(self, upto: Hlc) -> pa.Table | None:
        """The rows held at or below ``upto``, kept no more."""
        if not self.chunks:
            return None
        rows = pa.concat_tables(self.chunks)
        go = _at_or_below(rows, upto.wall, upto.logical)
        if pc.all(go).as_py():
            self.chunks, self.count = [], 0
            return rows
        kept = rows.filter(pc.invert(go))
        self.chunks, self.count = [kept], kept.num_rows
        return rows.filter(go)

    def first(self) -> int | None:
        if not self.chunks:
            return None
        return int(min(pc.min(c.column("offset")).as_py() for c in self.chunks))


class ArrowWindows:
    """Resolved windows from column batches; the arguments as :class:`Windows`'.

    ``partitions``: every partition (each with its table); their order is the reader's slots.
    """

    def __init__(
        self,
        partitions: Mapping[Partition, str],
        after: Hlc | None = None,
        piece: int = 100_000,
        reader: Reader | None = None,
    ) -> None:
        if piece < 1:
            raise ValueError("piece must be at least 1")
        if not partitions:
            raise ValueError("a changefeed's output has at least one partition")
        self.slots: tuple[Partition, ...] = tuple(sorted(partitions))
        self.tables: tuple[str, ...] = tuple(sorted(set(partitions.values())))
        number = {name: n for n, name in enumerate(self.tables)}
        self.held = [_Held(number[partitions[p]]) for p in self.slots]
        self.after = after
        self.piece = piece
        self.reader = reader
        self.duplicates = 0

    @property
    def partitions(self) -> dict[Partition, _Held]:
        """Each partition's state."""
        return dict(zip(self.slots, self.held, strict=True))

    def add(self, batch: Batch) -> None:
        """A batch read (its CHECK records settled): rows held, markers and offsets taken."""
        if not len(batch):
            return
        self._read_to(batch)
        kinds = batch.kind
        markers = pc.indices_nonzero(pc.equal(kinds, MARKER)).to_pylist()
        for at in markers:  # a few a batch
            held = self.held[batch.slot[at].as_py()]
            resolved = Hlc(batch.wall[at].as_py(), batch.logical[at].as_py())
            if held.marker is None or resolved > held.marker:
                held.marker, held.marker_at = resolved, batch.offset[at].as_py()
        rows = pa.table(
            [
                batch.wall,
                batch.logical,
                pc.take(pa.array([h.table for h in self.held], pa.int32()), batch.slot),
                batch.key,
                batch.value,
                batch.slot,
                batch.offset,
                batch.shape,
                batch.width,
            ],
            schema=_HELD,
        ).filter(pc.equal(kinds, ROW))
        if self.after is not None:
            old = _at_or_below(rows, self.after.wall, self.after.logical)
            dropped = pc.sum(old).as_py() or 0
            if dropped:
                self.duplicates += dropped
                rows = rows.filter(pc.invert(old))
        if not rows.num_rows:
            return
        slots = rows.column("slot")
        found = pc.unique(slots).to_pylist()
        for slot in found:
            part = rows if len(found) == 1 else rows.filter(pc.equal(slots, slot))
            held = self.held[slot]
            held.chunks.append(part)
            held.count += part.num_rows

    def _read_to(self, batch: Batch) -> None:
        by_slot = (
            pa.table({"slot": batch.slot, "offset": batch.offset})
            .group_by("slot")
            .aggregate([("offset", "max")])
        )
        for slot, offset in zip(
            by_slot.column("slot").to_pylist(),
            by_slot.column("offset_max").to_pylist(),
            strict=True,
        ):
            held = self.held[slot]
            held.read_to = max(held.read_to, offset + 1)

    @property
    def frontier(self) -> Hlc | None:
        """The lowest of every partition's latest marker; None while one has none."""
        markers = [held.marker for held in self.held]
        if any(m is None for m in markers):
            return None
        return min(m for m in markers if m is not None)

    def ahead(self) -> set[int]:
        """The slots whose latest marker is above the frontier: what they hold waits."""
        frontier = self.frontier
        return {
            slot
            for slot, held in enumerate(self.held)
            if held.marker is not None and (frontier is None or held.marker > frontier)
        }

    def held_rows(self) -> int:
        """How many rows are held above the last window."""
        return sum(held.count for held in self.held)

    def ready(self) -> list[ArrowWindow]:
        """The windows the frontier resolves now, in pieces of at most ``piece`` rows."""
        frontier = self.frontier
        if frontier is None or (self.after is not None and frontier <= self.after):
            return []
        taken = [t for t in (held.take(frontier) for held in self.held) if t is not None]
        self.after = frontier
        if not taken:
            return [self._window(frontier, _HELD.empty_table(), last=True)]
        rows = pa.concat_tables(taken)
        rows = rows.take(pc.sort_indices(rows, sort_keys=_ORDER))
        rows = _once(rows)
        self.duplicates += sum(t.num_rows for t in taken) - rows.num_rows
        if not rows.num_rows:
            return [self._window(frontier, rows, last=True)]
        return [
            self._window(
                frontier, rows.slice(start, self.piece), last=start + self.piece >= len(rows)
            )
            for start in range(0, rows.num_rows, self.piece)
        ]

    def _window(self, resolved: Hlc, rows: pa.Table, *, last: bool) -> ArrowWindow:
        return ArrowWindow(
            resolved, rows.combine_chunks(), self.tables, self.slots, last, self.reader
        )

    def committable(self) -> dict[Partition, int]:
        """Per partition read from, the offset a restarted consumer may start from."""
        out = {}
        for partition, held in zip(self.slots, self.held, strict=True):
            found = [o for o in (held.first(), held.marker_at) if o is not None]
            if found:
                out[partition] = min(found)
            elif held.read_to:
                out[partition] = held.read_to
        return out

    def skipped(self, slot: int, offset: int) -> None:
        """A bad record read (reported): the partition read past it."""
        held = self.held[slot]
        held.read_to = max(held.read_to, offset + 1)


def _once(rows: pa.Table) -> pa.Table:
    """Sorted rows without the replays: each (updated, table, key) once, the first kept."""
    n = rows.num_rows
    if n < 2:
        return rows
    same: Any = None
    for name in ("wall", "logical", "table", "key"):
        column = rows.column(name)
        equal = pc.equal(column.slice(1), column.slice(0, n - 1))
        same = equal if same is None else pc.and_(same, equal)
    if not pc.any(same).as_py():
        return rows
    keep = pa.concat_arrays([pa.array([True]), pc.invert(same).combine_chunks()])
    return rows.filter(keep)
