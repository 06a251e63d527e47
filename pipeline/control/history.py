"""Each changefeed's lag over the last hour, kept by ``highwater server`` (the console's chart).

The job status holds a changefeed's high-water as it is now; a chart needs how it went. The
server samples every changefeed's job status every ``every`` seconds (:meth:`LagHistory.sample`,
run by the app's lifespan) and keeps, per changefeed, the points of the last ``window``: when,
its high-water and its lag then (the sample's wall clock minus the high-water's wall time),
and its state. ``GET /api/v2/changefeeds/{id}/lag`` answers them (``changefeed_api.py``). The
history lives in the server's memory: a restarted server starts a new one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from schemas.errors import HighwaterError

if TYPE_CHECKING:
    from pipeline.core.operators import JobStatus

    from .changefeeds import Changefeed

log = logging.getLogger(__name__)

WINDOW = 3600.0  # seconds of points kept per changefeed
EVERY = 10.0  # seconds between samples


@dataclass(frozen=True)
class LagPoint:
    """A changefeed at one sample: when (epoch seconds), its high-water, lag and state."""

    at: float
    high_water: str | None
    lag_seconds: float | None
    state: str


class LagHistory:
    """The points of the last ``window`` seconds per changefeed, from ``changefeeds()``."""

    def __init__(
        self,
        changefeeds: Callable[[], Mapping[str, Changefeed]],
        *,
        window: float = WINDOW,
        every: float = EVERY,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.changefeeds = changefeeds
        self.window = window
        self.every = every
        self.clock = clock
        self._points: dict[str, deque[LagPoint]] = {}
        self._lock = threading.Lock()

    def sample(self) -> None:
        """One point per changefeed with a job status now; older ones than the window go."""
        try:
            found = self.changefeeds()
        except HighwaterError as exc:  # Kafka away: no point this time, the chart shows a gap
            log.warning("could not read the job statuses for the lag history: %s", exc)
            return
        now = self.clock()
        with self._lock:
            for changefeed_id, changefeed in found.items():
                status = changefeed.status
                if status is None:
                    continue
                self._points.setdefault(changefeed_id, deque()).append(_point(status, now))
            for changefeed_id in [c for c in self._points if c not in found]:
                del self._points[changefeed_id]  # removed: its history with it
            for points in self._points.values():
                while points and points[0].at < now - self.window:
                    points.popleft()

    def points(self, changefeed_id: str) -> list[LagPoint]:
        """The changefeed's points, oldest first (none yet: an empty list)."""
        with self._lock:
            return list(self._points.get(changefeed_id, ()))


def _point(status: JobStatus, now: float) -> LagPoint:
    high_water = status.high_water
    if high_water is None:
        return LagPoint(now, None, None, status.state)
    lag = max(0.0, now - high_water.wall / 1e9)
    return LagPoint(now, str(high_water), round(lag, 3), status.state)
