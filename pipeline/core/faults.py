"""Crash points for the crash-safety tests (a testing knob, off unless asked for).

``HIGHWATER_CRASH_AT=<point>:<n>`` makes the job kill its own process group with SIGKILL (the
spark-submit JVM and this driver: what ``kill -9`` of the job does) the n-th time it reaches
``point``. Just before, it appends ``crash point <point>:<n>: SIGKILL`` to the file named by
``HIGHWATER_CRASH_LOG`` if set (stderr would go through the JVM, which dies with it), so a
test can show where the kill landed; ``highwater run`` then exits with 137 (128 + SIGKILL):

* ``during_write``: a moment after a batch's write to Kafka has started;
* ``after_write``: the batch's records are acknowledged, its checkpoint not yet written;
* ``before_marker``: a checkpoint covering a marker is durable, the marker not yet sent;
* ``after_marker``: right after a resolved marker was broadcast;
* ``after_chunk``: an initial-scan chunk was recorded as done (others are in flight);
* ``chunk_written``: an initial-scan chunk's rows are acknowledged, not yet recorded.

Executors have theirs (``Pieces.java``, ``HIGHWATER_TASK_FAULT``): a task failed after its
transaction's commit, or a commit held back until the coordinator aborted the transaction.
"""

from __future__ import annotations

import os
import signal
import threading

_COUNTS: dict[str, int] = {}
POINTS = (
    "during_write",
    "after_write",
    "before_marker",
    "after_marker",
    "after_chunk",
    "chunk_written",
)


def _target() -> tuple[str, int] | None:
    spec = os.environ.get("HIGHWATER_CRASH_AT")
    if not spec:
        return None
    point, _, nth = spec.partition(":")
    if point not in POINTS:
        raise ValueError(f"HIGHWATER_CRASH_AT: unknown point {point!r} (known: {POINTS})")
    return point, int(nth or 1)


def _die(point: str, nth: int) -> None:
    record = os.environ.get("HIGHWATER_CRASH_LOG")
    if record:
        with open(record, "a", encoding="utf-8") as log:
            log.write(f"crash point {point}:{nth}: SIGKILL\n")
    os.killpg(os.getpgid(0), signal.SIGKILL)


def reached(point: str) -> None:
    """Crash here if the environment asks for it."""
    target = _target()
    if target is None or target[0] != point:
        return
    _COUNTS[point] = _COUNTS.get(point, 0) + 1
    if _COUNTS[point] != target[1]:
        return
    if point == "during_write":
        threading.Timer(0.3, _die, (point, target[1])).start()  # while the executors write
    else:
        _die(point, target[1])
