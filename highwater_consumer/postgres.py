"""Applying resolved windows to PostgreSQL tables, exactly once (``highwater apply``).

Each window is one SQL transaction: its rows (upserts by primary key, deletes of ``after:
null``) and its R in ``highwater_applied``, committed together. So the tables always show
the source as it was at some R, never half a window, and a killed applier resumes after the
R it stored: the consumer drops what it hands over again at or below it. A window that comes
in pieces stays one transaction; the pieces are in commit order.

Within a window only the last version of each key matters (the transaction shows nothing in
between), so a key's rows collapse to its last, and the rows go in statements of many rows.
Types come from the table: each value is given as the text PostgreSQL reads for the column's
type (``%s::<type>``), numbers as the changefeed wrote them, JSON values as JSON text.
"""

from __future__ import annotations

import datetime
import decimal
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from schemas.hlc import Hlc
from schemas.jsontext import Number, dumps

from .decoding import ConsumerError
from .windows import Row, Window

STATE_TABLE = "highwater_applied"
_STATE = sql.Identifier(STATE_TABLE)


class ApplyError(ConsumerError):
    """A window could not be applied: a table, column or key the target does not have."""


@dataclass(frozen=True)
class Table:
    """A target table: its columns' types and its primary key, in key order."""

    name: str  # as the user named it
    ident: sql.Composable  # as written in SQL
    types: Mapping[str, str]  # column -> format_type
    key: tuple[str, ...]

    def key_of(self, row: Row) -> tuple[Any, ...]:
        """The row's key values in the key's order (JSON: the array; Avro: the record)."""
        values = row.key_values
        if isinstance(values, Mapping):
            missing = [c for c in self.key if c not in values]
            if missing:
                raise ApplyError(f"{self.name}: the key {values!r} has no {missing}")
            return tuple(values[c] for c in self.key)
        if not isinstance(values, list) or len(values) != len(self.key):
            raise ApplyError(
                f"{self.name}: the key {values!r} does not match the primary key {list(self.key)}"
            )
        return tuple(values)


def _json_text(value: Any) -> str:
    return dumps(value).decode()  # objects and arrays: JSON text, numbers as written


_TEXTS: dict[type, Any] = {
    bool: lambda v: "true" if v else "false",
    Number: lambda v: v.text,
    float: repr,
    bytes: lambda v: "\\x" + v.hex(),
    bytearray: lambda v: "\\x" + bytes(v).hex(),
    datetime.datetime: datetime.datetime.isoformat,
    datetime.date: datetime.date.isoformat,
    datetime.time: datetime.time.isoformat,
    int: str,
    decimal.Decimal: str,
    uuid.UUID: str,
    dict: _json_text,
    list: _json_text,
}


def text(value: Any) -> str | None:
    """The text PostgreSQL reads a value from, for any column type (cast by the statement)."""
    if value is None or isinstance(value, str):
        return value
    for kind in type(value).__mro__:
        convert = _TEXTS.get(kind)
        if convert is not None:
            return str(convert(value))
    return _json_text(value)


