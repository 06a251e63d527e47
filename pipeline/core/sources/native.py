"""Format ``native``: CockroachDB's changefeed JSON (contract §3)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from encoders.base import SourceText

from .base import (
    BadRecord,
    Change,
    Marker,
    Op,
    exact_flags,
    json_object,
    no_key_names,
    no_shape,
    parse_hlc,
    parse_json,
)

if TYPE_CHECKING:
    import pyarrow as pa


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

    in_band_markers = True

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

    exact = staticmethod(exact_flags)
    shape = staticmethod(no_shape)  # its records carry no column types
    key_names = staticmethod(no_key_names)  # its keys are arrays of values

    def decode(
        self, key: bytes | None, value: bytes | None, exact: bool | None = None
    ) -> Change | Marker:
        """Decode one record (``exact``: as :meth:`exact` flagged it; None: find out)."""
        if key is None:
            return self.marker(value)
        return self.change(self.key(key, exact), value, exact, key)

    def key(self, key: bytes, exact: bool | None = None) -> list[Any]:
        """A row's key: its primary-key values (the initial scan parses each key once)."""
        key_values: list[Any] = parse_json(key, exact, list, "key is not a JSON array")
        return key_values

    def marker(self, value: bytes | None) -> Marker:
        """A record with a null key: a resolved marker."""
        body = json_object(value)
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
        body = json_object(value, exact)
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
