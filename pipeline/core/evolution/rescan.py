"""``schema_change_policy: backfill``: a table emitted again at its schema change (pure).

Once a change evolved a table's output schema under ``backfill`` (``evolution.py``), the
table is scanned again from its **source topic** with the initial scan's machinery (no
database access) as it stood just before the change's first row, at T_b, the time just below
that row's commit time: every live key's latest version at or below T_b, emitted with
``updated`` = T_b in the new schema (not at the row's own time: a consumer keeping one row
per key and time would take the row of the change for a duplicate). A column the version's
source record predates takes its default as the source's schema of the change declares it
(Debezium's ``default``: PostgreSQL fills the rows already there with it), else null.

The scan runs inside the batch that met the change, before that batch writes the rows at
and after it (its rests): a consumer sees the whole table at T_c before any later change of
it, and no marker reaches T_c before the scan is done (the partition of the change holds the
high-water mark below it). Each partition of the table is scanned up to where the batch left
it: the row of the change, or the batch's end. A key with a version after T_b in that range
(on a partition the change did not stop, a delete or a row written before the change reached
it) is left out: the stream wrote that later version already, and the key's row at T_b after
it would undo it. Under ``backfill`` the batch's rests run one at a time
(:meth:`~.evolution.SchemaEvolution.settle`), so the rows before a change are written before
its table is scanned.

The scan is recorded in the checkpoint record like any (``backfill``, with ``change``): a run
killed during it scans the rest first on restart, at T_c, then the stream replays the batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from schemas.errors import RecordRef
from schemas.hlc import Hlc

from ..batch import BatchResult
from ..ledger import Backfill, Frontier, SourcePartition


@dataclass(frozen=True)
class Rescan:
    """A table to emit again at a schema change: where the change is, its time, the defaults."""

    change: RecordRef  # the first row of the new shape
    time: Hlc  # just below its commit time: the rows' ``updated``
    defaults: Mapping[str, Any]  # column -> its default, as the source writes its values

    @property
    def topic(self) -> str:
        """The source topic of the table."""
        return self.change.topic


def defaults_of(columns: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The columns' defaults a source schema declares (Connect's ``default``), by name."""
    return {name: c["default"] for name, c in columns.items() if c.get("default") is not None}


def rescan_backfill(
    rescan: Rescan,
    partitions: list[SourcePartition],
    low: Mapping[SourcePartition, int],
    result: BatchResult,
    frontier: Frontier,
) -> Backfill:
    """The scan of ``rescan``'s table: each partition from ``low`` to where the batch left it.

    ``partitions``: every source partition (the table's are scanned); ``low``: the first
    offset each of the table's holds; ``result``: the batch so far (its rests not run); a
    partition it did not read ends where the frontier has it.
    """
    progress = frontier.progress()
    seen = {s.partition: s for s in result.partitions}
    rests = {r.partition: r.start for r in result.rests}
    ends: dict[SourcePartition, int] = {}
    for sp in partitions:
        if sp.topic != rescan.topic:
            continue
        if sp in rests:
            ends[sp] = rests[sp]
        elif sp in seen:
            ends[sp] = seen[sp].next_offset
        else:
            ends[sp] = max(progress[sp].offset or 0, low[sp])
    starts = {sp: min(low[sp], end) for sp, end in ends.items()}
    return Backfill.of(starts, ends, time=rescan.time, change=rescan.change)
