"""A window's rows as the COPY text of a staging table (pure: no connection, no SQL run).

An applier loads a window (or a piece of one) into a table with one ``COPY … FROM STDIN``
and merges it from there with one statement per kind (``INSERT … SELECT … ON CONFLICT DO
UPDATE`` for the rows, ``DELETE … USING`` for the deletes): a statement per window, not per
row. The staging table has the target's columns (by name and type) and one more,
:data:`SHAPE`: 0 for a delete (only the key is given), ``n`` for a row whose ``after`` has
the columns of the window's n-th *shape* (a column added mid-stream makes a second shape;
a row sets only the columns its ``after`` has, as the per-row statements did).

Within a window only a key's last version matters (the transaction shows nothing in
between), so a key's rows collapse to the last one in commit order. Values go as the text
PostgreSQL reads for the column's type (the staging column has it, so COPY reads the text as
``%s::<type>`` did): JSON numbers as the changefeed wrote them, JSON values as JSON text,
``None`` as COPY's NULL (backslash N); text format escapes a backslash, tab, newline and carriage
return in a value (any other character goes as it is, UTF-8).
"""

from __future__ import annotations

import datetime
import decimal
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from psycopg import sql

from schemas.jsontext import Number, dumps, loads_exact

from .decoding import ApplyError, Image
from .windows import Row

SHAPE = "_hw_shape"  # the staging table's own column: 0 a delete, n > 0 a row of shape n
NULL = "\\N"  # COPY text's NULL; a value's backslash is doubled, so no text reads as it


@dataclass(frozen=True)
class Table:
    """A target table: its columns' types, its primary key in key order, its staging table."""

    name: str  # as the user named it
    ident: sql.Composable  # as written in SQL
    types: Mapping[str, str]  # column -> format_type
    key: tuple[str, ...]
    stage_types: Mapping[str, str]  # column -> its type in staging (a domain's base type)
    number: int  # its staging tables' number in the session

    @property
    def stage(self) -> sql.Identifier:
        """The temporary staging table of values (made at first use in a session)."""
        return sql.Identifier(f"highwater_stage_{self.number}")

    @property
    def records(self) -> sql.Identifier:
        """The temporary staging table of JSON records: key and envelope as written."""
        return sql.Identifier(f"highwater_records_{self.number}")

    @property
    def texts(self) -> sql.Identifier:
        """An empty temporary table of the target's columns as text: a row type to read into."""
        return sql.Identifier("pg_temp", f"highwater_texts_{self.number}")

    def key_of(self, values: Any) -> Sequence[Any]:
        """A row's key values in the key's order (JSON: the array; Avro: the record)."""
        if type(values) is list and len(values) == len(self.key):
            return values
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


_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def field(value: Any) -> str:
    """A value as one field of COPY's text format (None as its NULL)."""
    kind = type(value)
    if kind is str:
        found = value
    elif kind is int:
        return str(value)  # digits: nothing to escape
    elif kind is Number:
        return value.text  # type: ignore[no-any-return]
    elif value is None:
        return NULL
    else:
        found = text(value)
    if "\\" in found or "\t" in found or "\n" in found or "\r" in found:
        return found.translate(_ESCAPES)  # type: ignore[no-any-return]
    return found  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Staged:
    """One table's rows of a window, ready to COPY into its staging table.

    ``columns``: what the COPY gives after :data:`SHAPE` (the key, then every column a
    shape sets); ``shapes[n - 1]``: the non-key columns the rows of shape n set;
    ``counts[n]``: how many rows of shape n (``counts[0]``: deletes); ``data``: the COPY text.
    ``records``: the rows are JSON records as written (:func:`stage_records`), not values.
    """

    table: Table
    columns: tuple[str, ...]
    shapes: tuple[tuple[str, ...], ...]
    counts: tuple[int, ...]
    data: bytes
    records: bool = False

    @property
    def rows(self) -> int:
        """The rows it writes (after the collapse)."""
        return sum(self.counts)


def last_versions(rows: Iterable[Row]) -> dict[str, list[Row]]:
    """Per table, each key's last row in commit order (rows come in commit order)."""
    last: dict[tuple[str, bytes], Row] = {}
    for row in rows:
        place = (row.table, row.key)
        last.pop(place, None)  # the key's place moves to its last version
        last[place] = row
    tables: dict[str, list[Row]] = {}
    for (name, _), row in last.items():
        tables.setdefault(name, []).append(row)
    return tables


