"""Source adapters: one raw Kafka record in, one internal change (or marker) out.

Every adapter turns a source record into the same shape, so everything after decoding is
format-blind: a :class:`Change` (table, key, before, after, op, time; the source position
travels beside it) or a :class:`Marker` (a resolved time for the record's partition). A
record that cannot be decoded raises :class:`BadRecord` with the reason, and the caller
applies ``on_error``.

Pure Python, no Spark: it runs on the executors inside ``pipeline.batch``'s Arrow loop, once
per record, so it is written for speed (orjson, tuples, no regular expressions).
"""

from __future__ import annotations

import json
from typing import Any, Literal, NamedTuple

import orjson

from schemas.hlc import Hlc

Op = Literal["insert", "update", "delete", "upsert"]


class Change(NamedTuple):
    """One version of one row, as the source sent it."""

    key: list[Any]
    after: dict[str, Any] | None
    before: dict[str, Any] | None
    op: Op
    ts: Hlc


class Marker(NamedTuple):
    """A resolved marker: no new row at or below ``resolved`` follows on this partition."""

    resolved: Hlc


class BadRecord(Exception):
    """A source record that cannot be decoded; the message is the reason."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads(data: bytes) -> Any:
    """Parse JSON; orjson first, the standard library for what orjson refuses (big integers).

    Raises ``ValueError`` on anything that is not JSON (NaN and Infinity included).
    """
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data, parse_constant=_reject_constant)


def parse_hlc(text: Any, field: str) -> Hlc:
    """The HLC in a JSON string field, or :class:`BadRecord` naming the field."""
    if not isinstance(text, str):
        raise BadRecord(f"{field!r} is not an HLC timestamp")
    wall, dot, logical = text.partition(".")
    if (
        not wall.isdigit()
        or len(wall) > 20
        or (dot and not (logical.isdigit() and len(logical) <= 10))
        or not wall.isascii()
        or not logical.isascii()
    ):
        raise BadRecord(f"{field!r} is not an HLC timestamp")
    return Hlc(int(wall), int(logical) if logical else 0)


class NativeAdapter:
    """Format ``native``: CockroachDB's wrapped JSON envelope (contract §3).

    * key: a JSON array of primary-key values;
    * value: ``{"after": {…}|null, "before": {…}|null, "updated": "<hlc>"}``, ``before``
      optional, ``after: null`` a delete;
    * marker: a null key and ``{"resolved": "<hlc>"}``.
    """

    def decode(self, key: bytes | None, value: bytes | None) -> Change | Marker:
        """Decode one record."""
        if value is None:
            raise BadRecord("null value")
        try:
            body = loads(value)
        except ValueError:
            raise BadRecord("value is not a JSON object") from None
        if not isinstance(body, dict):
            raise BadRecord("value is not a JSON object")
        if key is None:
            if "resolved" not in body:
                raise BadRecord("null key but no 'resolved' field")
            return Marker(parse_hlc(body["resolved"], "resolved"))
        try:
            key_values = loads(key)
        except ValueError:
            key_values = None
        if not isinstance(key_values, list):
            raise BadRecord("key is not a JSON array")
        if "updated" not in body:
            raise BadRecord("no 'updated' field")
        ts = parse_hlc(body["updated"], "updated")
        after = body.get("after")
        before = body.get("before")
        if after is not None and not isinstance(after, dict):
            raise BadRecord("'after' is not an object or null")
        if before is not None and not isinstance(before, dict):
            raise BadRecord("'before' is not an object or null")
        op: Op = "delete" if after is None else "update" if before is not None else "upsert"
        return Change(key_values, after, before, op, ts)


ADAPTERS = {"native": NativeAdapter}


def adapter(source_format: str) -> NativeAdapter:
    """The adapter for a source's ``format``."""
    return ADAPTERS[source_format]()
