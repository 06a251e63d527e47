"""JSON change envelopes (contract §4).

``wrapped`` (the default)::

    {"after": {…}|null, "before": {…}|null, "key": […], "topic": "…",
     "updated": "<hlc>", "mvcc_timestamp": "<hlc>"}

with ``before`` only under ``diff``, ``key`` under ``key_in_value``, ``topic`` under
``topic_in_value``, and the times under ``updated`` / ``mvcc_timestamp``, in that order.
``bare`` puts the row's columns at the top level and the same metadata under ``"__hw__"``;
``row`` is the columns alone. Under ``bare`` and ``row`` a delete is a tombstone (null value),
as under ``key_only``, whose values are always null. The key is the JSON array of primary-key
values; a resolved marker is ``{"resolved": "<hlc>"}`` with a null key.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from schemas.hlc import Hlc

from .base import ChangeRow, Context, EnvelopeOptions

META_FIELD = "__hw__"


def _dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON; orjson, or the standard library for what orjson refuses (big ints)."""
    try:
        return orjson.dumps(obj)
    except TypeError:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


class JsonEncoder:
    """The JSON encoder, one row at a time."""

    def __init__(self, options: EnvelopeOptions) -> None:
        self.options = options

    def key(self, row: ChangeRow, ctx: Context) -> bytes:
        """The JSON array of primary-key values."""
        return _dumps(row.key)

    def value(self, row: ChangeRow, ctx: Context) -> bytes | None:
        """The envelope, or None (a tombstone) where the envelope has no value."""
        envelope = self.options.envelope
        if envelope == "key_only" or (envelope in ("bare", "row") and row.after is None):
            return None
        if envelope == "row":
            return _dumps(row.after)
        meta = self.metadata(row, ctx)
        if envelope == "bare":
            assert row.after is not None  # noqa: S101 - tombstone handled above
            return _dumps({**row.after, **({META_FIELD: meta} if meta else {})})
        return _dumps({"after": row.after, **meta})

    def metadata(self, row: ChangeRow, ctx: Context) -> dict[str, Any]:
        """The optional fields, in envelope order."""
        opts = self.options
        meta: dict[str, Any] = {}
        if opts.diff:
            meta["before"] = row.before
        if opts.key_in_value:
            meta["key"] = row.key
        if opts.topic_in_value:
            meta["topic"] = ctx.topic
        if opts.updated:
            meta["updated"] = str(row.updated)
        if opts.mvcc_timestamp:
            meta["mvcc_timestamp"] = str(row.mvcc_timestamp)
        return meta

    def resolved(self, ts: Hlc, ctx: Context) -> bytes:
        """``{"resolved": "<hlc>"}``."""
        return _dumps({"resolved": str(ts)})
