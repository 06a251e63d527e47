"""A record's headers from a column of its row (``headers_json_column_name``, CockroachDB's).

The column holds a JSON object (or its text); its members become the record's Kafka headers
and the column leaves the value. Pure Python, as every encoder: the Python loop and the
initial scan call it before encoding a row.
"""

from __future__ import annotations

from typing import Any

import orjson

from schemas.errors import EncodingError
from schemas.jsontext import fragment, loads_exact

from .base import ChangeRow

Headers = list[dict[str, Any]]  # a record's headers, as the output rows carry them (key, value)


def split_headers(row: ChangeRow, column: str) -> tuple[ChangeRow, Headers | None]:
    """``row`` without ``column``, and the headers its JSON object makes.

    The column's value in the new version (a delete: the old one) is a JSON object, or its
    text; each member is a header: a string as its UTF-8, any other value as its JSON text
    (numbers as the source wrote them), a null left out. The column leaves both images, and
    the source's text with it (the value is written anew). A value that is no JSON object is
    an :class:`EncodingError` (a bad record).
    """
    after, before = row.after, row.before
    image = after if after is not None else before
    found = None if image is None else image.get(column)
    headers = None if found is None else _headers(column, found)
    return (
        row._replace(after=_without(after, column), before=_without(before, column), source=None),
        headers,
    )


def _without(image: dict[str, Any] | None, column: str) -> dict[str, Any] | None:
    if image is None or column not in image:
        return image
    return {k: v for k, v in image.items() if k != column}


def _headers(column: str, found: Any) -> Headers:
    members = found
    if isinstance(found, str):
        try:
            members = loads_exact(found.encode())
        except ValueError:
            members = None
    if not isinstance(members, dict):
        raise EncodingError(
            "value", f"headers_json_column_name {column!r}: its value is not a JSON object"
        )
    return [
        {"key": str(name), "value": value.encode() if isinstance(value, str) else _json(value)}
        for name, value in members.items()
        if value is not None
    ]


def _json(value: Any) -> bytes:
    try:
        return orjson.dumps(value, default=fragment)
    except orjson.JSONEncodeError as exc:
        raise EncodingError("value", f"a header's value cannot be written as JSON: {exc}") from None
