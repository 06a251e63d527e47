"""Applying resolved windows to PostgreSQL tables, exactly once (``highwater apply``).

Each window is one SQL transaction: its rows (upserts by primary key, deletes of ``after:
null``) and its R in ``highwater_applied``, committed together. So the tables always show
the source as it was at some R, never half a window, and a killed applier resumes after the
R it stored: the consumer drops what it hands over again at or below it. A window that comes
in pieces stays one transaction; the pieces are in commit order.

Within a window only the last version of each key matters (the transaction shows nothing in
between), so a key's rows collapse to its last. A piece goes to PostgreSQL as one ``COPY``
into a temporary staging table, then one ``INSERT … SELECT … ON CONFLICT DO UPDATE`` (per
shape of ``after``: usually one) and one ``DELETE … USING``; :mod:`~highwater_consumer.staging`
makes the COPY text. JSON rows are staged as their records (key and envelope as written) and
PostgreSQL reads their values (``json_populate_record`` into text, then cast: no Python object
per value); other rows (Avro) as their values in a staging table of the target's types. Either
way a value is the text PostgreSQL reads for the column's type, as the per-row statements
before gave it (``%s::<type>``): numbers as the changefeed wrote them, JSON values as JSON
text. Temporary tables live in the session: a pooler in transaction mode does not suit.

:func:`apply` pipelines the windows: the next window is read and made into COPY text on the
calling thread while the last one is written and committed on a writer thread (PostgreSQL
works meanwhile, the GIL released); a window is acknowledged to the consumer only once its
transaction committed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from schemas.hlc import Hlc

from .decoding import ApplyError, JsonDecoder
from .output import keyed_by_rows
from .staging import (
    SHAPE,
    Staged,
    Table,
    last_versions,
    stage,
    stage_records,
    text,
)
from .windows import Window, images

__all__ = ["STATE_TABLE", "ApplyError", "PostgresApplier", "Prepared", "Table", "apply", "text"]

STATE_TABLE = "highwater_applied"
_STATE = sql.Identifier(STATE_TABLE)
_COMMA = sql.SQL(", ")
_KEY, _VALUE = "_hw_key", "_hw_value"  # a JSON record's staging columns


@dataclass(frozen=True)
class Prepared:
    """A window (or piece) made ready to write: each table's COPY text."""

    window: Window
    tables: tuple[Staged, ...]


