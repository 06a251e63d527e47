"""The JSON envelopes of ``encoders/json.py`` as Spark column expressions.

Encoding row by row in Python would put a Python worker in the path of every record; these
expressions build the same JSON in the JVM by splicing the source's JSON text (``after``,
``before``, the key array) into the envelope, so values are never parsed and re-printed.
``tests/integration/test_envelopes.py`` holds both encoders to the same output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from encoders.base import EnvelopeOptions
from encoders.json import META_FIELD

if TYPE_CHECKING:
    from pyspark.sql import Column


def json_value(
    options: EnvelopeOptions,
    *,
    key: Column,
    after: Column,
    before: Column,
    updated: Column,
    mvcc_timestamp: Column,
    topic: Column,
) -> Column:
    """The record value for ``options.envelope`` (null where it is a tombstone).

    ``key``, ``after`` and ``before`` are JSON text; ``updated`` and ``mvcc_timestamp`` HLC
    text; ``topic`` the output topic.
    """
    from pyspark.sql import functions as F  # noqa: PLC0415

    envelope = options.envelope
    if envelope == "key_only":
        return F.lit(None).cast("string")
    if envelope == "row":
        return after
    fields: list[tuple[str, Column]] = []
    if options.diff:
        fields.append(("before", F.coalesce(before, F.lit("null"))))
    if options.key_in_value:
        fields.append(("key", key))
    if options.topic_in_value:
        fields.append(("topic", _quoted(topic)))
    if options.updated:
        fields.append(("updated", _quoted(updated)))
    if options.mvcc_timestamp:
        fields.append(("mvcc_timestamp", _quoted(mvcc_timestamp)))
    if envelope == "wrapped":
        return _object([("after", F.coalesce(after, F.lit("null"))), *fields])
    # bare: the row's columns, then the metadata object under META_FIELD, in one object
    if not fields:
        return after
    meta = F.concat(F.lit(f'"{META_FIELD}":'), _object(fields), F.lit("}"))
    open_object = F.regexp_replace(after, r"\}\s*$", "")  # "{…" without its closing brace
    separator = F.when(F.trim(after) == "{}", F.lit("")).otherwise(F.lit(","))
    return F.when(after.isNotNull(), F.concat(open_object, separator, meta))


def _quoted(text: Column) -> Column:
    from pyspark.sql import functions as F  # noqa: PLC0415

    return F.concat(F.lit('"'), text, F.lit('"'))


def _object(fields: list[tuple[str, Column]]) -> Column:
    from pyspark.sql import functions as F  # noqa: PLC0415

    parts: list[Column] = [F.lit("{")]
    for i, (name, value) in enumerate(fields):
        parts += [F.lit(("," if i else "") + f'"{name}":'), value]
    parts.append(F.lit("}"))
    return F.concat(*parts)
