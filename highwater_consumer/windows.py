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

from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from itertools import compress, islice, repeat
from operator import le
from typing import Any, NamedTuple

from schemas.hlc import Hlc

from .decoding import Change

Partition = tuple[str, int]  # an output topic and partition
Reader = Callable[[bytes, bytes], Change]  # a record read whole (decoding.Decoder.change)


class _RowFields(NamedTuple):
    time: int  # the commit time packed into one int, ordered as the HLC (Hlc.packed)
    table: str
    key: bytes  # the record's key, as written (the JSON array or the Avro key record)
    value: bytes | None  # the envelope; None: a tombstone
    partition: Partition
    offset: int
    reader: Reader | None  # how to read the record whole when asked; None: it cannot be


class Row(_RowFields):
    """One output record of a row change; rows compare in commit order (time, table, key).

    A tuple, made at hand-over from the parts a window held (no decoding on the way); the
    record is read whole when :attr:`change` (or ``key_values``, ``after``, ``before``) is
    first asked for, and kept.
    """

    # no __slots__: a row keeps its change, read when asked, in its __dict__

    @classmethod
    def of(  # noqa: PLR0917 - a row's parts
        cls,
        updated: Hlc,
        table: str,
        key: bytes,
        value: bytes | None,
        partition: Partition,
        offset: int,
        reader: Reader | None = None,
    ) -> Row:
        """A row from its parts, its time an :class:`Hlc`."""
        return cls(updated.packed(), table, key, value, partition, offset, reader)

    @property
    def updated(self) -> Hlc:
        """The row's commit time."""
        return Hlc.unpack(self[0])

    @cached_property
    def change(self) -> Change:
        """The row change read whole, values exact."""
        if self.reader is None or self.value is None:
            raise ValueError(f"row {self.partition}@{self.offset} has no reader")
        return self.reader(self.key, self.value)

    def image(self) -> tuple[Any, dict[str, Any] | None]:
        """The key's values and the row after the change, values exact: an applier's need.

        Reads only what that needs when the reader is a decoder's (its ``image``: no time,
        no ``before``), else the change whole.
        """
        change = self.__dict__.get("change")
        if change is None and self.value is not None:
            image = getattr(getattr(self.reader, "__self__", None), "image", None)
            if image is not None:
                return image(self.key, self.value)  # type: ignore[no-any-return]
        change = self.change
        return change.key, change.after

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

    def __repr__(self) -> str:
        return (
            f"Row({self.updated}, {self.table!r}, {self.key!r}, "
            f"{self.partition[0]}/{self.partition[1]}@{self.offset})"
        )


def images(rows: Iterable[Row]) -> list[tuple[Any, dict[str, Any] | None]]:
    """Each row's :meth:`Row.image`, the decoder's ``image`` found once for rows that share it."""
    out = []
    reader: Any = None
    image: Any = None
    for row in rows:
        if row.reader is not reader:
            reader = row.reader
            image = getattr(getattr(reader, "__self__", None), "image", None)
        if image is None or row.value is None or "change" in row.__dict__:
            out.append(row.image())
        else:
            out.append(image(row.key, row.value))
    return out


@dataclass(frozen=True)
class Window:
    """Rows resolved at ``resolved``, in commit order; ``last``: the window's last piece."""

    resolved: Hlc
    rows: tuple[Row, ...]
    last: bool = True


class _Held:
    """One partition: its table, latest marker, where it was read to, and its rows held.

    The rows are four parallel lists of ints and bytes in the order read: a million held
    rows are four lists to the garbage collector, not a million objects it walks. Read in
    time order (as a changefeed writes a partition, replays aside), the rows a window takes
    are a prefix of them, found by bisection: a window costs its own rows, not those held.
    """

    __slots__ = (
        "by_offset",
        "by_time",
        "keys",
        "marker",
        "marker_at",
        "offsets",
        "read_to",
        "table",
        "times",
        "values",
    )

    def __init__(self, table: str) -> None:
        self.table = table
        self.marker: Hlc | None = None
        self.marker_at: int | None = None  # the offset of the record that said it
        self.read_to = 0  # just past the last record read (0: none read)
        self.times: list[int] = []  # packed
        self.keys: list[bytes] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.by_time = True  # the held rows' times ascend
        self.by_offset = True  # and their offsets (false once a partition is read again)

    def add(self, offset: int, time: int, key: bytes, value: bytes | None) -> None:
        times = self.times
        if times:
            if time < times[-1]:
                self.by_time = False
            if offset < self.offsets[-1]:
                self.by_offset = False
        times.append(time)
        self.keys.append(key)
        self.values.append(value)
        self.offsets.append(offset)

    def first(self) -> int | None:
        """The first offset of a row held, or None."""
        if not self.offsets:
            return None
        return self.offsets[0] if self.by_offset else min(self.offsets)

    def take(self, upto: int, reader: Reader | None, partition: Partition) -> Iterator[Row]:
        """Hands over the rows held at or below ``upto`` (packed), keeping the others."""
        times = self.times
        parts = (self.times, self.keys, self.values, self.offsets)
        cut = bisect_right(times, upto) if self.by_time else None
        if cut == len(times):  # the common case: all of them
            gone: list[list[Any]] = list(parts)
            self.times, self.keys, self.values, self.offsets = [], [], [], []
            self.by_time = self.by_offset = True
        elif cut is not None:
            gone = [part[:cut] for part in parts]
            for part in parts:
                del part[:cut]
        else:  # replays of older rows among them: row by row
            go = [t <= upto for t in times]
            stay = [not g for g in go]
            gone = [list(compress(part, go)) for part in parts]
            kept: list[list[Any]] = [list(compress(part, stay)) for part in parts]
            self.times, self.keys, self.values, self.offsets = kept
            self.by_time = all(map(le, self.times, islice(self.times, 1, None)))
        times, keys, values, offsets = gone
        return map(
            tuple.__new__,  # Row._make without its Python frame
            repeat(Row),
            zip(
                times,
                repeat(self.table),
                keys,
                values,
                repeat(partition),
                offsets,
                repeat(reader),
                strict=False,  # repeat() is endless; the lists are one length
            ),
        )


