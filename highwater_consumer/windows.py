"""Resolved windows: a changefeed's output records turned into consistent, ordered batches.

A resolved marker R on an output partition promises that no row at or below R that the
partition has not shown yet will follow (contract §5). A row at or below the lowest of every
partition's latest marker, the *frontier*, is therefore final: nothing before it in commit
order is still to come on any partition. :class:`Windows` keeps the rows read above the last
window, and when the frontier rises hands over the next **window**: every row with ``updated``
above the previous window's R and at or below the new one, each (table, key, updated) once,
in commit order (``updated``, then table, then key), with its R. Pure: no Kafka, no Spark; the
consumer around it reads, pauses and commits (issue 35).

* **Replays** (at-least-once output, a changefeed resumed from its checkpoint, a consumer
  restarted from committed offsets) are dropped: a row at or below the last window's R was
  handed over already, and a row seen twice above it is kept once.
* **Bounded**: a window of more than ``piece`` rows is handed over in pieces in commit order,
  each marked whether it is the window's last; none before the window's marker.
* **Where to commit**: per partition, :meth:`Windows.committable` is the offset from which a
  restarted consumer (told the last acknowledged R) loses nothing and hands nothing over
  twice: the first offset of a row still held or of the partition's latest marker (read
  again, so a restart need not wait for the next one), else just past the last record read.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from schemas.hlc import Hlc

from .decoding import Change

Partition = tuple[str, int]  # an output topic and partition
# a held row: ((wall, logical), table, key, value, partition, offset); sorts in commit order
_Tuple = tuple[tuple[int, int], str, bytes, "bytes | None", Partition, int]


@dataclass(order=True, slots=True)
class Row:
    """One output record of a row change, ordered as windows hand rows over.

    (Slots, not frozen: one is made per record read, and a frozen dataclass's init is slow.)
    """

    updated: Hlc
    table: str
    key: bytes  # the record's key, as written (the JSON array or the Avro key record)
    value: bytes | None = field(compare=False)  # the envelope; None: a tombstone
    partition: Partition = field(compare=False)
    offset: int = field(compare=False)
    # how to read the record whole when asked (decoding.Decoder.change); None: it cannot be
    reader: Callable[[bytes, bytes], Change] | None = field(compare=False, default=None, repr=False)
    _change: Change | None = field(compare=False, default=None, init=False, repr=False)

    @property
    def change(self) -> Change:
        """The row change read whole, values exact.

        Read when first asked for: a held row keeps its bytes only (few objects for the
        garbage collector to walk while a window fills).
        """
        if self._change is None:
            if self.reader is None or self.value is None:
                raise ValueError(f"row {self.partition}@{self.offset} has no reader")
            self._change = self.reader(self.key, self.value)
        return self._change

    @property
    def key_values(self) -> Any:
        """The key's values (JSON: the array; Avro: the key record)."""
        return self.change.key

    @property
    def after(self) -> dict[str, Any] | None:
        """The row after the change, values exact; None: deleted."""
        return self.change.after

    @property
    def before(self) -> dict[str, Any] | None:
        """The row before the change (the changefeed's ``diff``), or None."""
        return self.change.before


@dataclass(frozen=True)
class Window:
    """Rows resolved at ``resolved``, in commit order; ``last``: the window's last piece."""

    resolved: Hlc
    rows: tuple[Row, ...]
    last: bool = True


@dataclass
class _Held:
    """One partition's state: its latest marker, where it was read to, its rows' offsets held."""

    marker: Hlc | None = None
    marker_at: int | None = None  # the offset of the record that said it
    read_to: int | None = None  # just past the last record read
    offsets: list[int] = field(default_factory=list)  # a heap: the held rows' offsets
    gone: set[int] = field(default_factory=set)  # offsets in the heap handed over since

    def first(self) -> int | None:
        """The first offset of a row still held, or None."""
        while self.offsets and self.offsets[0] in self.gone:
            self.gone.discard(heapq.heappop(self.offsets))
        return self.offsets[0] if self.offsets else None


class Windows:
    """Assembles resolved windows from the records of every partition of a changefeed's output.

    ``partitions``: all of them (a partition without a marker holds the frontier back, as it
    must); ``after``: the last window acknowledged before (a restart), rows at or below it are
    replays; ``piece``: the most rows handed over at once; ``reader``: how the rows handed
    over read their record whole (:attr:`Row.reader`).

    Rows are held as plain tuples of their time's parts, table, key, value, partition and
    offset: tuples of strings, bytes and numbers that the garbage collector stops tracking,
    so a large window's rows cost it nothing while they wait. Rows are made at hand-over.
    """

    def __init__(
        self,
        partitions: Iterable[Partition],
        after: Hlc | None = None,
        piece: int = 100_000,
        reader: Callable[[bytes, bytes], Change] | None = None,
    ) -> None:
        if piece < 1:
            raise ValueError("piece must be at least 1")
        self.partitions = {p: _Held() for p in partitions}
        if not self.partitions:
            raise ValueError("a changefeed's output has at least one partition")
        self.after = after  # the last window handed over (whole)
        self.piece = piece
        self.reader = reader
        # above ``after``, not handed over: (table, key, (wall, logical)) -> _Tuple
        self.rows: dict[tuple[str, bytes, tuple[int, int]], _Tuple] = {}
        self.duplicates = 0

    def row(self, row: Row) -> None:
        """A row change read on ``row.partition`` at ``row.offset``."""
        self.add(row.updated, row.table, row.key, row.value, row.partition, row.offset)

    def add(  # noqa: PLR0917 - a row's parts, without making a Row per record
        self,
        updated: Hlc,
        table: str,
        key: bytes,
        value: bytes | None,
        partition: Partition,
        offset: int,
    ) -> None:
        """A row change (its parts) read on ``partition`` at ``offset``."""
        held = self.partitions.get(partition)
        if held is None:
            raise KeyError(f"{partition[0]}/{partition[1]} is not a partition of this output")
        if held.read_to is None or held.read_to <= offset:
            held.read_to = offset + 1
        after = self.after
        if after is not None and updated <= after:
            self.duplicates += 1
            return
        time = (updated[0], updated[1])
        place = (table, key, time)
        if place in self.rows:
            self.duplicates += 1
            return
        self.rows[place] = (time, table, key, value, partition, offset)
        heapq.heappush(held.offsets, offset)

    def marker(self, partition: Partition, offset: int, resolved: Hlc) -> None:
        """A resolved marker read on ``partition`` at ``offset``."""
        held = self._read(partition, offset)
        if held.marker is None or resolved > held.marker:
            held.marker, held.marker_at = resolved, offset

    def skipped(self, partition: Partition, offset: int) -> None:
        """A record read on ``partition`` at ``offset`` that is neither (a bad one, reported)."""
        self._read(partition, offset)

    def _read(self, partition: Partition, offset: int) -> _Held:
        held = self.partitions.get(partition)
        if held is None:
            raise KeyError(f"{partition[0]}/{partition[1]} is not a partition of this output")
        held.read_to = offset + 1 if held.read_to is None else max(held.read_to, offset + 1)
        return held

    @property
    def frontier(self) -> Hlc | None:
        """The lowest of every partition's latest marker; None while one has none."""
        markers = [held.marker for held in self.partitions.values()]
        if any(m is None for m in markers):
            return None
        return min(m for m in markers if m is not None)

    def ahead(self) -> set[Partition]:
        """The partitions whose latest marker is above the frontier: what they hold waits."""
        frontier = self.frontier
        return {
            partition
            for partition, held in self.partitions.items()
            if held.marker is not None and (frontier is None or held.marker > frontier)
        }

    def held(self) -> int:
        """How many rows are held above the last window."""
        return len(self.rows)

    def ready(self) -> Iterator[Window]:
        """The windows the frontier resolves now, in pieces of at most ``piece`` rows.

        A window is handed over once (its rows leave), whether or not it has rows: an empty
        window still says that everything up to its R is known.
        """
        frontier = self.frontier
        if frontier is None or (self.after is not None and frontier <= self.after):
            return
        resolved = sorted(r for r in self.rows.values() if r[0] <= frontier)  # commit order
        rows = []
        for time, table, key, value, partition, offset in resolved:
            del self.rows[(table, key, time)]
            self.partitions[partition].gone.add(offset)
            updated = tuple.__new__(Hlc, time)  # an Hlc's parts, checked when it was read
            rows.append(Row(updated, table, key, value, partition, offset, self.reader))
        self.after = frontier
        if not rows:
            yield Window(frontier, ())
            return
        for start in range(0, len(rows), self.piece):
            piece = tuple(rows[start : start + self.piece])
            yield Window(frontier, piece, last=start + self.piece >= len(rows))

    def committable(self) -> dict[Partition, int]:
        """Per partition read from, the offset a restarted consumer may start from.

        Asked once the windows handed over were acknowledged; the restart is told the last
        one's R (``after``).
        """
        out = {}
        for partition, held in self.partitions.items():
            starts = [held.first(), held.marker_at]  # the marker is read again: no wait for one
            found = [offset for offset in starts if offset is not None]
            if found:
                out[partition] = min(found)
            elif held.read_to is not None:
                out[partition] = held.read_to
        return out
