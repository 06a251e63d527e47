"""Applying resolved windows to Iceberg tables, exactly once, as consistent cuts.

Each changefeed table goes to the Iceberg table ``<namespace>.<table>``, created when missing
from the changefeed's declared schema (:mod:`.columns`). A window is one commit **per table,
every table, empty windows included** (:mod:`.cuts` says why): a key's last version in the
window replaces its row, a delete removes it, a key changed is a delete of the old key and a
row of the new one; a table without identifier fields gets every version appended. Each
commit's snapshot summary carries ``highwater.resolved`` (R) and ``highwater.changefeed``.

Exactly once: each table's last R is read from its own history at :meth:`IcebergApplier.start`
(the consumer resumes after the lowest, the latest complete cut) and a table is skipped for a
window it holds already, so a crash anywhere (between two tables' commits too) neither
applies a window twice nor loses one; the window is acknowledged to the consumer only once
every table holds it. A commit refused because another writer committed meanwhile is
re-checked against the table's new R: skipped if that covers the window, else retried.

A catalog that does not answer (a REST catalog restarted, a connection refused or broken, a
5xx whose commit may or may not have happened) is waited for with back-off, up to
``patience`` seconds (then :class:`CatalogUnreachable`); once it answers the table is read
again before anything is retried, so a commit that did land before its answer was lost is
seen as the table's R and not made twice.

A value a column cannot hold stops the applier with :class:`UnwritableRecord`, which names
the record (topic/partition@offset), the table and the column: nothing of that window is
committed (every row is converted before the first table's commit). With dead letters
(``--on-error dlq``, :mod:`..dead_letters`) the record goes to the changefeed's dead-letter
topic instead, acknowledged before the window is committed, and the window goes on without it.

A column added upstream is added to the table in the window's commit, a retyped one refused
(:mod:`.evolution`; never a dead letter); a window's rows past ``spill`` per table are
written ahead as data files and committed with its last piece (:mod:`.spill`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from schemas.errors import RecordRef
from schemas.hlc import Hlc
from schemas.tables import TableSchema

from ..dead_letters import DeadLetters
from ..decoding import ApplyError
from ..output import keyed_by_rows
from ..windows import Row, Window, images
from . import writes
from .catalog import load
from .columns import Unwritable, converters, iceberg_schema
from .cuts import CHANGEFEED, RESOLVED, applied
from .evolution import EVOLVE, SCHEMA_CHANGES, Evolution
from .target import Stage, Target

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

NAMESPACE = "highwater"  # the default namespace of the applied tables
_ATTEMPTS = 10  # commits refused by other writers (maintenance: a compaction, an expiry) in a row
_FIRST_PAUSE, _LONGEST_PAUSE = 0.5, 8.0  # seconds between tries while the catalog is away


class UnwritableRecord(ApplyError):
    """An output record the applier cannot write: which one, into which table, and why."""

    remedy = (
        "Widen the Iceberg column (or fix the value upstream), or run with `--on-error dlq` "
        "to send the record to the changefeed's dead-letter topic; nothing of its window was "
        "committed."
    )

    def __init__(self, record: RecordRef, table: str, reason: str) -> None:
        self.record = record
        self.table = table
        self.reason = reason
        super().__init__(f"{record}: cannot be written to Iceberg table {table}: {reason}")


class CatalogUnreachable(ApplyError):
    """The catalog did not answer for ``waited`` seconds (the last error is the cause)."""

    remedy = (
        "Bring the catalog back and start the applier again (it resumes from each table's "
        "last R); `--catalog-patience` waits longer."
    )

    def __init__(self, table: str, waited: float) -> None:
        self.table = table
        self.waited = waited
        super().__init__(f"{table}: the Iceberg catalog did not answer for {waited:.0f} s")


@dataclass
class Outage:
    """A catalog that does not answer: each :meth:`wait` sleeps longer, up to ``patience``."""

    patience: float
    pause: float = _FIRST_PAUSE
    since: float | None = None

    def wait(self, table: str, exc: BaseException) -> None:
        """Sleep before the next try; :class:`CatalogUnreachable` once patience is spent."""
        now = time.monotonic()
        self.since = now if self.since is None else self.since
        if now - self.since >= self.patience:
            raise CatalogUnreachable(table, now - self.since) from exc
        log.warning("%s: the catalog does not answer (%r); again in %.1f s", table, exc, self.pause)
        time.sleep(self.pause)
        self.pause = min(self.pause * 2, _LONGEST_PAUSE)


class IcebergApplier:
    """Applies windows of ``changefeed`` to Iceberg tables in ``namespace`` of ``catalog``.

    ``catalog``: a pyiceberg catalog, or its properties (:func:`.catalog.load`: none gives
    the embedded SQLite one); ``schemas``: the changefeed's declared tables, from which
    missing tables are made; ``names``: a changefeed table -> its Iceberg table's name (in
    ``namespace``; default the same name). ``reached`` is called with ``committed <table>``
    after each table's commit and ``spilled <table>`` after rows written ahead: the crash
    tests' knob. ``patience``: the seconds a catalog that does not answer is waited for
    (with back-off) before the applier stops. ``dead_letters``: where a record no column
    can hold goes (else it stops the applier). ``schema_changes``: ``evolve`` (a column
    added upstream is added to the table) or ``stop`` (:mod:`.evolution`). ``spill``: the
    most rows held per table before they are written ahead (:mod:`.spill`; None: no bound);
    :attr:`most_held` is the most it held.

    Making one touches nothing: :meth:`start` loads the catalog and the tables.
    """

    def __init__(
        self,
        catalog: Catalog | Mapping[str, str],
        changefeed: str,
        *,
        namespace: str = NAMESPACE,
        schemas: Mapping[str, TableSchema] | None = None,
        names: Mapping[str, str] | None = None,
        patience: float = 300.0,
        dead_letters: DeadLetters | None = None,
        schema_changes: str = EVOLVE,
        spill: int | None = 100_000,
    ) -> None:
        self.schema_changes, self.spill = _options(schema_changes, spill)
        self.most_held = 0  # the most rows a table held at once (the spill bound's witness)
        self._given = catalog
        self.dead_letters = dead_letters
        self.patience = patience
        self._catalog: Catalog | None = None
        self.changefeed = changefeed
        self.namespace = namespace
        self.schemas = dict(schemas or {})
        self.names = dict(names or {})
        self.targets: dict[str, Target] = {}
        self.catching_up: list[Hlc] = []  # the R some tables hold and others not yet
        self.applied = 0  # rows written
        self.reached: Callable[[str], None] = lambda step: None

    @property
    def catalog(self) -> Catalog:
        """The catalog (:meth:`start` loaded it)."""
        if self._catalog is None:
            raise ApplyError("the applier was not started (IcebergApplier.start loads it)")
        return self._catalog

    def start(self, tables: Iterable[str]) -> Hlc | None:
        """Load (or make) the changefeed's ``tables``; the latest complete cut's R, or None.

        None: a table holds no window yet (the consumer starts where its group left off).
        A catalog that does not answer yet is waited for, as during commits (``patience``).
        """
        outage = Outage(self.patience)
        while True:
            try:
                return self._start(tables)
            except Exception as exc:
                cause = exc.__cause__ if isinstance(exc, ApplyError) else exc  # load()'s
                if not isinstance(cause, Exception) or not unreachable(cause):
                    raise
                self._catalog = None
                outage.wait("the catalog", cause)

    def _start(self, tables: Iterable[str]) -> Hlc | None:
        if self._catalog is None:
            self._catalog = load(self._given)
        self.catalog.create_namespace_if_not_exists(self.namespace)
        for name in sorted(set(tables)):
            if name not in self.targets:
                self.targets[name] = self._target(name)
        held = [t.resolved for t in self.targets.values()]
        if not held or any(r is None for r in held):
            low = None
        else:
            low = min(r for r in held if r is not None)
        # the tables ahead of the lowest (a crash between two tables' commits): the ones
        # behind are committed at exactly their R first, so every table holds the same cuts
        self.catching_up = sorted({r for r in held if r is not None and (low is None or r > low)})
        return low

    def _target(self, name: str) -> Target:
        """The Iceberg table of the changefeed's ``name``, made when missing, claimed as ours."""
        identifier = (self.namespace, self.names.get(name, name))
        declared = self.schemas.get(name)
        if not self.catalog.table_exists(identifier):
            if declared is None:
                raise ApplyError(
                    f"Iceberg table {'.'.join(identifier)} does not exist and the changefeed "
                    f"declares no schema for table {name!r} (sources[].table_schema with "
                    f"primary_key): declare one, or create the table"
                )
            self.catalog.create_table_if_not_exists(
                identifier, iceberg_schema(declared), properties={CHANGEFEED: self.changefeed}
            )
        table = self.catalog.load_table(identifier)
        owner = table.properties.get(CHANGEFEED)
        if owner is None:
            with table.transaction() as transaction:
                transaction.set_properties({CHANGEFEED: self.changefeed})
        elif owner != self.changefeed:
            raise ApplyError(
                f"Iceberg table {'.'.join(identifier)} is applied by changefeed {owner!r}, "
                f"not {self.changefeed!r}"
            )
        key, convert = _key_of(table, declared), converters(table.schema())
        evolution = Evolution(self.schema_changes, declared)
        return Target(name, table, key, convert, _last(table, self.changefeed), evolution)

    def apply(self, window: Window) -> bool:
        """Take a window (or a piece of one); its last piece commits every table that lacks it.

        False: nothing was written (every table holds it, or its rows wait for a catch-up R:
        see :attr:`holding`).
        """
        try:
            self._take(window.rows)
            if not window.last:
                return False
            if self.dead_letters is not None:
                self.dead_letters.flush()  # acknowledged before the window is committed
            written = self._catch_up(window.resolved)
            if self.catching_up and window.resolved < self.catching_up[0]:
                return any(written)  # its rows wait for the catch-up R
            written = [self._commit(t, window.resolved, None) for t in self._order()] + written
        except BaseException:
            self._clear()
            raise
        return any(written)

    @property
    def holding(self) -> bool:
        """Rows wait for a catch-up R: the windows taken are not held by every table yet."""
        return bool(self.catching_up)

    def _catch_up(self, resolved: Hlc) -> list[bool]:
        """Commit the tables behind at each catch-up R the window reaches."""
        written = []
        while self.catching_up and self.catching_up[0] <= resolved:
            stage = self.catching_up.pop(0)
            written += [self._commit(t, stage, stage) for t in self._order()]
        return written

    def _take(self, rows: tuple[Row, ...]) -> None:
        """Each row's change, converted, into its table's rows of its stage.

        A row a table holds already (at or below its R) is dropped; a row at or below a
        catch-up R waits for it.
        """
        for row, (key_values, after) in zip(rows, images(rows), strict=True):
            target = self.targets.get(row.table)
            if target is None:
                raise ApplyError(f"table {row.table!r} was not started (IcebergApplier.start)")
            updated = row.updated
            if target.resolved is not None and updated <= target.resolved:
                continue
            stage = next((r for r in self.catching_up if updated <= r), None)
            try:
                if after is not None:
                    target.evolution.see(row, after, target.table, target.convert)
                target.change(key_values, after, stage)
            except Unwritable as exc:
                self._unwritable(row, target, exc)
            held = target.held()
            self.most_held = max(self.most_held, held)
            if self.spill is not None and held >= self.spill:
                target.spill()
                self.reached(f"spilled {target.name}")

    def _unwritable(self, row: Row, target: Target, exc: Unwritable) -> None:
        """A row its table cannot hold: to the dead letters, or :class:`UnwritableRecord`."""
        place = RecordRef(row.partition[0], row.partition[1], row.offset)
        name = ".".join(target.table.name())
        if self.dead_letters is None:
            raise UnwritableRecord(place, name, str(exc)) from exc
        reason = f"cannot be written to Iceberg table {name}: {exc}"
        log.warning("%s: %s; sent to dead-letter topic %s", place, reason, self.dead_letters.topic)
        self.dead_letters.send(str(place), row.key, row.value, reason)

    def _order(self) -> list[Target]:
        return [self.targets[name] for name in sorted(self.targets)]

    def _clear(self) -> None:
        for target in self.targets.values():
            target.clear()

    def _commit(self, target: Target, resolved: Hlc, stage: Stage) -> bool:
        """One table's rows of a stage as one commit at R; False: the table holds R already.

        After a refused commit or a catalog away, the table is read again first: its R may
        cover the window now (another writer's commit, or ours whose answer was lost).
        """
        summary = {CHANGEFEED: self.changefeed, RESOLVED: str(resolved)}
        touched, rows = target.rows(stage)
        spill = target.spills.get(stage)
        ahead = None if spill is None else partial(spill.files, target.table, key=target.key)
        refused, outage = 0, Outage(self.patience)
        alter = target.evolution.alter
        while target.resolved is None or target.resolved < resolved:
            try:
                writes.commit(
                    target.table, target.key, touched, rows, summary, alter=alter, ahead=ahead
                )
            except _commit_failed() as exc:
                refused += 1
                if refused == _ATTEMPTS:
                    raise ApplyError(
                        f"{target.name}: {_ATTEMPTS} commits of window {resolved} were refused"
                    ) from exc
                log.info("%s: another writer committed first (%s); read again", target.name, exc)
            except Exception as exc:
                if not unreachable(exc):
                    raise
                outage.wait(target.name, exc)
            else:
                target.resolved = resolved
                target.committed(stage)
                written = len(rows) + (0 if spill is None else spill.rows)
                self.applied += len(touched) if target.key else written  # deletes count
                self.reached(f"committed {target.name}")
                return True
            self._read_again(target, outage)
        target.spills.pop(stage, None)  # the table holds R: files written ahead are orphans
        return False

    def _read_again(self, target: Target, outage: Outage) -> None:
        """The table and its last R as the catalog has them now (waiting while it is away)."""
        while True:
            try:
                target.table = self.catalog.load_table(target.table.name())
            except Exception as exc:
                if not unreachable(exc):
                    raise
                outage.wait(target.name, exc)
                continue
            target.resolved = _last(target.table, self.changefeed)
            return

    def close(self) -> None:
        """Forget a window not committed (nothing is held open between windows)."""
        self._clear()
        if self.dead_letters is not None:
            self.dead_letters.close()


