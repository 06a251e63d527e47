"""What operators see of a run, and what they ask of it.

The job status (``status``), the Prometheus metrics (``metrics``) and the lagging source
partitions (``lagging``), kept by the run's :class:`Observers`, which decide nothing; the
spec operators write beside the job status in the jobs topic, with the run's admission, pause
and stop (``lifecycle``); and what a changed config may change of an existing changefeed
(``update``, pure).
"""

from __future__ import annotations

from .lifecycle import Admission, SpecStore, StopRequest
from .observers import Observers
from .status import JobStatus, StatusPublisher
from .update import check_update, identified

__all__ = [
    "Admission",
    "JobStatus",
    "Observers",
    "SpecStore",
    "StatusPublisher",
    "StopRequest",
    "check_update",
    "identified",
]