class PostgresApplier:
    """Applies windows of ``changefeed`` to tables of the database at ``dsn``.

    ``tables``: the changefeed's table -> the target table (``schema.table`` or ``table``);
    a table not named goes to the table of its own name.

    :meth:`apply` writes a window (or piece) at once; :meth:`prepare` (no SQL but a table's
    first lookup) and :meth:`write` split it for :func:`apply`'s pipeline. ``reached`` is
    called with each step's name inside a window's transaction (``copied``, ``merged``,
    ``stored``: its R written, not committed): the crash tests' knob.

    Making one touches nothing: :meth:`start` connects.
    """

    def __init__(self, dsn: str, changefeed: str, tables: Mapping[str, str] | None = None) -> None:
        self._dsn = dsn
        self._connection: psycopg.Connection[Any] | None = None
        self.changefeed = changefeed
        self.names = dict(tables or {})
        self.tables: dict[str, Table] = {}
        self.staged: set[int] = set()  # tables whose staging was made (committed) in this session
        self.making: set[int] = set()  # made in the open transaction
        self.open = False  # a window's transaction is open
        self.stale = False  # the open window is at or below the R stored: not written
        self.failed: Hlc | None = None  # a window whose piece failed: its other pieces refused
        self.applied = 0  # rows written
        self.reached: Callable[[str], None] = lambda step: None

    @property
    def connection(self) -> psycopg.Connection[Any]:
        """The connection to the database (:meth:`start` made it)."""
        if self._connection is None:
            raise ApplyError("the applier was not started (PostgresApplier.start connects)")
        return self._connection

    def start(self) -> Hlc | None:
        """Connect, make the state table if needed; the R applied last (None: nothing yet)."""
        if self._connection is None:
            # autocommit: this class says where a window's transaction begins and ends
            self._connection = psycopg.connect(self._dsn, autocommit=True, client_encoding="UTF8")
        with self.connection.transaction():
            self.connection.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (changefeed text PRIMARY KEY, "
                    "resolved text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
                ).format(_STATE)
            )
            found = self.connection.execute(
                sql.SQL("SELECT resolved FROM {} WHERE changefeed = %s").format(_STATE),
                (self.changefeed,),
            ).fetchone()
        return None if found is None else Hlc.parse(found[0])

    def table(self, name: str) -> Table:
        """The target of the changefeed's table ``name``, read from the catalog once."""
        found = self.tables.get(name)
        if found is not None:
            return found
        target = self.names.get(name, name)
        rows = self.connection.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod), "
            "CASE WHEN t.typtype = 'd' THEN format_type(t.typbasetype, t.typtypmod) "
            "ELSE format_type(a.atttypid, a.atttypmod) END, "
            "array_position(i.indkey::int2[], a.attnum) "
            "FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid LEFT JOIN pg_index i "
            "ON i.indrelid = a.attrelid AND i.indisprimary AND a.attnum = ANY(i.indkey) "
            "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped",
            (target,),
        ).fetchall()
        if not rows:
            raise ApplyError(f"table {target!r} (for the changefeed's {name!r}) does not exist")
        key = tuple(
            c for c, _, _, at in sorted((r for r in rows if r[3] is not None), key=lambda r: r[3])
        )
        if not key:
            raise ApplyError(f"table {target!r} has no primary key to apply changes by")
        if SHAPE in {r[0] for r in rows}:
            raise ApplyError(f"table {target!r} has a column {SHAPE!r}: the applier's own name")
        table = Table(
            target,
            sql.Identifier(*target.split(".")),
            {c: kind for c, kind, _, _ in rows},
            key,
            {c: base for c, _, base, _ in rows},
            len(self.tables),
        )
        self.tables[name] = table
        return table

    def prepare(self, window: Any, lookup: Callable[[str], Table] | None = None) -> Prepared:
        """A window's COPY text per table (``lookup``: how to find a table; :meth:`table`).

        ``window``: a :class:`Window`, or a columnar consumer's ``ArrowWindow`` (:func:`_columns`).
        """
        if not isinstance(window, Window):
            return _columns(self, window, lookup)
        find = lookup or self.table
        staged = []
        for name, rows in last_versions(window.rows).items():
            table = self.tables.get(name) or find(name)
            readers = {row.reader for row in rows}
            owner = getattr(readers.pop(), "__self__", None) if len(readers) == 1 else None
            records = stage_records(table, rows) if isinstance(owner, JsonDecoder) else None
            staged.append(records or stage(table, images(rows)))
        return Prepared(window, tuple(staged))

    def apply(self, window: Window) -> bool:
        """Write a window (or a piece of one); its last piece commits it with its R.

        False: the window is at or below the R stored already (another applier of the same
        changefeed got there first, or this one is behind): nothing is written, so the tables
        never go back to an older R.
        """
        try:
            prepared = self.prepare(window)
        except BaseException:
            self._abandon(window)
            raise
        return self.write(prepared)

    def write(self, prepared: Prepared) -> bool:
        """Write a prepared window (or piece): as :meth:`apply`."""
        window = prepared.window
        if self.failed is not None and self.failed == window.resolved:
            raise ApplyError(f"window {window.resolved}: an earlier piece failed, not applied")
        if not self.open:
            self.connection.execute("BEGIN")
            self.open = True
            self.failed = None
            try:
                self.stale = self._behind(window.resolved)
            except BaseException:
                self._abandon(window)
                raise
        try:
            if not self.stale:
                self._write(prepared)
            if window.last:
                if self.stale:
                    self._rollback()
                    return False
                self.connection.execute(
                    sql.SQL(
                        "INSERT INTO {} (changefeed, resolved) VALUES (%s, %s) "
                        "ON CONFLICT (changefeed) DO UPDATE "
                        "SET resolved = EXCLUDED.resolved, applied_at = now()"
                    ).format(_STATE),
                    (self.changefeed, str(window.resolved)),
                )
                self.reached("stored")
                self.connection.execute("COMMIT")
                self.open = False
                self.staged |= self.making
                self.making.clear()
        except BaseException:
            self._abandon(window)
            raise
        return not self.stale

    def _abandon(self, window: Window) -> None:
        """A window's piece failed: roll back, and refuse its later pieces."""
        if self.open:
            self._rollback()
        if not window.last:
            self.failed = window.resolved

    def _rollback(self) -> None:
        self.open = False
        self.making.clear()  # the staging tables made in it are gone with it
        if self.connection.closed:
            return
        with suppress(psycopg.OperationalError):  # the connection lost: its transaction too
            self.connection.execute("ROLLBACK")

    def _behind(self, resolved: Hlc) -> bool:
        """Whether ``resolved`` is at or below the R stored, read under the changefeed's lock.

        The lock (a transaction-scoped advisory lock) makes the appliers of one changefeed
        apply their windows one at a time: a second applier waits, then finds the first's R.
        """
        self.connection.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
            (f"{STATE_TABLE}/{self.changefeed}",),
        )
        found = self.connection.execute(
            sql.SQL("SELECT resolved FROM {} WHERE changefeed = %s").format(_STATE),
            (self.changefeed,),
        ).fetchone()
        return found is not None and resolved <= Hlc.parse(found[0])

    def _write(self, prepared: Prepared) -> None:
        """A piece's rows, inside its window's transaction."""
        for staged in prepared.tables:
            self._merge(staged, last=prepared.window.last)

    def _merge(self, staged: Staged, *, last: bool) -> None:
        """COPY a table's rows into staging, then upsert and delete from there."""
        table = staged.table
        self._stage_tables(table)
        given: tuple[str, ...] = (SHAPE, _KEY, _VALUE)
        if staged.records:
            into = table.records
            upsert, delete = _upsert_records, _delete_records
        else:
            into, given = table.stage, (SHAPE, *staged.columns)
            upsert, delete = _upsert, _delete
        columns = _COMMA.join(map(sql.Identifier, given))
        with self.connection.cursor() as cursor:
            with cursor.copy(sql.SQL("COPY {} ({}) FROM STDIN").format(into, columns)) as copy:
                copy.write(staged.data)
            self.reached("copied")
            for tag, rest in enumerate(staged.shapes, start=1):
                if staged.counts[tag]:
                    cursor.execute(upsert(table, rest), (tag,))
            if staged.counts[0]:
                cursor.execute(delete(table))
            if not last:  # the next piece's keys may be this one's again
                cursor.execute(sql.SQL("TRUNCATE {}").format(into))
        self.reached("merged")
        self.applied += staged.rows

    def _stage_tables(self, table: Table) -> None:
        """The table's staging tables, made at its first use in this session."""
        if table.number in self.staged or table.number in self.making:
            return
        typed = _COMMA.join(
            sql.SQL("{} {}").format(sql.Identifier(c), sql.SQL(kind))  # the catalog's name
            for c, kind in [(SHAPE, "smallint"), *table.stage_types.items()]
        )
        texts = _COMMA.join(sql.SQL("{} text").format(sql.Identifier(c)) for c in table.types)
        for statement in (
            sql.SQL("CREATE TEMPORARY TABLE {} ({}) ON COMMIT DELETE ROWS").format(
                table.stage, typed
            ),
            sql.SQL(
                "CREATE TEMPORARY TABLE {} ({} smallint, {} json, {} json) ON COMMIT DELETE ROWS"
            ).format(table.records, *map(sql.Identifier, (SHAPE, _KEY, _VALUE))),
            sql.SQL("CREATE TEMPORARY TABLE {} ({})").format(table.texts, texts),
        ):
            self.connection.execute(statement)
        self.making.add(table.number)

    def close(self) -> None:
        """Roll back a window not applied whole; close the connection (if it was made)."""
        if self._connection is None:
            return
        if self.open and not self._connection.closed:
            self._rollback()
        self._connection.close()


