"""Maintenance of a changefeed's Iceberg tables: compact, expire, remove orphans.

``highwater iceberg maintain <changefeed> --catalog K=V …`` or :func:`maintain`, for every
table of the changefeed (those whose property ``highwater.changefeed`` names it), in steps:

1. **Compact** small files (:mod:`.compaction`): one snapshot per table holding exactly the
   rows of the snapshot it compacted, marked with **the same R**, so the cut at R reads it
   and the snapshot it replaced may expire.
2. **Expire snapshots**, by R across all tables, never table by table: the cuts kept
   (:class:`Keep`: the latest complete one always; the last N; the R named; the R within a
   duration of now) keep, on every table, the snapshot :func:`.cuts.history` maps them to,
   so a kept cut stays complete. Snapshots past the latest complete cut (a table ahead after
   a crash between two tables' commits) and the tables' current ones are never expired;
   another writer's snapshots (no ``highwater.changefeed`` of this changefeed) neither.
   ``cut(at=R)`` of an expired R says it is gone (:class:`.cuts.CutError`).
3. **Remove orphan files**: files under a table's location that no snapshot left references
   (data files of expired snapshots, of a commit that failed, of an applier killed after
   writing them; manifests, manifest lists and metadata files no longer reachable),
   **older than** ``orphans_older_than``. That age is what keeps a file written by a commit
   still in flight (the applier's, or another writer's): it is referenced only once its
   commit lands, so a file younger than the longest commit may not be judged yet. The
   files are listed before the table is read, so a commit that lands in between is seen.

**Alongside a running applier**: every commit here (a compaction, an expiry) is refused by
the catalog when the applier committed meanwhile (pyiceberg's ``CommitFailedException``):
the table is read again and the step retried (a compaction rebased, :mod:`.compaction`);
the applier, refused in turn, reads again and retries its window (:mod:`.applier`). Neither
is lost. One maintenance at a time per table: two would race on the same snapshots.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, TypeVar

from pyiceberg.exceptions import CommitFailedException

from schemas.hlc import Hlc

from ..decoding import ApplyError
from . import compaction
from .applier import NAMESPACE
from .catalog import load
from .cuts import CutError, applied, complete, history, tables_of
from .orphans import orphans, remove

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

TARGET_FILE_SIZE = 128 * 1024 * 1024  # bytes of a compacted file (Iceberg's own is 512 MiB)
_ATTEMPTS = 10  # commits of one step refused by other writers' before giving up
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d)?$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
T = TypeVar("T")


class MaintenanceError(ApplyError):
    """Maintenance cannot run as asked (a cut to keep that is none, a table out of reach)."""

    remedy = (
        "Correct the argument the message names (`--keep` must be a complete cut, durations "
        "like `5d`), then run it again."
    )


def duration(text: str) -> timedelta:
    """``90s``, ``15m``, ``1h``, ``5d`` or seconds (``0``) as a duration; others refused."""
    match = _DURATION.match(text.strip())
    if match is None:
        raise MaintenanceError(f"{text!r} is not a duration: a number and s, m, h or d (1h)")
    return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2) or "s"])


@dataclass(frozen=True)
class Keep:
    """The cuts whose snapshots an expiry keeps (any rule keeping one keeps it).

    ``last``: the latest N complete cuts (at least 1: the latest is always kept);
    ``resolved``: these R (each must be a complete cut); ``newer_than``: the cuts whose R
    (its wall time, a source time) is within this of now (None: none by age). The default
    keeps the cuts of the last 5 days, as Iceberg's own snapshot expiry does.
    """

    last: int = 1
    resolved: frozenset[Hlc] = field(default_factory=frozenset)
    newer_than: timedelta | None = timedelta(days=5)

    def __post_init__(self) -> None:
        if self.last < 1:
            raise MaintenanceError(f"keep last {self.last}: the latest cut is always kept (>= 1)")
        if self.newer_than is not None and self.newer_than < timedelta(0):
            raise MaintenanceError(f"keep newer than {self.newer_than}: not a negative duration")

    def cuts(
        self, namespace: str, histories: Mapping[str, Mapping[Hlc, int]], now: float
    ) -> set[Hlc]:
        """The R kept of the complete cuts ``histories`` give (none: nothing complete).

        Raises :class:`MaintenanceError` for an R asked for that is not a complete cut.
        """
        for wanted in sorted(self.resolved):
            try:
                complete(namespace, histories, wanted)
            except CutError as exc:
                raise MaintenanceError(f"keep {wanted}: {exc}") from exc
        if not histories:
            return set()
        shared = sorted(set.intersection(*(set(h) for h in histories.values())))
        kept = set(shared[-self.last :]) | set(self.resolved)
        if self.newer_than is not None:
            since = (now - self.newer_than.total_seconds()) * 1e9
            kept |= {r for r in shared if r.wall >= since}
        return kept


def expirable(found: Iterable[tuple[Hlc, int]], kept: set[Hlc], current: int | None) -> list[int]:
    """A table's snapshots (its ``applied``, oldest first) that the kept cuts let go.

    Kept: the snapshot each kept R maps to (the latest of R's), the current snapshot, and
    every snapshot past the latest kept R (not a complete cut yet, or made meanwhile).
    """
    found = list(found)
    newest = dict(found)
    latest = max(kept, default=None)
    out = []
    for resolved, snapshot in found:
        if snapshot == current or latest is None or resolved > latest:
            continue
        if resolved in kept and newest[resolved] == snapshot:
            continue
        out.append(snapshot)
    return out


@dataclass
class TableReport:
    """What maintenance did to one table."""

    table: str
    files_before: int = 0
    files_after: int = 0
    snapshots_expired: int = 0
    orphans_removed: int = 0
    refused: int = 0  # commits refused by another writer's, read again and retried

    def __str__(self) -> str:
        return (
            f"{self.table}: data files {self.files_before} -> {self.files_after}, "
            f"snapshots expired {self.snapshots_expired}, orphan files removed "
            f"{self.orphans_removed}, commits retried {self.refused}"
        )


def maintain(
    catalog: Catalog | Mapping[str, str],
    changefeed: str,
    *,
    namespace: str = NAMESPACE,
    keep: Keep | None = None,
    target_file_size: int = TARGET_FILE_SIZE,
    orphans_older_than: timedelta = timedelta(days=1),
    now: Callable[[], float] = time.time,
) -> list[TableReport]:
    """Compact, expire and remove orphans in every table of ``changefeed`` (module doc).

    ``catalog``: a pyiceberg catalog or its properties (:func:`.catalog.load`).
    """
    keep = keep or Keep()
    loaded = load(catalog)
    tables = tables_of(loaded, namespace, changefeed)
    if not tables:
        raise MaintenanceError(f"no table of changefeed {changefeed!r} in namespace {namespace!r}")
    histories = {name: history(t, changefeed) for name, t in tables.items()}
    kept = keep.cuts(namespace, histories, now())  # before anything: a wrong R stops here
    reports = {name: TableReport(".".join(t.name())) for name, t in sorted(tables.items())}
    for name, table in sorted(tables.items()):
        _compact(loaded, table.name(), target_file_size, reports[name])
    for name, table in sorted(tables.items()):
        _expire(loaded, table.name(), changefeed, kept, reports[name])
    for name, table in sorted(tables.items()):
        reports[name].orphans_removed = _orphans(loaded, table, orphans_older_than, now)
    return list(reports.values())


def _retried(report: TableReport, step: Callable[[], T]) -> T:
    """``step`` again (it reads the table afresh) while other writers' commits refuse it."""
    while True:
        try:
            return step()
        except CommitFailedException as exc:
            report.refused += 1
            if report.refused >= _ATTEMPTS:
                raise MaintenanceError(
                    f"{report.table}: {report.refused} commits refused by other writers' "
                    f"(is another maintenance running?)"
                ) from exc
            log.info("%s: another writer committed first (%s); read again", report.table, exc)


def _compact(catalog: Catalog, name: tuple[str, ...], target: int, report: TableReport) -> None:
    """Step 1 for one table: its small files as fewer, rebased on other writers' commits."""
    table = catalog.load_table(name)
    report.files_before = compaction.sizes(table)[0]
    key = _key(table)
    groups = compaction.rewrite(table, key, target)
    while groups:  # a commit that failed otherwise may have landed: its files are left
        try:
            compaction.commit(table, groups)
            groups = []
        except CommitFailedException as exc:  # not committed: rebased, or given up
            report.refused += 1
            if report.refused >= _ATTEMPTS:
                compaction.drop(table, groups)
                raise MaintenanceError(
                    f"{report.table}: its compaction was refused {_ATTEMPTS} times"
                ) from exc
            table = catalog.load_table(name)
            groups, lost = compaction.rebased(table, groups)
            compaction.drop(table, lost)
            groups += compaction.rewrite(table, key, target, done=groups)
    report.files_after = compaction.sizes(catalog.load_table(name))[0]


def _expire(
    catalog: Catalog, name: tuple[str, ...], changefeed: str, kept: set[Hlc], report: TableReport
) -> None:
    """Step 2 for one table: the snapshots the kept cuts let go, by id."""

    def once() -> int:
        table = catalog.load_table(name)
        current = table.current_snapshot()
        ids = expirable(
            applied(table, changefeed), kept, None if current is None else current.snapshot_id
        )
        if ids:
            expiry = table.maintenance.expire_snapshots()
            # pyiceberg 0.10's set of ids is a class attribute, shared by every expiry made:
            # this one's own, or it would remove another table's ids from this one
            expiry._snapshot_ids_to_expire = set()
            expiry.by_ids(ids).commit()
        return len(ids)

    report.snapshots_expired = _retried(report, once)


def _orphans(
    catalog: Catalog, table: Table, older_than: timedelta, now: Callable[[], float]
) -> int:
    """Step 3 for one table: its orphan files older than ``older_than``, removed."""
    found = orphans(
        table, lambda: catalog.load_table(table.name()), now() - older_than.total_seconds()
    )
    remove(table, found)
    return len(found)


def _key(table: Table) -> tuple[str, ...]:
    schema = table.schema()
    return tuple(schema.find_column_name(i) or "" for i in schema.identifier_field_ids)
