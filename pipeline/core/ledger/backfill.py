"""The initial scan's bookkeeping: its chunks, which are done, and its progress (pure).

A **chunk** is one source partition's range ``[first offset, end offset at the statement
time)``: every version of a key lives on one partition, so a chunk holds all its keys'
snapshots need. :class:`Backfill` is the unfinished scan as the checkpoint record keeps it,
so a restart skips finished chunks; :class:`ScanProgress` is what the logs, the job status
and ``highwater changefeed query`` show.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from schemas.errors import CheckpointError, RecordError, RecordRef
from schemas.hlc import Hlc

from .checkpoint import numbers_to_ranges, ranges_to_numbers
from .frontier import SourcePartition
from .records import BackfillRecord, BackfillTopic, ScanProgressRecord, read_part


@dataclass(frozen=True)
class Chunk:
    """A source partition's range ``[start, end)``: a unit of the scan."""

    partition: SourcePartition
    start: int
    end: int

    @property
    def records(self) -> int:
        """How many source records the range holds."""
        return self.end - self.start


@dataclass(frozen=True)
class Backfill:
    """An unfinished scan: its chunks, which are done, and the rows emitted so far.

    In the checkpoint record (``backfill``) as ``{"partitions": {topic: {"from": [...],
    "to": [...], "done": "0-3,7"}}, "rows": n, "time": null}``: finished partitions merged
    into ranges, so the record stays small however many partitions finish. ``time`` is the
    snapshot's time when it is not the statement time: the scan of tables an update added, or
    of a table emitted again at its schema change (``schema_change_policy: backfill``, see
    ``rescan.py``), whose first row of the new shape ``change`` names (``[topic, partition,
    offset]``).
    """

    chunks: Mapping[SourcePartition, Chunk]
    done: frozenset[SourcePartition] = frozenset()
    rows: int = 0
    time: Hlc | None = None  # None: the changefeed's first scan, at its statement time
    change: RecordRef | None = None  # the schema change the table is emitted again at

    @classmethod
    def of(
        cls,
        start_offsets: Mapping[SourcePartition, int],
        end_offsets: Mapping[SourcePartition, int],
        time: Hlc | None = None,
        change: RecordRef | None = None,
    ) -> Backfill:
        """A new scan of every partition's range; empty ranges are done already."""
        chunks = {sp: Chunk(sp, start_offsets[sp], end) for sp, end in end_offsets.items()}
        done = frozenset(sp for sp, c in chunks.items() if c.records <= 0)
        return cls(chunks, done, time=time, change=change)

    def pending(self) -> list[Chunk]:
        """Chunks still to scan, the largest first (the run ends sooner)."""
        left = [c for sp, c in self.chunks.items() if sp not in self.done]
        return sorted(left, key=lambda c: (-c.records, c.partition))

    def finished(self, chunk: Chunk, rows: int) -> Backfill:
        """The scan with ``chunk`` done."""
        return replace(self, done=self.done | {chunk.partition}, rows=self.rows + rows)

    def to_record(self) -> dict[str, Any]:
        """The ``backfill`` field of the checkpoint record (:class:`.records.BackfillRecord`)."""
        topics: dict[str, dict[str, Any]] = {}
        for sp in sorted(self.chunks):
            entry = topics.setdefault(sp.topic, {"from": [], "to": [], "done": []})
            if sp.partition != len(entry["from"]):
                raise CheckpointError(f"scan of {sp.topic} does not cover partitions 0..{sp}")
            entry["from"].append(self.chunks[sp].start)
            entry["to"].append(self.chunks[sp].end)
            if sp in self.done:
                entry["done"].append(sp.partition)
        change = self.change
        record = BackfillRecord(
            partitions={
                topic: BackfillTopic(
                    starts=entry["from"], ends=entry["to"], done=numbers_to_ranges(entry["done"])
                )
                for topic, entry in topics.items()
            },
            rows=self.rows,
            time=self.time,
            change=None if change is None else (change.topic, change.partition, change.offset),
        )
        return record.model_dump(mode="json")

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Backfill:
        """Read the ``backfill`` field of a checkpoint record."""
        try:
            read = read_part(BackfillRecord, record, "checkpoint's backfill")
            chunks: dict[SourcePartition, Chunk] = {}
            done: set[SourcePartition] = set()
            for topic, entry in read.partitions.items():
                for p, (start, end) in enumerate(zip(entry.starts, entry.ends, strict=True)):
                    chunks[SourcePartition(topic, p)] = Chunk(SourcePartition(topic, p), start, end)
                done.update(SourcePartition(topic, p) for p in ranges_to_numbers(entry.done))
            change = read.change
            return cls(
                chunks,
                frozenset(done),
                read.rows,
                read.time,
                None if change is None else RecordRef(*change),
            )
        except (RecordError, ValueError) as exc:
            raise CheckpointError(f"unreadable backfill in the checkpoint record: {exc}") from exc


@dataclass
class ScanProgress:
    """How far the scan is: for logs, the job status and the CLI's progress bar."""

    chunks_total: int
    chunks_done: int
    records_total: int
    records_done: int
    rows: int
    started: float = field(default_factory=time.monotonic)
    records_at_start: int = 0  # done before this run (a resumed scan)
    rows_at_start: int = 0

    @classmethod
    def of(cls, backfill: Backfill) -> ScanProgress:
        """The progress of ``backfill`` as it stands (a resumed scan counts from here)."""
        done = sum(backfill.chunks[sp].records for sp in backfill.done)
        return cls(
            chunks_total=len(backfill.chunks),
            chunks_done=len(backfill.done),
            records_total=sum(c.records for c in backfill.chunks.values()),
            records_done=done,
            rows=backfill.rows,
            records_at_start=done,
            rows_at_start=backfill.rows,
        )

    def add(self, chunk: Chunk, rows: int) -> None:
        """Count a finished chunk."""
        self.chunks_done += 1
        self.records_done += chunk.records
        self.rows += rows

    def to_json(self, now: float | None = None) -> dict[str, Any]:
        """The numbers the job status carries."""
        elapsed = max((now or time.monotonic()) - self.started, 1e-9)
        rate = (self.rows - self.rows_at_start) / elapsed
        scanned = self.records_done - self.records_at_start
        eta = (self.records_total - self.records_done) * elapsed / scanned if scanned else None
        return ScanProgressRecord(
            chunks_done=self.chunks_done,
            chunks_total=self.chunks_total,
            records_done=self.records_done,
            records_total=self.records_total,
            rows=self.rows,
            rows_per_second=round(rate, 1),
            eta_seconds=None if eta is None else round(eta, 1),
        ).model_dump(mode="json")


def progress_line(progress: Mapping[str, Any], width: int = 30) -> str:
    """``[#######-------]  42% 5/12 chunks, 1,200,000/2,800,000 records, 400,000 rows, …``."""
    total = progress["records_total"] or 1
    fraction = min(1.0, progress["records_done"] / total)
    filled = round(fraction * width)
    eta = progress.get("eta_seconds")
    return (
        f"[{'#' * filled}{'-' * (width - filled)}] {fraction:4.0%} "
        f"{progress['chunks_done']}/{progress['chunks_total']} chunks, "
        f"{progress['records_done']:,}/{progress['records_total']:,} records, "
        f"{progress['rows']:,} rows, {progress['rows_per_second']:,.0f} rows/s, "
        f"ETA {'?' if eta is None else f'{eta:.0f}s'}"
    )