def _columns(
    applier: PostgresApplier, window: Any, lookup: Callable[[str], Table] | None
) -> Prepared:
    """An ``ArrowWindow``'s COPY text made by Arrow's kernels (JSON records), else as its rows."""
    from .staging_arrow import stage_window  # noqa: PLC0415 - the [arrow] extra's

    find = lookup or applier.table
    columns = stage_window(window, lambda name: applier.tables.get(name) or find(name))
    if columns is None:
        return applier.prepare(window.to_window(), lookup)
    return Prepared(window, columns)


def _upsert(table: Table, rest: tuple[str, ...]) -> sql.Composed:
    """The rows of one shape (``%s``) from staging into the table, by key."""
    columns = _COMMA.join(map(sql.Identifier, (*table.key, *rest)))
    sets = [sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in rest]
    return sql.SQL(
        "INSERT INTO {target} ({columns}) SELECT {columns} FROM {stage} WHERE {shape} = %s "
        "ON CONFLICT ({key}) {action}"
    ).format(
        target=table.ident,
        columns=columns,
        stage=table.stage,
        shape=sql.Identifier(SHAPE),
        key=_COMMA.join(map(sql.Identifier, table.key)),
        action=sql.SQL("DO UPDATE SET {}").format(_COMMA.join(sets))
        if sets
        else sql.SQL("DO NOTHING"),
    )


