"""The source adapters' contract: one raw Kafka record in, what it means out.

Every adapter (``format:`` of a source) turns a source record into the same shapes, so
everything after decoding is format-blind:

* a :class:`Change`: table row key, before, after, op, commit time as an HLC (and, where an
  encoder may pass it on, the source's own text);
* several changes (:data:`Rows`) when one record carries several rows (canal-json batches);
* a :class:`Marker`: a resolved time for the record's partition;
* None: a record that is neither and carries nothing to emit (a Debezium tombstone after a
  delete, a DDL event), counted and skipped;
* :class:`BadRecord` raised with the reason, for ``on_error``.

An adapter also says which records need the exact JSON reader (:func:`exact_flags`, shared
by every JSON format) and may hint at each value's time without decoding it (``times``, for
the initial scan). The JSON helpers here keep every number's text (``schemas/jsontext.py``):
values pass through unchanged whatever the format.

Pure Python, no Spark: it runs on the executors inside ``pipeline.core.batch.loop``'s Arrow loop,
once per record, so it is written for speed (orjson, tuples, no regular expressions).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

import orjson

from encoders.base import SourceText
from schemas.hlc import Hlc
from schemas.jsontext import Number, dumps, loads_exact, lossy

if TYPE_CHECKING:
    import pyarrow as pa

Op = Literal["insert", "update", "delete", "upsert"]
# A place in the upstream database's own change log (an LSN, a binlog file and offset, a
# transaction's commit and its event's index): compared element by element.
LogPosition = tuple[int, ...]


class Change(NamedTuple):
    """One version of one row, as the source sent it."""

    key: list[Any]
    after: dict[str, Any] | None
    before: dict[str, Any] | None
    op: Op
    ts: Hlc
    text: SourceText | None = None  # the source's own text, where encoders may pass it on
    tx: tuple[str, int] | None = None  # (transaction id, place in it), where the source says
    # the source's own position (Debezium: PostgreSQL's LSNs, a binlog's file/position/row),
    # increasing along a source partition: a change at or below one already read there is a
    # re-send (an upstream that restarted), never news
    position: LogPosition | None = None
    # a binlog change (MySQL, MariaDB) in a transaction: its order within its commit. Its
    # ``ts`` is then only its statement's start (the binlog's event time, in seconds); its
    # commit time is its transaction's END's, which the batch puts (``batch/loop.py``)
    order: int | None = None
    # a binlog snapshot's read (MySQL, MariaDB): where its snapshot began, (file, pos). Its
    # ``ts`` is its table's scan start, which can lie above changes committed after that
    # point; the batch times it just above what its partition has passed (``batch/loop.py``)
    point: LogPosition | None = None


class Marker(NamedTuple):
    """A resolved marker: no new row at or below ``resolved`` follows on this partition."""

    resolved: Hlc


class BadRecord(Exception):
    """A source record that cannot be decoded; the message is the reason.

    ``tx``/``ts``: the transaction place and time of a change whose values are bad, where
    they could be read (so a dead-lettered change still counts for its transaction).
    """

    tx: tuple[str, int] | None = None
    ts: Hlc | None = None
    position: LogPosition | None = None


class SourceUnavailable(Exception):
    """What reading the source needs is out of reach now (its schema registry).

    Not a bad record: the loops let it through, the batch fails and runs again (Spark's task
    retries, then a resume), so no good record is ever dead-lettered for an outage.
    """


Rows = tuple["Change", ...]  # several rows of one record

NOT_JSON = "not JSON"
# A number token (outside strings) whose text orjson might not give back; see NativeAdapter.exact
# (orjson keeps integers exactly from -2**63 to 2**64 - 1: every one of 19 digits or fewer
# but the negative ones from -9000000000000000000 down; Debezium's nanosecond times are such)
_RISKY_NUMBER = (
    r'^(?:[^"]|"(?:[^"\\]|\\.)*")*?[:\[,]\s*(?:-0[,\]}\s]|-9\d{18}|'
    r"-?(?:\d{20}|\d+\.\d+0(?:[^0-9]|$)|\d+\.\d{6}|\d{10}\d*\.|\d+(?:\.\d+)?[eE]))"
)


def loads(data: bytes, exact: bool | None = None) -> Any:
    """Parse JSON, every number exactly as the source wrote it (``schemas/jsontext.py``).

    ``exact``: whether the text holds a number orjson would change (:meth:`NativeAdapter.exact`
    tells, for a whole batch at once); None: find out after parsing. orjson reads what it
    can read without loss; the exact reader the rest, and what orjson refuses that may still
    be JSON (numbers beyond a double's range). Raises :class:`BadRecord` for anything that is
    not JSON, nesting deeper than can be read, and strings with lone surrogates (text no
    consumer's UTF-8 can hold).
    """
    if not exact:
        try:
            value = orjson.loads(data)
        except orjson.JSONDecodeError:
            return _loads_refused(data)
        if exact is False or not lossy(value, data):
            return value
    try:
        return loads_exact(data)
    except RecursionError:
        raise BadRecord("JSON nested too deeply") from None
    except (ValueError, UnicodeDecodeError):
        raise BadRecord(NOT_JSON) from None


def _loads_refused(data: bytes) -> Any:
    """What orjson refused: a lone surrogate, too deep, or not JSON at all."""
    try:
        value = loads_exact(data)
        dumps(value)  # lone surrogates cannot be written as UTF-8
    except RecursionError:
        raise BadRecord("JSON nested too deeply") from None
    except orjson.JSONEncodeError:
        raise BadRecord("a string holds a lone surrogate (not Unicode text)") from None
    except (ValueError, UnicodeDecodeError):
        raise BadRecord(NOT_JSON) from None
    return value


def parse_hlc(text: Any, field: str) -> Hlc:
    """The HLC in a JSON string field, or :class:`BadRecord` naming the field.

    The wire form is ``<wall>[.<logical, up to 10 digits>]``, ASCII digits only.
    """
    if isinstance(text, str) and text.isascii():
        wall, _, logical = text.partition(".")
        if wall.isdigit() and len(wall) <= 20:
            if not logical:
                if "." not in text:
                    return tuple.__new__(Hlc, (int(wall), 0))
            elif logical.isdigit() and len(logical) <= 10:
                return tuple.__new__(Hlc, (int(wall), int(logical)))
    raise BadRecord(f"{field!r} is not an HLC timestamp")


def exact_number(text: str) -> int | Number:
    """A JSON number's text as the exact reader keeps it: an int, or its text beyond 18 digits."""
    digits = text.lstrip("-")
    if digits.isdigit() and len(digits) <= 18 and text != "-0":
        return int(text)
    return Number(text)


def record_time(item: Change | Marker | Rows | None) -> Hlc | None:
    """The time a decoded record stands at: a change's, a marker's; None for nothing."""
    if item is None:
        return None
    if isinstance(item, Marker):
        return item.resolved
    if isinstance(item, Change):
        return item.ts
    return max((change.ts for change in item), default=None)


def exact_flags(keys: pa.Array, values: pa.Array) -> list[bool]:
    """Per record, whether its key or value holds a number orjson would change.

    Vectorised over a batch (RE2, outside strings): a record it flags is read with the exact
    reader; one it does not is read by orjson alone. It may flag more than needed (that costs
    time, never exactness): any number with an exponent, a fraction ending in 0 (but ``.0``)
    or of six digits or more, ten integer digits or more before a fraction, twenty digits
    or more, nineteen after a minus sign and a 9, and ``-0``.
    """
    import pyarrow.compute as pc  # noqa: PLC0415 - pyarrow loads on the executors only

    risky = pc.or_kleene(
        pc.match_substring_regex(keys, _RISKY_NUMBER),
        pc.match_substring_regex(values, _RISKY_NUMBER),
    )
    return [bool(flag) for flag in pc.fill_null(risky, False).to_pylist()]


def no_times(values: pa.Array) -> tuple[pa.Array, pa.Array]:
    """``times`` of a format whose time is not found without decoding: all null."""
    import pyarrow as pa  # noqa: PLC0415 - executors only

    nulls = pa.nulls(len(values), pa.int64())
    return nulls, nulls


class SourceShape(NamedTuple):
    """A change record's columns as its source describes them (``Adapter.shape``)."""

    columns: Mapping[str, Mapping[str, Any]]  # by name, in the table's order: Connect schemas
    key: tuple[str, ...]  # the primary key's columns, in key order


def no_shape(key: bytes | None, value: bytes | None) -> SourceShape | None:
    """``shape`` of a format whose records carry no column types."""
    return None


def no_key_names(key: bytes | None, value: bytes | None) -> tuple[str, ...] | None:
    """``key_names`` of a format whose keys name no columns (a JSON array of values)."""
    return None


class Adapter(Protocol):
    """What every source format provides (see the module's description)."""

    # whether the data topics carry resolved markers (Debezium's come from elsewhere)
    in_band_markers: bool

    def times(self, values: pa.Array) -> tuple[pa.Array, pa.Array]:
        """Each value's time as ``(wall, logical)`` int64 arrays; null: decode to know."""
        ...

    def exact(self, keys: pa.Array, values: pa.Array) -> list[bool]:
        """Per record, whether it needs the exact JSON reader."""
        ...

    def decode(
        self, key: bytes | None, value: bytes | None, exact: bool | None = None
    ) -> Change | Marker | Rows | None:
        """One record."""
        ...

    def key(self, key: bytes, exact: bool | None = None) -> list[Any]:
        """A record key's primary-key values (the initial scan parses each key once)."""
        ...

    def change(
        self,
        key_values: list[Any],
        value: bytes | None,
        exact: bool | None = None,
        key: bytes | None = None,
    ) -> Change | None:
        """A keyed record's change, its key already parsed (None: nothing to emit)."""
        ...

    def marker(self, value: bytes | None) -> Marker | None:
        """A record with a null key: a marker, or None (nothing)."""
        ...

    def key_names(self, key: bytes | None, value: bytes | None) -> tuple[str, ...] | None:
        """The names of a change record's key columns, in key order (None: it names none)."""
        ...

    def shape(self, key: bytes | None, value: bytes | None) -> SourceShape | None:
        """A change record's columns and key as its source types them (``schemas/connect.py``).

        None: the format carries no types (the schema-change policy ``evolve`` needs them).
        """
        ...


def json_object(value: bytes | None, exact: bool | None = None) -> dict[str, Any]:
    """A JSON object value, or :class:`BadRecord`."""
    if value is None:
        raise BadRecord("null value")
    body: dict[str, Any] = parse_json(value, exact, dict, "value is not a JSON object")
    return body


def parse_json(data: bytes, exact: bool | None, kind: type, what: str) -> Any:
    """``data`` parsed, if it is JSON of type ``kind``; else :class:`BadRecord` saying ``what``.

    A specific reason (too deep, a lone surrogate) follows ``what``.
    """
    try:  # the common case first, with no call in between: this runs twice per change
        parsed = orjson.loads(data) if exact is False else loads(data, exact)
    except orjson.JSONDecodeError:
        parsed = _refused(data, what)
    except BadRecord as exc:
        raise BadRecord(_reason(what, exc)) from None
    if type(parsed) is not kind:
        raise BadRecord(what)
    return parsed


def _refused(data: bytes, what: str) -> Any:
    try:
        return _loads_refused(data)
    except BadRecord as exc:
        raise BadRecord(_reason(what, exc)) from None


def _reason(what: str, exc: BadRecord) -> str:
    reason = str(exc)
    return what if reason == NOT_JSON else f"{what}: {reason}"
