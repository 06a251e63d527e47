"""The frontier: how far each source partition has been read and resolved.

For every partition of every source topic it keeps the highest resolved time seen and the
next offset to read (and, for sources that give one, the highest source position read: what
tells a re-sent change from a new one, ``batch/loop.py``). The **high-water mark** is the lowest
resolved time over all of them: every change at or below it has been emitted. Partitions
above the high-water mark are the *leading* ones; when a partition stalls they pull ahead,
and the checkpoint keeps their progress so a restart does not replay them (seed ``000_…``).

Pure Python, owned by the Spark driver (the coordinator).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from schemas.hlc import ZERO, Hlc

log = logging.getLogger(__name__)


@dataclass(frozen=True, order=True)
class SourcePartition:
    """One partition of one source topic."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}/{self.partition}"


@dataclass(frozen=True)
class Progress:
    """A partition's state: the next offset to read (None: from the start) and its resolved time.

    ``position``: the highest source position read before ``offset`` (Debezium), if any.
    """

    offset: int | None
    resolved: Hlc
    position: tuple[int, ...] | None = None


class Frontier:
    """Per-partition progress and the high-water mark over all of it."""

    def __init__(self, partitions: Iterable[SourcePartition], start: Hlc = ZERO) -> None:
        self._progress: dict[SourcePartition, Progress] = {
            sp: Progress(None, start) for sp in partitions
        }
        if not self._progress:
            raise ValueError("a frontier needs at least one source partition")
        self._held: Hlc | None = None  # the high-water mark goes no higher (hold())

    @classmethod
    def restore(cls, progress: Mapping[SourcePartition, Progress]) -> Frontier:
        """A frontier with the given per-partition progress."""
        frontier = cls(progress)
        frontier._progress.update(progress)
        return frontier

    def forward(
        self,
        sp: SourcePartition,
        *,
        resolved: Hlc | None,
        next_offset: int,
        position: tuple[int, ...] | None = None,
    ) -> None:
        """Record that ``sp`` was read up to ``next_offset`` and resolved up to ``resolved``.

        Neither ever moves backwards: an old marker seen again (an upstream replay) changes
        nothing. A partition added to a source topic since enters at the high-water mark
        (where a restart would put it), so it never drags the high-water mark back.
        """
        old = self._progress.get(sp)
        if old is None:
            old = Progress(None, self.high_water())
            log.warning(
                "source partition %s appeared: it enters at the high-water mark %s",
                sp,
                old.resolved,
            )
        new_resolved = old.resolved if resolved is None else max(old.resolved, resolved)
        new_offset = next_offset if old.offset is None else max(old.offset, next_offset)
        if old.position is not None and (position is None or position < old.position):
            position = old.position
        self._progress[sp] = Progress(new_offset, new_resolved, position)

    def resolve(self, sp: SourcePartition, resolved: Hlc) -> None:
        """Raise ``sp``'s resolved time, learnt from elsewhere than its records; offset kept.

        Debezium's partitions are resolved by its transactions (``transaction_feed.py``).
        """
        old = self._progress[sp]
        if resolved > old.resolved:
            self._progress[sp] = Progress(old.offset, resolved, old.position)

    def read_to(self, sp: SourcePartition, position: tuple[int, ...]) -> None:
        """Raise ``sp``'s highest source position read (the initial scan's chunks); offset kept."""
        old = self._progress[sp]
        if old.position is None or position > old.position:
            self._progress[sp] = Progress(old.offset, old.resolved, position)

    def high_water(self) -> Hlc:
        """The lowest resolved time over every partition: all changes at or below it are done."""
        low = min(p.resolved for p in self._progress.values())
        return low if self._held is None else min(low, self._held)

    def hold(self, at: Hlc | None) -> None:
        """The high-water mark goes no higher than ``at`` (None: as high as the partitions go).

        Their own times go on: a source not read yet may hold changes above ``at``
        (``resolved/listed.py``).
        """
        self._held = at

    def leading(self) -> dict[SourcePartition, Hlc]:
        """Partitions resolved above the high-water mark, with their resolved times."""
        hw = self.high_water()
        return {sp: p.resolved for sp, p in self._progress.items() if p.resolved > hw}

    def progress(self) -> dict[SourcePartition, Progress]:
        """A copy of every partition's progress."""
        return dict(self._progress)

    def positions(self) -> dict[tuple[str, int], tuple[int, ...]]:
        """The partitions' highest source positions read, where known (for a batch's plan)."""
        return {
            (sp.topic, sp.partition): p.position
            for sp, p in self._progress.items()
            if p.position is not None
        }

    def __getitem__(self, sp: SourcePartition) -> Progress:
        return self._progress[sp]

    def __contains__(self, sp: object) -> bool:
        return sp in self._progress

    def __len__(self) -> int:
        return len(self._progress)