def _options(schema_changes: str, spill: int | None) -> tuple[str, int | None]:
    """The applier's options, checked (:class:`ApplyError` names the one refused)."""
    if schema_changes not in SCHEMA_CHANGES:
        raise ApplyError(
            f"schema_changes: {schema_changes!r} is not one of {', '.join(SCHEMA_CHANGES)}"
        )
    if spill is not None and spill < 1:
        raise ApplyError(f"spill: {spill} rows; at least 1 (or None: no bound)")
    return schema_changes, spill


def _commit_failed() -> type[Exception]:
    from pyiceberg.exceptions import CommitFailedException  # noqa: PLC0415

    return CommitFailedException


_LOCAL_FILE_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)


def unreachable(exc: Exception) -> bool:
    """Whether ``exc`` says the catalog did not answer, so trying again later may work.

    A connection refused, reset or timed out (the HTTP client's errors are OSErrors; a
    missing or forbidden local file is not one of these), or a REST catalog's 5xx: a commit
    whose outcome is unknown, a server error, the service unavailable.
    """
    from pyiceberg.exceptions import (  # noqa: PLC0415
        CommitStateUnknownException,
        ServerError,
        ServiceUnavailableError,
    )

    if isinstance(exc, CommitStateUnknownException | ServerError | ServiceUnavailableError):
        return True
    return isinstance(exc, OSError) and not isinstance(exc, _LOCAL_FILE_ERRORS)


def _key_of(table: Table, declared: TableSchema | None) -> tuple[str, ...]:
    """The table's identifier fields, in the changefeed key's order where it declares one."""
    names = table.schema().identifier_field_names()
    if declared is not None and set(declared.primary_key) == names:
        return declared.primary_key
    schema = table.schema()
    return tuple(schema.find_column_name(i) or "" for i in schema.identifier_field_ids)


def _last(table: Table, changefeed: str) -> Hlc | None:
    """The last R ``changefeed`` committed to ``table`` (None: none)."""
    found = applied(table, changefeed)
    return max((r for r, _ in found), default=None)


def apply(
    consumer: Any, applier: IcebergApplier, *, until: Hlc | None = None, idle: float | None = None
) -> int:
    """Apply ``consumer``'s windows, each acknowledged once every table holds it.

    ``until``, ``idle``: as :meth:`ChangefeedConsumer.windows`. Returns the windows written.
    """
    keyed_by_rows(consumer)
    done = 0
    for window in consumer.windows(until=until, idle=idle):
        written = applier.apply(window)
        if window.last and not applier.holding:
            consumer.ack(window)  # every table holds it (and those before: written, or before)
            done += written
    return done