class Windows:
    """Assembles resolved windows from the records of every partition of a changefeed's output.

    ``partitions``: all of them, each with its table (a partition without a marker holds the
    frontier back, as it must); ``after``: the last window acknowledged before (a restart),
    rows at or below it are replays; ``piece``: the most rows handed over at once;
    ``reader``: how the rows handed over read their record whole (:attr:`Row.change`).

    A row is held as its parts (:class:`_Held`); replays of a row held are dropped when its
    window is handed over, where the window's rows are sorted anyway.
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
        self.partitions = {p: _Held(table) for p, table in partitions.items()}
        if not self.partitions:
            raise ValueError("a changefeed's output has at least one partition")
        self.after = after  # the last window handed over (whole)
        self._after = -1 if after is None else after.packed()
        self.piece = piece
        self.reader = reader
        self.duplicates = 0

    def add(self, partition: Partition, offset: int, time: int, key: bytes, value: bytes) -> None:
        """A row change read on ``partition`` at ``offset``: its packed time, key and value."""
        held = self.partitions.get(partition)  # _read, inlined: every record comes here
        if held is None:
            raise KeyError(f"{partition[0]}/{partition[1]} is not a partition of this output")
        if held.read_to <= offset:
            held.read_to = offset + 1
        if time <= self._after:
            self.duplicates += 1
            return
        held.add(offset, time, key, value)

    def marker(self, partition: Partition, offset: int, resolved: Hlc) -> None:
        """A resolved marker read on ``partition`` at ``offset``."""
        held = self._read(partition, offset)
        if held.marker is None or resolved > held.marker:
            held.marker, held.marker_at = resolved, offset

    def skipped(self, partition: Partition, offset: int) -> None:
        """A record read on ``partition`` at ``offset`` that is neither (a bad one, reported)."""
        self._read(partition, offset)

    def _read(self, partition: Partition, offset: int) -> _Held:
        """The partition's state, read now to just past ``offset``."""
        held = self.partitions.get(partition)
        if held is None:
            raise KeyError(f"{partition[0]}/{partition[1]} is not a partition of this output")
        held.read_to = max(held.read_to, offset + 1)
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
        """How many rows are held above the last window (replays of a held row included)."""
        return sum(len(held.times) for held in self.partitions.values())

    def ready(self) -> Iterator[Window]:
        """The windows the frontier resolves now, in pieces of at most ``piece`` rows.

        A window is handed over once (its rows leave), whether or not it has rows: an empty
        window still says that everything up to its R is known.
        """
        frontier = self.frontier
        if frontier is None or (self.after is not None and frontier <= self.after):
            return
        upto = frontier.packed()
        resolved: list[Row] = []
        for partition, held in self.partitions.items():
            resolved.extend(held.take(upto, self.reader, partition))
        resolved.sort()  # commit order: time, table, key (then where read: replays adjoin)
        rows = _once(resolved)
        self.duplicates += len(resolved) - len(rows)
        self.after, self._after = frontier, upto
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
            # the first row still held; the marker is read again: no wait for the next one
            starts = [held.first(), held.marker_at]
            found = [offset for offset in starts if offset is not None]
            if found:
                out[partition] = min(found)
            elif held.read_to:
                out[partition] = held.read_to
        return out


def _once(rows: list[Row]) -> list[Row]:
    """Sorted rows without the replays: each (time, table, key) once."""
    out = []
    last: Any = None
    for row in rows:
        if last is None or row[0] != last[0] or row[2] != last[2] or row[1] != last[1]:
            out.append(row)
            last = row
    return out
