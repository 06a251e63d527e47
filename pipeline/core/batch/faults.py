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
* ``chunk_written``: an initial-scan chunk's rows are acknowledged, not yet recorded;
* ``table_listed``: a listing of a whole TiCDC schema's topics met a table created since
  (``resolved/listed.py``), before any record names it.

Under ``delivery: exactly_once`` two more are inside a task's write (its source partitions'
rows of a batch, or a scan chunk, in one Kafka transaction with their progress records),
reached by the executor in Java (``CrashPoints.java``, called from ``Pieces``)
and counted per JVM across tasks; this module accepts them and never reaches them:

* ``in_transaction``: the piece's rows and its progress record were sent, flushed and
  acknowledged (they are on the broker, uncommitted), its commit not yet asked for;
* ``piece_committed``: its transaction committed and was acknowledged, the task has not
  reported to the driver, so no checkpoint covers it.

They kill the same process group with the same record: in local mode the executor is the
spark-submit JVM, the group's leader (an executor elsewhere ignores them). Under at-least-once
no piece has a transaction, so they are never reached and the run goes on: the nearest driver
points are ``during_write`` (inside the write) and ``after_write``.

Executors also fail single tasks (``TaskFaults.java``, ``HIGHWATER_TASK_FAULT``): a task failed
after its transaction's commit, or a commit held back until the coordinator aborted the
transaction; Spark runs the task again and the job goes on.
"""

from __future__ import annotations

import os
import signal
import threading

_COUNTS: dict[str, int] = {}
# the executor's (CrashPoints.java, from Pieces.end): accepted here, reached in Java only
JVM_POINTS = ("in_transaction", "piece_committed")
POINTS = (
    "during_write",
    "after_write",
    "before_marker",
    "after_marker",
    "after_chunk",
    "chunk_written",
    "table_listed",
    *JVM_POINTS,
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
    """Crash here if the environment asks for it (a point of the JVM's: never here)."""
    target = _target()
    if target is None or target[0] != point or point in JVM_POINTS:
        return
    _COUNTS[point] = _COUNTS.get(point, 0) + 1
    if _COUNTS[point] != target[1]:
        return
    if point == "during_write":
        threading.Timer(0.3, _die, (point, target[1])).start()  # while the executors write
    else:
        _die(point, target[1])
