"""Source adapters: one raw Kafka record in, one internal change (or marker) out.

Every adapter turns a source record into the same shape, so everything after decoding is
format-blind: a :class:`Change` (table, key, before, after, op, time; the source position
travels beside it) or a :class:`Marker` (a resolved time for the record's partition). A
record that cannot be decoded raises :class:`BadRecord` with the reason, and the caller
applies ``on_error``.

Pure Python, no Spark: it runs on the executors inside ``pipeline.core.batch``'s Arrow loop, once
per record, so it is written for speed (orjson, tuples, no regular expressions).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import orjson

from encoders.base import SourceText
from schemas.hlc import Hlc
from schemas.jsontext import dumps, loads_exact, lossy

if TYPE_CHECKING:
    import pyarrow as pa

Op = Literal["insert", "update", "delete", "upsert"]


class Change(NamedTuple):
    """One version of one row, as the source sent it."""

    key: list[Any]
    after: dict[str, Any] | None
    before: dict[str, Any] | None
    op: Op
    ts: Hlc
    text: SourceText | None = None  # the source's own text, where encoders may pass it on


class Marker(NamedTuple):
    """A resolved marker: no new row at or below ``resolved`` follows on this partition."""

    resolved: Hlc


class BadRecord(Exception):
    """A source record that cannot be decoded; the message is the reason."""


NOT_JSON = "not JSON"
# A number token (outside strings) whose text orjson might not give back; see NativeAdapter.exact
_RISKY_NUMBER = (
    r'^(?:[^"]|"(?:[^"\\]|\\.)*")*?[:\[,]\s*(?:-0[,\]}\s]|'
    r"-?(?:\d{19}|\d+\.\d+0(?:[^0-9]|$)|\d+\.\d{6}|\d{10}\d*\.|\d+(?:\.\d+)?[eE]))"
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


def _canonical(text: str) -> bool:
    """Whether an HLC text :func:`parse_hlc` read is written as ``str(Hlc)`` writes it."""
    return len(text) > 11 and text[-11] == "." and (text[0] != "0" or text[1] == ".")


# The top-level ``updated`` of a native value when it is the value's last member, as CockroachDB
# and the generator write it (walls that fit an int64 only). In valid JSON a match can only be
# the last member of the outermost object: ``"updated"`` followed by ``:`` is a member name
# (inside a string its quotes would be escaped), and only the outermost object's closing brace
# is followed by nothing. Duplicate names: the last one counts, for orjson as for the match.
_LAST_UPDATED = (
    r'"updated"\s*:\s*"(?P<wall>[0-8]?[0-9]{1,18})(?:\.(?P<logical>[0-9]{1,10}))?"\s*\}\s*$'
)
_TAIL_BYTES = 64  # where the match must lie: the regex reads no more of a value than this


class NativeAdapter:
    """Format ``native``: CockroachDB's wrapped JSON envelope (contract §3).

    * key: a JSON array of primary-key values;
    * value: ``{"after": {…}|null, "before": {…}|null, "updated": "<hlc>"}``, ``before``
      optional, ``after: null`` a delete;
    * marker: a null key and ``{"resolved": "<hlc>"}``.
    """

    def times(self, values: pa.Array) -> tuple[pa.Array, pa.Array]:
        """The time of each value as ``(wall, logical)`` int64 arrays, without decoding it.

        A vectorised hint for the initial scan, which only needs times to know which versions
        are superseded: null where the time is not the value's last member (decode to know).
        For a value that is valid JSON, a time found here is the one :meth:`change` reads.
        """
        import pyarrow as pa  # noqa: PLC0415 - executors only
        import pyarrow.compute as pc  # noqa: PLC0415

        found = pc.extract_regex(pc.binary_slice(values, -_TAIL_BYTES), _LAST_UPDATED)
        wall = pc.cast(pc.struct_field(found, "wall"), pa.int64())
        logical = pc.struct_field(found, "logical")
        logical = pc.cast(pc.if_else(pc.equal(logical, b""), b"0", logical), pa.int64())
        return wall, logical

    def exact(self, keys: pa.Array, values: pa.Array) -> list[bool]:
        """Per record, whether its key or value holds a number orjson would change.

        Vectorised over a batch (RE2, outside strings): a record it flags is read with the
        exact reader; one it does not is read by orjson alone. It may flag more than needed
        (that costs time, never exactness): any number with an exponent, a fraction ending in
        0 (but ``.0``) or of six digits or more, ten integer digits or more before a
        fraction, nineteen digits or more, and ``-0``.
        """
        import pyarrow.compute as pc  # noqa: PLC0415 - pyarrow loads on the executors only

        risky = pc.or_kleene(
            pc.match_substring_regex(keys, _RISKY_NUMBER),
            pc.match_substring_regex(values, _RISKY_NUMBER),
        )
        return [bool(flag) for flag in pc.fill_null(risky, False).to_pylist()]

    def decode(
        self, key: bytes | None, value: bytes | None, exact: bool | None = None
    ) -> Change | Marker:
        """Decode one record (``exact``: as :meth:`exact` flagged it; None: find out)."""
        if key is None:
            return self.marker(value)
        return self.change(self.key(key, exact), value, exact, key)

    def key(self, key: bytes, exact: bool | None = None) -> list[Any]:
        """A row's key: its primary-key values (the initial scan parses each key once)."""
        key_values: list[Any] = _parsed(key, exact, list, "key is not a JSON array")
        return key_values

    def marker(self, value: bytes | None) -> Marker:
        """A record with a null key: a resolved marker."""
        body = _object(value)
        if "resolved" not in body:
            raise BadRecord("null key but no 'resolved' field")
        return Marker(parse_hlc(body["resolved"], "resolved"))

    def change(
        self,
        key_values: list[Any],
        value: bytes | None,
        exact: bool | None = None,
        key: bytes | None = None,
    ) -> Change:
        """A row change, its key already parsed (``key``: its text, kept with the value's)."""
        body = _object(value, exact)
        updated = body.get("updated")
        if updated is None:
            raise BadRecord("no 'updated' field")
        ts = parse_hlc(updated, "updated")
        after = body.get("after")
        before = body.get("before")
        if after is None:
            op: Op = "delete"
        elif type(after) is dict:
            op = "upsert" if before is None else "update"
        else:
            raise BadRecord("'after' is not an object or null")
        if before is not None and type(before) is not dict:
            raise BadRecord("'before' is not an object or null")
        if key is None or value is None or not _canonical(updated):
            return Change(key_values, after, before, op, ts)
        return Change(key_values, after, before, op, ts, SourceText(key, value, tuple(body)))


def _object(value: bytes | None, exact: bool | None = None) -> dict[str, Any]:
    """A JSON object value, or :class:`BadRecord`."""
    if value is None:
        raise BadRecord("null value")
    body: dict[str, Any] = _parsed(value, exact, dict, "value is not a JSON object")
    return body


def _parsed(data: bytes, exact: bool | None, kind: type, what: str) -> Any:
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


ADAPTERS = {"native": NativeAdapter}


def adapter(source_format: str) -> NativeAdapter:
    """The adapter for a source's ``format``."""
    return ADAPTERS[source_format]()