def _upsert_records(table: Table, rest: tuple[str, ...]) -> sql.Composed:
    """The JSON records of one shape (``%s``) into the table: values read by PostgreSQL.

    A key value is ``->>``'s text of the key array's item, a column's is the text
    ``json_populate_record`` reads into a text column (a string's characters, a number,
    ``true`` or an object as written: what ``->>`` gives), each cast to the column's type as
    the per-row statements did (``%s::<type>``).
    """
    key = [
        sql.SQL("(s.{} ->> {})::{}").format(sql.Identifier(_KEY), sql.Literal(n), _type(table, c))
        for n, c in enumerate(table.key)
    ]
    values = [sql.SQL("r.{}::{}").format(sql.Identifier(c), _type(table, c)) for c in rest]
    sets = [sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in rest]
    return sql.SQL(
        "INSERT INTO {target} ({columns}) SELECT {values} FROM {records} AS s, "
        "json_populate_record(NULL::{texts}, s.{value} -> 'after') AS r WHERE s.{shape} = %s "
        "ON CONFLICT ({key}) {action}"
    ).format(
        target=table.ident,
        columns=_COMMA.join(map(sql.Identifier, (*table.key, *rest))),
        values=_COMMA.join([*key, *values]),
        records=table.records,
        texts=table.texts,
        value=sql.Identifier(_VALUE),
        shape=sql.Identifier(SHAPE),
        key=_COMMA.join(map(sql.Identifier, table.key)),
        action=sql.SQL("DO UPDATE SET {}").format(_COMMA.join(sets))
        if sets
        else sql.SQL("DO NOTHING"),
    )


def _delete_records(table: Table) -> sql.Composed:
    """The deletes among the JSON records (shape 0) from the table, by key."""
    match = sql.SQL(" AND ").join(
        sql.SQL("t.{} = (s.{} ->> {})::{}").format(
            sql.Identifier(c), sql.Identifier(_KEY), sql.Literal(n), _type(table, c)
        )
        for n, c in enumerate(table.key)
    )
    return sql.SQL("DELETE FROM {} AS t USING {} AS s WHERE s.{} = 0 AND {}").format(
        table.ident, table.records, sql.Identifier(SHAPE), match
    )


def _type(table: Table, column: str) -> sql.Composable:
    return sql.SQL(table.types[column])  # the type as the catalog names it


def _delete(table: Table) -> sql.Composed:
    """The deletes in staging (shape 0) from the table, by key."""
    match = sql.SQL(" AND ").join(
        sql.SQL("t.{0} = s.{0}").format(sql.Identifier(c)) for c in table.key
    )
    return sql.SQL("DELETE FROM {} AS t USING {} AS s WHERE s.{} = 0 AND {}").format(
        table.ident, table.stage, sql.Identifier(SHAPE), match
    )


def apply(
    consumer: Any,
    applier: PostgresApplier,
    *,
    until: Hlc | None = None,
    idle: float | None = None,
    pipeline: int = 2,
) -> int:
    """Apply ``consumer``'s windows, each acknowledged once its transaction committed.

    ``until``, ``idle``: as :meth:`ChangefeedConsumer.windows`. Returns the windows written.
    ``pipeline``: how many windows (or pieces) may be prepared and not yet written while the
    next is read (a writer thread owns the connection meanwhile); 0: one after the other on
    this thread.
    """
    keyed_by_rows(consumer)
    windows = consumer.arrow_windows if getattr(consumer, "columnar", False) else consumer.windows
    if pipeline < 1:
        applied = 0
        for window in windows(until=until, idle=idle):
            written = applier.apply(window)
            if window.last:
                consumer.ack(window)  # written, or another applier's R covers it
                applied += written
        return applied
    writer = ThreadPoolExecutor(1, thread_name_prefix="highwater-apply")
    try:
        applied = _pipelined(consumer, applier, writer, until, idle, pipeline)
    except BaseException:
        writer.shutdown(wait=True, cancel_futures=True)  # what waits is not written
        raise
    writer.shutdown(wait=True)
    return applied


def _pipelined(  # noqa: PLR0917 - apply's arguments
    consumer: Any,
    applier: PostgresApplier,
    writer: ThreadPoolExecutor,
    until: Hlc | None,
    idle: float | None,
    depth: int,
) -> int:
    """Windows (or pieces) written on ``writer`` while the next are read; acks in order.

    Once a write failed, none after it is written (a later window committed with its R
    would cover the failed one's rows, never written).
    """
    failed: list[BaseException] = []

    def write(prepared: Prepared) -> bool:  # on the writer, one at a time
        if failed:
            raise ApplyError(f"window {prepared.window.resolved}: not written after a failure")
        try:
            return applier.write(prepared)
        except BaseException as exc:
            failed.append(exc)
            raise

    def lookup(name: str) -> Table:  # on the writer: the connection is its own meanwhile
        return writer.submit(applier.table, name).result()

    applied = 0
    writing: deque[tuple[Window, Future[bool]]] = deque()

    def settle() -> None:
        nonlocal applied
        window, done = writing.popleft()
        written = done.result()  # a failed write raises here
        if window.last:
            consumer.ack(window)
            applied += written

    windows = consumer.arrow_windows if getattr(consumer, "columnar", False) else consumer.windows
    for window in windows(until=until, idle=idle):
        prepared = applier.prepare(window, lookup)
        while writing and (len(writing) >= depth or writing[0][1].done()):
            settle()
        writing.append((window, writer.submit(write, prepared)))
    while writing:
        settle()
    return applied
