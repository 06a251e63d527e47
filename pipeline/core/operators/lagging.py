"""Lag that speaks: partitions lagging by more than a threshold, and a high-water that is stuck.

``lagging_threshold`` (the changefeed's option, CockroachDB's ``lagging_ranges_threshold`` its
model; default 3 minutes, 0: off). Once a second the coordinator hands over the frontier
(:meth:`Lagging.look`): a partition whose resolved time is older than the threshold is **lagging**;
one that has resolved nothing yet (a new changefeed's, before its source's first resolved time)
counts from the run's start, not from 1970. Each partition that starts or stops lagging is logged
once, by name, with how far behind it is and whether it is the one holding the high-water back (the
lowest); the count is the metric ``highwater_lagging_partitions``, and the job status's warnings
name each one, so ``highwater changefeed`` and Prometheus users see the same warning.

``stuck_threshold`` (default 10 minutes, 0: off): the changefeed is **stuck** when its
high-water has not moved for longer while its sources kept sending records (:class:`Stuck`). A
quiet source lags (nothing resolves it) but is not stuck; a partition held back upstream
while the others flow, or a transaction that never completes, is both. Logged once when it
begins, naming the partition holding the high-water back, and once when it moves again; the
metric ``highwater_stuck`` (1 or 0) and a job status warning beginning ``stuck:``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from schemas.hlc import Hlc

    from ..ledger import Frontier, SourcePartition

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Lag:
    """A lagging source partition: its resolved time, and how far behind now it is.

    ``holds_high_water``: its resolved time is the lowest, the one the high-water is.
    """

    partition: SourcePartition
    resolved: Hlc
    seconds: float
    holds_high_water: bool

    def warning(self, threshold: timedelta) -> str:
        """The job status's line for it."""
        holds = "; it holds the high-water back" if self.holds_high_water else ""
        behind = (
            f"nothing resolved in the {_span(self.seconds)} since the run started"
            if self.resolved.wall == 0
            else f"resolved {self.resolved}, {_span(self.seconds)} behind now"
        )
        return (
            f"source partition {self.partition} is lagging: {behind} (lagging_threshold "
            f"{_span(threshold.total_seconds())}){holds}"
        )


class Lagging:
    """The lagging partitions as of the last look, and what changed since the one before."""

    def __init__(self, threshold: timedelta, started_nanos: int | None = None) -> None:
        self.threshold = threshold
        # what a partition that resolved nothing yet counts from: the run's start
        self.started = 0
        self.start(started_nanos)
        self.found: list[Lag] = []

    def start(self, now_nanos: int | None = None) -> None:
        """The run starts now: a partition that resolved nothing yet lags from here."""
        self.started = time.time_ns() if now_nanos is None else now_nanos

    def look(self, frontier: Frontier, now_nanos: int | None = None) -> bool:
        """Find the lagging partitions now; True when the set (or the one holding) changed."""
        if self.threshold <= timedelta(0):
            return False
        progress = frontier.progress()
        if not progress:
            return False
        now = time.time_ns() if now_nanos is None else now_nanos
        bound = self.threshold.total_seconds()
        low = frontier.high_water()
        found = [
            Lag(sp, p.resolved, max(0, now - since) / 1e9, p.resolved == low)
            for sp, p in sorted(progress.items(), key=lambda item: str(item[0]))
            if (now - (since := p.resolved.wall or self.started)) / 1e9 > bound
        ]
        before = {(lag.partition, lag.holds_high_water) for lag in self.found}
        after = {(lag.partition, lag.holds_high_water) for lag in found}
        if before == after:
            self.found = found
            return False
        was = {lag.partition for lag in self.found}
        for lag in found:
            if lag.partition not in was:
                log.warning("%s", lag.warning(self.threshold))
        for partition in was - {lag.partition for lag in found}:
            log.info("source partition %s caught up (lagging_threshold)", partition)
        self.found = found
        return True

    def warnings(self) -> list[str]:
        """One line per lagging partition (the job status's warnings)."""
        return [lag.warning(self.threshold) for lag in self.found]


class Stuck:
    """Whether the high-water stood still past ``threshold`` while records kept coming."""

    def __init__(self, threshold: timedelta) -> None:
        self.threshold = threshold
        self._high_water: Hlc | None = None
        self._since = 0.0  # wall seconds when the high-water last moved (or was first seen)
        self._records = 0  # source records read since then
        self.warning: str | None = None  # the job status's line while stuck

    def read(self, count: int) -> None:
        """A batch read ``count`` records from the sources."""
        self._records += count

    def look(self, frontier: Frontier, now: float | None = None) -> bool:
        """Look at the high-water now (wall seconds); True when stuck began or ended."""
        if self.threshold <= timedelta(0) or not frontier.progress():
            return False
        at = time.time() if now is None else now
        high_water = frontier.high_water()
        if self._high_water is None or high_water > self._high_water:
            self._high_water, self._since, self._records = high_water, at, 0
            return self._clear()
        standing = at - self._since
        if standing <= self.threshold.total_seconds() or self._records == 0:
            return self._clear()
        holding = sorted(
            str(sp) for sp, p in frontier.progress().items() if p.resolved == high_water
        )
        more = f" and {len(holding) - 5} more" if len(holding) > 5 else ""
        named = ", ".join(holding[:5]) + more
        warning = (
            f"stuck: the high-water {high_water} has not moved for {_span(standing)} while "
            f"{self._records} records came from the sources (stuck_threshold "
            f"{_span(self.threshold.total_seconds())}); held back by source partition "
            f"{named}"
        )
        began = self.warning is None
        if began:
            log.warning("changefeed %s", warning)
        self.warning = warning
        return began

    def _clear(self) -> bool:
        if self.warning is None:
            return False
        log.info("the high-water moves again: not stuck any more (stuck_threshold)")
        self.warning = None
        return True


def _span(seconds: float) -> str:
    """``4m12s``, ``1h3m``, ``45s``: how an operator reads a lag."""
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"
