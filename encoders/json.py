"""JSON change envelopes (contract §4).

``wrapped`` (the default)::

    {"after": {…}|null, "before": {…}|null, "key": […], "topic": "…",
     "updated": "<hlc>", "mvcc_timestamp": "<hlc>"}

with ``before`` only under ``diff``, ``key`` under ``key_in_value``, ``topic`` under
``topic_in_value``, and the times under ``updated`` / ``mvcc_timestamp``, in that order.
``bare`` puts the row's columns at the top level and the same metadata under ``"__hw__"``;
``row`` is the columns alone. Under ``bare`` and ``row`` a delete is a tombstone (null value),
as under ``key_only``, whose values are always null. The key is the JSON array of primary-key
values (under ``key_column``, of that column's value alone); a resolved marker is
``{"resolved": "<hlc>"}`` with a null key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from schemas.errors import EncodingError
from schemas.hlc import Hlc
from schemas.jsontext import fragment, loads_exact

from .base import ChangeRow, Context, EnvelopeOptions, key_column_value

META_FIELD = "__hw__"


def dumps(obj: Any, side: str = "value") -> bytes:
    """Compact UTF-8 JSON, numbers as the source wrote them (``schemas/jsontext.py``)."""
    try:
        return orjson.dumps(obj, default=fragment)
    except orjson.JSONEncodeError as exc:  # e.g. nesting beyond orjson's depth
        raise EncodingError(side, f"{side} cannot be written as JSON: {exc}") from None


class JsonEncoder:
    """The JSON encoder, one row at a time."""

    wants_origin = False  # what the source said of a change: enriched's (encoders/enriched.py)

    def __init__(self, options: EnvelopeOptions) -> None:
        self.options = options
        # Read once: value() runs for every row.
        self._envelope = options.envelope
        self._diff = options.diff
        self._key = options.key_in_value
        self._topic = options.topic_in_value
        self._updated = options.updated
        self._mvcc = options.mvcc_timestamp
        self._has_meta = any((self._diff, self._key, self._topic, self._updated, self._mvcc))
        self._key_column = options.key_column  # the records' key: this column's value
        headers = options.headers_json_column_name  # the records' headers: this column's
        members = ("after", *("before",) * self._diff, *("updated",) * self._updated)
        plain = self._envelope == "wrapped" and not (self._key or self._topic or self._mvcc)
        # A wrapped value made of the source's own members only: a source value with exactly
        # these members (``SourceText``) already is the output (not so when a column of it
        # leaves it for the headers).
        self.verbatim: tuple[str, ...] | None = members if plain and headers is None else None
        # The walk passes such values on when they carry their time (it keeps the floor); a
        # column's headers taken out of them (HeadersColumn.java), a column's key (KeyColumn)
        self.walk: Mapping[str, Any] | None = None
        if plain and self._updated:
            walk: dict[str, Any] = {"kind": "verbatim", "members": list(members)}
            if headers is not None:
                walk["headers_column"] = headers
            if self._key_column is not None:
                walk["key_column"] = self._key_column
            self.walk = walk
        own = self._key_column is not None or headers is not None  # the scan's walk writes neither
        # An initial scan's rows are written again whole (``updated`` is the scan's time): the
        # JVM writes such a wrapped envelope when it holds nothing but the images and times.
        self.scan_walk: Mapping[str, Any] | None = None
        if self._envelope == "wrapped" and not (self._key or self._topic or own):
            self.scan_walk = {
                "kind": "envelope",
                "members": [*members, *("mvcc_timestamp",) * self._mvcc],
            }
        self._last: tuple[Hlc, str] | None = None  # an initial scan's rows share one `updated`

    def key(self, row: ChangeRow, ctx: Context) -> bytes:
        """The JSON array of primary-key values, compact: one text per key, whatever the source.

        (Under ``key_column``: the array of that column's value, :func:`key_column_value`.)

        Kafka partitions and compacts by the key's bytes, so a row's key is written the same
        way by the initial scan and the stream, however the source spaced or escaped it. A
        key read without exact numbers (``SourceText``: the value passes on as it came) is
        read again exactly when its text is not already what is written here.
        """
        if self._key_column is not None:
            return dumps([key_column_value(row, self._key_column)], "key")
        key = dumps(row.key, "key")
        source = row.source
        if source is not None and key != source.key:
            key = dumps(loads_exact(source.key), "key")
        return key

    def value(self, row: ChangeRow, ctx: Context) -> bytes | None:
        """The envelope, or None (a tombstone) where the envelope has no value."""
        envelope = self._envelope
        if envelope == "wrapped":
            source = row.source
            if source is not None and source.members == self.verbatim:
                return source.value
            return dumps(self._metadata(row, ctx, {"after": row.after}))
        if envelope == "key_only" or row.after is None:
            return None  # bare and row: a delete is a tombstone
        if envelope == "row" or not self._has_meta:
            return dumps(row.after)
        return dumps({**row.after, META_FIELD: self._metadata(row, ctx, {})})

    def _metadata(self, row: ChangeRow, ctx: Context, into: dict[str, Any]) -> dict[str, Any]:
        if self._diff:
            into["before"] = row.before
        if self._key:
            into["key"] = row.key
        if self._topic:
            into["topic"] = ctx.topic
        if self._updated:
            last = self._last
            if last is None or last[0] is not row.updated:
                last = self._last = (row.updated, str(row.updated))
            into["updated"] = last[1]
        if self._mvcc:
            mvcc = row.mvcc_timestamp
            into["mvcc_timestamp"] = (
                into["updated"] if self._updated and mvcc is row.updated else str(mvcc)
            )
        return into

    def resolved(self, ts: Hlc, ctx: Context) -> bytes:
        """``{"resolved": "<hlc>"}``."""
        return dumps({"resolved": str(ts)})
