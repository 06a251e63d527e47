"""Where a changefeed stands: its frontier, statement time and unfinished initial scan.

The coordinator moves a :class:`Position` forward; the checkpoint record keeps it
(:meth:`Position.checkpoint`), and a restart starts from what the record kept. What a restart
needs of the sources (:meth:`Position.needed`) is what the changefeed's safepoint protects
and what a resume checks is still there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from pipeline.config import ChangefeedConfig
from schemas.hlc import ZERO, Hlc

from ..ledger import Backfill, Checkpoint, Frontier, SourcePartition
from ..resolved import InStream, Resolver


@dataclass
class Position:
    """A changefeed's progress; owned by the coordinator on the driver."""

    frontier: Frontier
    statement_time: Hlc | None = None
    backfill: Backfill | None = None  # an initial scan still to run (or finish)
    resolver: Resolver = field(default_factory=InStream)  # what resolves its partitions
    # exactly once: the ranges a killed run committed after its checkpoint (rows, or scan
    # chunks), which this run does not read again (from None: the partition's start)
    skipped: list[tuple[SourcePartition, int | None, int]] = field(default_factory=list)

    @classmethod
    def restored(cls, checkpoint: Checkpoint, partitions: list[SourcePartition]) -> Position:
        """The position a checkpoint record kept, over the sources' partitions now."""
        return cls(
            Frontier.restore(checkpoint.progress(partitions)),
            checkpoint.statement_time,
            None if checkpoint.backfill is None else Backfill.from_record(checkpoint.backfill),
        )

    def restart_time(self) -> Hlc:
        """Where a restart would begin: the high-water mark, time zero while scanning."""
        return ZERO if self.backfill is not None else self.frontier.high_water()

    def needed(self) -> dict[SourcePartition, tuple[int, str]]:
        """Per partition, the lowest source offset a restart reads, and what it is read for.

        That is the partition's next offset, or, while the initial scan is unfinished, the
        start of its pending chunk.
        """
        needed = {
            sp: (p.offset, f"after resolved time {p.resolved}")
            for sp, p in self.frontier.progress().items()
            if p.offset is not None
        }
        for chunk in [] if self.backfill is None else self.backfill.pending():
            if chunk.start < needed.get(chunk.partition, (chunk.start + 1, ""))[0]:
                needed[chunk.partition] = (chunk.start, "of the unfinished initial scan")
        return needed

    def needed_offsets(self) -> dict[SourcePartition, int]:
        """:meth:`needed` without the reasons (what the safepoint records)."""
        return {sp: offset for sp, (offset, _) in self.needed().items()}

    def starting_offsets(self) -> str:
        """Spark's ``startingOffsets``: each partition where the frontier left it."""
        offsets: dict[str, dict[str, int]] = {}
        for sp, progress in sorted(self.frontier.progress().items()):
            offsets.setdefault(sp.topic, {})[str(sp.partition)] = (
                -2 if progress.offset is None else progress.offset
            )
        return json.dumps(offsets)

    def checkpoint(
        self,
        config: ChangefeedConfig,
        last_marker: Hlc | None,
        marker_sent: Hlc | None = None,
    ) -> Checkpoint:
        """The checkpoint record of this position, for the changefeed ``config`` describes."""
        return Checkpoint.of(
            config.changefeed_id,
            self.frontier,
            last_marker=last_marker,
            marker_sent=marker_sent,
            statement_time=self.statement_time,
            backfill=None if self.backfill is None else self.backfill.to_record(),
            config_fingerprint=config.fingerprint,
            topics=tuple(config.routes),
            transactions=self.resolver.records(),
            appeared=self.resolver.appeared(),
            listed=[database.identity for database in config.databases],
        )
