"""Where a run stands and what it holds, with the pure rule of when it says so.

The :class:`Position` the coordinator moves forward (its frontier, statement time,
unfinished initial scan and what resolves its partitions), the exactly-once :class:`Claim`
of the source partitions with its generation (``claim``), the safepoints that keep what a
restart needs from GC (``safepoints``), and the :class:`Policy` that decides when to write a
checkpoint and which resolved marker may go out (``policy``: plain values in, decisions out,
property-tested on its own).
"""

from __future__ import annotations

from .claim import TAKEN, Claim
from .policy import Cadence, Decision, HighWaterWatch, Policy
from .position import Position
from .safepoints import ChangefeedSafepoint, SafepointRegistry, retention_warnings

__all__ = [
    "TAKEN",
    "Cadence",
    "ChangefeedSafepoint",
    "Claim",
    "Decision",
    "HighWaterWatch",
    "Policy",
    "Position",
    "SafepointRegistry",
    "retention_warnings",
]