def stage(table: Table, images: Sequence[Image]) -> Staged:
    """The COPY text of a table's rows (each key once, its last version last)."""
    shapes: dict[tuple[str, ...], int] = {}
    tags: list[int] = []
    for _, after in images:
        if after is None:
            tags.append(0)
            continue
        columns = tuple(after)
        tag = shapes.get(columns)
        if tag is None:
            tag = shapes[columns] = len(shapes) + 1
        tags.append(tag)
    rests = [tuple(c for c in columns if c not in table.key) for columns in shapes]
    union = list(dict.fromkeys(c for rest in rests for c in rest))
    missing = [c for c in (*table.key, *union) if c not in table.types]
    if missing:
        raise ApplyError(f"table {table.name} has no column {missing[0]!r} (add it to apply)")
    lines: dict[tuple[str, ...], str] = {}  # by the key's text: one row a key in staging
    nulls = "\t" + "\t".join([NULL] * len(union)) if union else ""
    key_of = table.key_of
    for (key_values, after), tag in zip(images, tags, strict=True):
        key = tuple([field(v) for v in key_of(key_values)])
        if after is None:
            body = nulls
        elif union:  # a column its shape does not set is NULL here, not merged from staging
            get = after.get
            body = "\t" + "\t".join([field(get(c)) for c in union])
        else:
            body = ""
        lines.pop(key, None)
        lines[key] = f"{tag}\t" + "\t".join(key) + body + "\n"
    counts = [0] * (len(shapes) + 1)
    for tag in tags:
        counts[tag] += 1
    written = "".join(lines.values())
    try:
        data = written.encode()
    except UnicodeEncodeError as exc:
        raise ApplyError(f"table {table.name}: a value is not Unicode text ({exc})") from exc
    if len(lines) != len(images):  # keys written two ways collapsed again: recount
        counts = [0] * (len(shapes) + 1)
        for line in lines.values():
            counts[int(line[: line.index("\t")])] += 1
    return Staged(table, (*table.key, *union), tuple(rests), tuple(counts), data)


def stage_records(table: Table, rows: Sequence[Row]) -> Staged | None:
    """The COPY text of JSON rows as their records: each key and envelope as written.

    PostgreSQL reads the values out of them (``->>``'s text, cast to the column's type: the
    text :func:`text` gives, without a Python object per value); here each record is only
    read by orjson for its shape (its ``after``'s columns, or a delete), where numbers do not
    matter. Rows collapse by their key as written (:func:`last_versions`). None: a record
    this does not take (not a plain UTF-8 JSON object): stage its values.
    """
    shapes: dict[tuple[str, ...], int] = {}
    counts = [0]
    lines = []
    width = len(table.key)
    for row in rows:
        key, value = row.key, row.value
        if value is None or value[:1] != b"{" or key[:1] != b"[":
            return None
        after = _read(value)["after"]  # its numbers may be inexact: only its columns count
        values = _read(key)
        if type(values) is not list or len(values) != width:
            table.key_of(values)  # says how it does not match
        if after is None:
            tag = 0
        else:
            columns = tuple(after)
            tag = shapes.get(columns, 0)
            if not tag:
                tag = shapes[columns] = len(shapes) + 1
                counts.append(0)
        counts[tag] += 1
        line = b"%d\t%b\t%b\n" % (tag, key, value)
        if b"\\" in line or b"\r" in line or line.count(b"\t") != 2 or line.count(b"\n") != 1:
            line = b"%d\t%b\t%b\n" % (tag, _escaped(key), _escaped(value))  # seldom
        lines.append(line)
    rests = [tuple(c for c in columns if c not in table.key) for columns in shapes]
    union = tuple(dict.fromkeys(c for rest in rests for c in rest))
    missing = [c for c in (*table.key, *union) if c not in table.types]
    if missing:
        raise ApplyError(f"table {table.name} has no column {missing[0]!r} (add it to apply)")
    return Staged(table, (*table.key, *union), tuple(rests), tuple(counts), b"".join(lines), True)


def _read(data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:  # an integer beyond 64 bits, a lone surrogate
        return loads_exact(data)


def _escaped(data: bytes) -> bytes:
    """JSON text as a COPY text field: a backslash (JSON's escapes) and whitespace escaped."""
    if b"\\" in data or b"\n" in data or b"\t" in data or b"\r" in data:
        return (
            data.replace(b"\\", b"\\\\")
            .replace(b"\n", b"\\n")
            .replace(b"\t", b"\\t")
            .replace(b"\r", b"\\r")
        )
    return data
