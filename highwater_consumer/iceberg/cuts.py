"""Consistent cuts: every table of a changefeed read at one resolved time R.

The applier commits **every table for every window**, empty ones included, and each commit's
snapshot summary carries ``highwater.resolved`` (R) and ``highwater.changefeed``. So a table
has a snapshot marked R exactly when it holds every change at or below R and none above, and
a cut at R is **complete** when every table of the changefeed (those whose property
``highwater.changefeed`` names it) has one. A crash between two tables' commits leaves R
incomplete, not wrong: the tables committed hold R, the others their previous R; the
restarted applier finishes R and the cut appears. Nothing else is written (no log beside
the tables that could disagree with them): each table's own history says what it holds,
readable by any Iceberg reader from its ``snapshots`` metadata table.

:func:`complete` is the pure part (histories in, a cut out); :func:`cut` reads them from a
catalog; :class:`Cut` reads a table at its snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from schemas.hlc import Hlc

from ..decoding import ConsumerError
from .catalog import load

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import DataScan, Table

RESOLVED = "highwater.resolved"  # a snapshot summary's R (the HLC text)
CHANGEFEED = "highwater.changefeed"  # a snapshot summary's and a table property's changefeed
COMPACTED = "highwater.compacted"  # a snapshot summary's mark: R's rows again, in fewer files

History = Mapping[Hlc, int]  # a table's R -> its snapshot marked R


class CutError(ConsumerError):
    """No complete cut where one was asked for (which tables lack it, and what they hold)."""

    remedy = (
        "Ask for a resolved time every table holds (`cut()` without `at` gives the latest "
        "complete one), or let the applier finish the window first; an expired cut cannot be "
        "read."
    )


@dataclass(frozen=True)
class Cut:
    """The tables of a changefeed at one resolved time: table -> the snapshot holding R."""

    namespace: str
    resolved: Hlc
    snapshots: Mapping[str, int]

    def scan(self, catalog: Catalog, table: str, **options: Any) -> DataScan:
        """The pyiceberg scan of ``table`` at this cut (``options``: ``row_filter``, …)."""
        loaded = catalog.load_table((self.namespace, table))
        return loaded.scan(snapshot_id=self.snapshots[table], **options)


def applied(table: Table, changefeed: str) -> list[tuple[Hlc, int]]:
    """The (R, snapshot id) of ``changefeed``'s commits to ``table``, oldest first.

    In commit order: by the snapshots' sequence numbers (then their times), not by the
    table's snapshot log, which an expiry may cut short: Apache Iceberg's own catalogs drop
    the log's entries before an expired snapshot (a gap would misdate time travel), though
    the snapshots kept before it are still there (:mod:`.maintenance`).
    """
    out = []
    ordered = sorted(table.snapshots(), key=lambda s: (s.sequence_number or 0, s.timestamp_ms))
    for snapshot in ordered:
        summary = snapshot.summary
        if summary is None or summary.get(CHANGEFEED) != changefeed:
            continue
        resolved = summary.get(RESOLVED)
        if resolved is not None:
            out.append((Hlc.parse(resolved), snapshot.snapshot_id))
    return out


def history(table: Table, changefeed: str) -> dict[Hlc, int]:
    """A table's R -> its snapshot marked R: the latest of R's (a compaction of R's rows).

    Compacting a table commits its R's rows again in fewer files, marked R (and
    ``highwater.compacted``): the cut at R reads that snapshot from then on.
    """
    return dict(applied(table, changefeed))


def complete(namespace: str, histories: Mapping[str, History], at: Hlc | None = None) -> Cut:
    """The cut at ``at`` (None: the latest complete one) from each table's history.

    Raises :class:`CutError` when there is no table, or no R every table holds (or not
    ``at``): it names the tables that lack it and the R each holds last.
    """
    if not histories:
        raise CutError(f"no table of the changefeed in namespace {namespace!r}")
    shared = set.intersection(*(set(h) for h in histories.values()))
    if at is None:
        if not shared:
            raise CutError(f"no complete cut yet: {_holdings(histories)}")
        at = max(shared)
    elif at not in shared:
        lacking = sorted(name for name, h in histories.items() if at not in h)
        raise CutError(
            f"no complete cut at {at}: {', '.join(lacking)} hold no snapshot of it "
            f"(not applied yet, expired, or not a window's R); {_holdings(histories)}"
        )
    return Cut(namespace, at, {name: h[at] for name, h in sorted(histories.items())})


def _holdings(histories: Mapping[str, History]) -> str:
    last = {name: (str(max(h)) if h else "nothing") for name, h in sorted(histories.items())}
    return "last applied: " + ", ".join(f"{name} {r}" for name, r in last.items())


def tables_of(catalog: Catalog, namespace: str, changefeed: str) -> dict[str, Table]:
    """The tables in ``namespace`` whose property ``highwater.changefeed`` is ``changefeed``."""
    out = {}
    for identifier in catalog.list_tables(namespace):
        table = catalog.load_table(identifier)
        if table.properties.get(CHANGEFEED) == changefeed:
            out[identifier[-1]] = table
    return out


def cut(
    catalog: Catalog | Mapping[str, str],
    namespace: str,
    changefeed: str,
    at: Hlc | str | None = None,
) -> Cut:
    """The changefeed's tables at ``at`` (an R a window ended at), or the latest complete cut.

    ``catalog``: a pyiceberg catalog or its properties (:func:`.catalog.load`).

    Read each table at it with :meth:`Cut.scan`, or with any Iceberg reader by its snapshot
    id (Spark SQL: ``SELECT … FROM t VERSION AS OF <id>``).
    """
    wanted = Hlc.parse(at) if isinstance(at, str) else at
    tables = tables_of(load(catalog), namespace, changefeed)
    return complete(namespace, {n: history(t, changefeed) for n, t in tables.items()}, wanted)