class PostgresApplier:
    """Applies windows of ``changefeed`` to tables of the database at ``dsn``.

    ``tables``: the changefeed's table -> the target table (``schema.table`` or ``table``);
    a table not named goes to the table of its own name.
    """

    def __init__(self, dsn: str, changefeed: str, tables: Mapping[str, str] | None = None) -> None:
        self.connection = psycopg.connect(dsn, autocommit=False)
        self.changefeed = changefeed
        self.names = dict(tables or {})
        self.tables: dict[str, Table] = {}
        self.open = False  # a window's transaction is open
        self.stale = False  # the open window is at or below the R stored: not written
        self.applied = 0  # rows written

    def start(self) -> Hlc | None:
        """Make the state table if needed; the R applied last (None: nothing yet)."""
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
            "array_position(i.indkey::int2[], a.attnum) "
            "FROM pg_attribute a LEFT JOIN pg_index i "
            "ON i.indrelid = a.attrelid AND i.indisprimary AND a.attnum = ANY(i.indkey) "
            "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped",
            (target,),
        ).fetchall()
        if not rows:
            raise ApplyError(f"table {target!r} (for the changefeed's {name!r}) does not exist")
        key = tuple(
            c for c, _, at in sorted((r for r in rows if r[2] is not None), key=lambda r: r[2])
        )
        if not key:
            raise ApplyError(f"table {target!r} has no primary key to apply changes by")
        ident = sql.Identifier(*target.split("."))
        table = self.tables[name] = Table(target, ident, {c: t for c, t, _ in rows}, key)
        return table

    def apply(self, window: Window) -> bool:
        """Write a window (or a piece of one); its last piece commits it with its R.

        False: the window is at or below the R stored already (another applier of the same
        changefeed got there first, or this one is behind): nothing is written, so the tables
        never go back to an older R.
        """
        if not self.open:
            self.connection.execute("BEGIN")
            self.open = True
            self.stale = self._behind(window.resolved)
        try:
            if not self.stale:
                self._write(window.rows)
            if window.last:
                if self.stale:
                    self.connection.rollback()
                    self.open = False
                    return False
                self.connection.execute(
                    sql.SQL(
                        "INSERT INTO {} (changefeed, resolved) VALUES (%s, %s) "
                        "ON CONFLICT (changefeed) DO UPDATE "
                        "SET resolved = EXCLUDED.resolved, applied_at = now()"
                    ).format(_STATE),
                    (self.changefeed, str(window.resolved)),
                )
                self.connection.commit()
                self.open = False
        except BaseException:
            self.connection.rollback()
            self.open = False
            raise
        return not self.stale

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

    def _write(self, rows: Sequence[Row]) -> None:
        last: dict[tuple[str, bytes], Row] = {}
        for row in rows:  # commit order: the last version of a key wins
            last.pop((row.table, row.key), None)
            last[(row.table, row.key)] = row
        groups: dict[tuple[str, tuple[str, ...] | None], list[Row]] = {}
        for row in last.values():
            columns = None if row.after is None else tuple(row.after)
            groups.setdefault((row.table, columns), []).append(row)
        for (name, columns), group in groups.items():
            table = self.table(name)
            if columns is None:
                self._delete(table, group)
            else:
                self._upsert(table, columns, group)
            self.applied += len(group)

    @staticmethod
    def _cast(table: Table, column: str) -> sql.Composable:
        kind = table.types.get(column)
        if kind is None:
            raise ApplyError(f"table {table.name} has no column {column!r} (add it to apply)")
        return sql.SQL("%s::" + kind)  # the type as the catalog names it

    def _upsert(self, table: Table, after: tuple[str, ...], rows: Iterable[Row]) -> None:
        """Rows by their key (the record's) and the columns of ``after`` besides it."""
        rest = [c for c in after if c not in table.key]
        columns = [*table.key, *rest]
        comma = sql.SQL(", ")
        sets = [sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in rest]
        statement = sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) {}").format(
            table.ident,
            comma.join(map(sql.Identifier, columns)),
            comma.join(self._cast(table, c) for c in columns),
            comma.join(map(sql.Identifier, table.key)),
            sql.SQL("DO UPDATE SET {}").format(comma.join(sets)) if sets else sql.SQL("DO NOTHING"),
        )
        params = []
        for row in rows:
            image = row.after or {}
            params.append([*map(text, table.key_of(row)), *(text(image[c]) for c in rest)])
        with self.connection.cursor() as cursor:
            cursor.executemany(statement, params)

    def _delete(self, table: Table, rows: Iterable[Row]) -> None:
        where = sql.SQL(" AND ").join(
            sql.SQL("{} = {}").format(sql.Identifier(c), self._cast(table, c)) for c in table.key
        )
        with self.connection.cursor() as cursor:
            cursor.executemany(
                sql.SQL("DELETE FROM {} WHERE {}").format(table.ident, where),
                [[text(v) for v in table.key_of(row)] for row in rows],
            )

    def close(self) -> None:
        """Roll back a window not applied whole; close the connection."""
        if self.open:
            self.connection.rollback()
        self.connection.close()


def apply(
    consumer: Any, applier: PostgresApplier, *, until: Hlc | None = None, idle: float | None = None
) -> int:
    """Apply ``consumer``'s windows, each acknowledged once its transaction committed.

    ``until``, ``idle``: as :meth:`ChangefeedConsumer.windows`. Returns the windows written.
    """
    applied = 0
    for window in consumer.windows(until=until, idle=idle):
        written = applier.apply(window)
        if window.last:
            consumer.ack(window)  # written, or another applier's R covers it
            applied += written
    return applied
