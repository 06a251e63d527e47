"""Each changefeed's lag over the last hour, kept by ``highwater server`` (the console's chart).

The job status holds a changefeed's high-water as it is now; a chart needs how it went. The
server samples every changefeed's job status every ``every`` seconds (:meth:`LagHistory.sample`,
run by the app's lifespan) and keeps, per changefeed, the points of the last ``window``: when,
its high-water and its lag then (the sample's wall clock minus the high-water's wall time),
its state and rows/s (the rows its run wrote between the last two job statuses seen, over
their time apart). ``GET /api/v2/changefeeds/{id}/lag`` answers them (``changefeed_api.py``).
The same sample counts each dead-letter topic (``dead_letters``: one consumer per cluster), so
a console refreshing its list every few seconds costs Kafka nothing more. The history lives
in the server's memory: a restarted server starts a new one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from schemas.errors import HighwaterError

if TYPE_CHECKING:
    from pipeline.core.operators import JobStatus

    from .changefeeds import Changefeed

log = logging.getLogger(__name__)

WINDOW = 3600.0  # seconds of points kept per changefeed
EVERY = 10.0  # seconds between samples
STILL = 60.0  # a job status unchanged for longer: its changefeed wrote no rows meanwhile


@dataclass(frozen=True)
class LagPoint:
    """A changefeed at one sample: when (epoch seconds), its high-water, lag and state."""

    at: float
    high_water: str | None
    lag_seconds: float | None
    state: str
    rows_per_second: float | None = None


class LagHistory:
    """The points of the last ``window`` seconds per changefeed, from ``changefeeds()``."""

    def __init__(
        self,
        changefeeds: Callable[[], Mapping[str, Changefeed]],
        *,
        dead_letters: Callable[[Mapping[str, Changefeed]], Mapping[str, tuple[str, int]]]
        | None = None,
        window: float = WINDOW,
        every: float = EVERY,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.changefeeds = changefeeds
        self.window = window
        self.every = every
        self.clock = clock
        self.dead_letters = dead_letters
        self._points: dict[str, deque[LagPoint]] = {}
        # the last status seen: (its updated_at, rows, the rate found then)
        self._written: dict[str, tuple[str, int, float | None]] = {}
        self._counted: dict[str, tuple[str, int]] = {}  # dead-letter topic, records by offsets
        self._lock = threading.Lock()

    def sample(self) -> None:
        """One point per changefeed with a job status now; older ones than the window go."""
        try:
            found = self.changefeeds()
        except HighwaterError as exc:  # Kafka away: no point this time, the chart shows a gap
            log.warning("could not read the job statuses for the lag history: %s", exc)
            return
        counted = self._count(found)
        now = self.clock()
        with self._lock:
            self._counted = dict(counted)
            for changefeed_id, changefeed in found.items():
                status = changefeed.status
                if status is None:
                    continue
                point = _point(status, now, self._rate(changefeed_id, status, now))
                self._points.setdefault(changefeed_id, deque()).append(point)
            for changefeed_id in [c for c in self._points if c not in found]:
                del self._points[changefeed_id]  # removed: its history with it
                self._written.pop(changefeed_id, None)
            for points in self._points.values():
                while points and points[0].at < now - self.window:
                    points.popleft()

    def points(self, changefeed_id: str) -> list[LagPoint]:
        """The changefeed's points, oldest first (none yet: an empty list)."""
        with self._lock:
            return list(self._points.get(changefeed_id, ()))

    def latest(self, changefeed_id: str) -> LagPoint | None:
        """The changefeed's last point, if any."""
        with self._lock:
            points = self._points.get(changefeed_id)
            return points[-1] if points else None

    def dead_letter_count(self, changefeed_id: str) -> tuple[str, int] | None:
        """Its dead-letter topic and size by offsets at the last sample (None: not counted)."""
        with self._lock:
            return self._counted.get(changefeed_id)

    def _count(self, found: Mapping[str, Changefeed]) -> Mapping[str, tuple[str, int]]:
        if self.dead_letters is None:
            return {}
        try:
            return self.dead_letters(found)
        except HighwaterError as exc:
            log.warning("could not count the dead letters: %s", exc)
            return {}

    def _rate(self, changefeed_id: str, status: JobStatus, now: float) -> float | None:
        """Rows/s between the status seen before and this one.

        The same status again (none written since): the rate as it was while the status is
        younger than :data:`STILL` (a running feed's checkpoints rewrite it sooner), then 0.
        """
        if status.rows is None:
            return None
        before = self._written.get(changefeed_id)
        rate: float | None = None
        if before is not None and before[0] == status.updated_at:
            rate = before[2] if now - _seconds(status.updated_at) < STILL else 0.0
        elif before is not None and status.rows >= before[1]:  # else a new run: counts anew
            seconds = _seconds(status.updated_at) - _seconds(before[0])
            rate = None if seconds <= 0 else round((status.rows - before[1]) / seconds, 1)
        self._written[changefeed_id] = (status.updated_at, status.rows, rate)
        return rate


def _seconds(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339).timestamp()


def _point(status: JobStatus, now: float, rate: float | None) -> LagPoint:
    high_water = status.high_water
    if high_water is None:
        return LagPoint(now, None, None, status.state, rate)
    lag = max(0.0, now - high_water.wall / 1e9)
    return LagPoint(now, str(high_water), round(lag, 3), status.state, rate)
