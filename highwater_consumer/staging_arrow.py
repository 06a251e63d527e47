"""A columnar window's JSON rows as COPY text, built by Arrow's kernels (no object a row).

The same text as :func:`~highwater_consumer.staging.stage_records` makes from per-row rows:
each key's last version in commit order, one line a row (shape, key and envelope, tab
separated), backslash, tab, newline and carriage return escaped, the shapes numbered in the
order they first appear (0: a delete). The shapes come from the reader's scan (``after``'s
names); the key's width too, checked against the table's primary key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from schemas.jsontext import loads_exact

from .decoding import ApplyError, JsonDecoder
from .staging import Staged, Table

_BINARY = pa.large_binary()
_ESCAPES = ((b"\\", b"\\\\"), (b"\n", b"\\n"), (b"\t", b"\\t"), (b"\r", b"\\r"))


def last_versions(rows: pa.Table) -> pa.Table:
    """Each key's last row, in the order of those last rows (rows in commit order)."""
    n = rows.num_rows
    place = pc.indices_nonzero(pc.is_valid(rows.column("offset")))  # 0 .. n-1
    indexed = pa.table({"key": rows.column("key"), "at": place})
    last = indexed.group_by("key", use_threads=False).aggregate([("at", "max")])
    if last.num_rows == n:
        return rows
    at = last.column("at_max")
    return rows.take(at.take(pc.sort_indices(at)))


def _escaped(data: Any) -> Any:
    for find, put in _ESCAPES:
        if pc.any(pc.match_substring(data, find)).as_py():
            data = pc.replace_substring(data, find, put)
    return data


def _json(data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return loads_exact(data)


def plain(rows: pa.Table) -> bool:
    """Whether every row is a JSON object with an array key as the records' staging takes."""
    if not rows.num_rows:
        return True
    heads = (
        pc.equal(pc.binary_slice(rows.column("value"), 0, 1), pa.scalar(b"{", _BINARY)),
        pc.equal(pc.binary_slice(rows.column("key"), 0, 1), pa.scalar(b"[", _BINARY)),
    )
    return all(pc.all(h).as_py() for h in heads)


def stage_columns(table: Table, rows: pa.Table) -> Staged:
    """The COPY text of one table's rows of a window (JSON, :func:`plain`), each key once."""
    rows = last_versions(rows)
    width = len(table.key)
    wrong = pc.not_equal(rows.column("width"), width)
    if pc.any(wrong).as_py():
        at = pc.index(wrong, True).as_py()
        values = _json(rows.column("key")[at].as_py())
        table.key_of(values)  # says how it does not match
        raise ApplyError(f"{table.name}: the key {values!r} does not match the primary key")
    encoded = pc.dictionary_encode(rows.column("shape")).combine_chunks()
    tags = pc.fill_null(pc.add(pc.cast(encoded.indices, pa.int32()), 1), 0)
    shapes = [tuple(s.decode().split("\0")) if s else () for s in encoded.dictionary.to_pylist()]
    counted = pc.value_counts(tags)
    found = dict(
        zip(counted.field("values").to_pylist(), counted.field("counts").to_pylist(), strict=True)
    )
    counts = tuple(found.get(tag, 0) for tag in range(len(shapes) + 1))
    rests = [tuple(c for c in columns if c not in table.key) for columns in shapes]
    union = tuple(dict.fromkeys(c for rest in rests for c in rest))
    missing = [c for c in (*table.key, *union) if c not in table.types]
    if missing:
        raise ApplyError(f"table {table.name} has no column {missing[0]!r} (add it to apply)")
    lines = pc.binary_join_element_wise(
        pc.cast(pc.cast(tags, pa.string()), _BINARY),
        _escaped(rows.column("key")),
        _escaped(rows.column("value")),
        pa.scalar(b"", _BINARY),
        pa.scalar(b"\t", _BINARY),
    ).combine_chunks()
    # each line ends "\t" (the empty last element): a newline in its place
    ends = pc.binary_slice(lines, 0, -1)
    text = pc.binary_join_element_wise(ends, pa.scalar(b"", _BINARY), pa.scalar(b"\n", _BINARY))
    data = _data(text)
    return Staged(table, (*table.key, *union), tuple(rests), counts, data, True)


def stage_window(window: Any, find: Callable[[str], Table]) -> tuple[Staged, ...] | None:
    """An ``ArrowWindow``'s COPY text per table (``find``: a table by the changefeed's name).

    None: not JSON records as :func:`plain` takes them; the window is staged as its rows.
    """
    owner = getattr(window.reader, "__self__", None)
    if not isinstance(owner, JsonDecoder) or not plain(window.rows):
        return None
    numbers = window.rows.column("table")
    staged = []
    for number in sorted(set(numbers.unique().to_pylist())):
        rows = window.rows
        if len(window.tables) > 1:
            rows = rows.filter(pc.equal(numbers, number))
        staged.append(stage_columns(find(window.tables[number]), rows))
    return tuple(staged)


def _data(lines: Any) -> bytes:
    """An array's values, one after the other."""
    array = lines.combine_chunks() if isinstance(lines, pa.ChunkedArray) else lines
    if not len(array):
        return b""
    _, offsets, data = array.buffers()
    bounds = pa.Array.from_buffers(pa.int64(), len(array) + 1, [None, offsets], offset=array.offset)
    start, stop = bounds[0].as_py(), bounds[len(array)].as_py()
    found: bytes = data.slice(start, stop - start).to_pybytes()
    return found
