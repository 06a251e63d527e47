"""Protobuf change envelopes (``encoder.format: protobuf``; ``schemas/highwater_changefeed.proto``).

Every record's value is a ``Message``: ``wrapped`` (``after``, ``before`` under diff,
``updated``, ``mvcc_timestamp``, ``key`` under key_in_value, ``topic`` under
topic_in_value), ``bare`` (the columns, the options' fields in ``meta``; a delete is a
tombstone, as in JSON), ``enriched`` (``after``, ``before``, ``op``, ``key``, ``ts_ns``,
``source`` under ``enriched_properties: [source]``) or ``resolved``. The key is a ``Key``: a
map of the key's columns by name (``key_column``: that column), serialized deterministically
(map entries sorted), so a row's versions have the same key bytes and partition. A row is a
map of its columns, each value's kind as ``schemas/protobuf.py`` chooses it (the declared
table's types refine it). With a registry each record is in Confluent's wire format; without
one it is the message alone, as CockroachDB writes it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from schemas import highwater_changefeed_pb2 as pb
from schemas.errors import EncodingError
from schemas.hlc import Hlc
from schemas.protobuf import fill, kinds, serialized
from schemas.tables import TableSchema

from .base import ChangeRow, Context, EnvelopeOptions, key_column_value, key_names
from .enriched import op_of, source_block

_OPS = {"c": pb.OP_CREATE, "u": pb.OP_UPDATE, "d": pb.OP_DELETE}


class ProtobufEncoder:
    """One output topic's protobuf records, one row at a time (the Python loop's)."""

    verbatim: tuple[str, ...] | None = None
    walk: Mapping[str, Any] | None = None  # the JVM walk writes no protobuf
    scan_walk: Mapping[str, Any] | None = None
    # a key is a map by column name: the row's origin names them, unless the table is
    # declared (its primary key), and enriched's source block is made of it
    wants_origin = True

    def __init__(
        self,
        options: EnvelopeOptions,
        changefeed: str,
        table: TableSchema | None,
        *,
        key_header: bytes = b"",
        value_header: bytes = b"",
    ) -> None:
        """``table``: the declared table (its key's names and column types), if any."""
        self.changefeed = changefeed
        self.key_header, self.value_header = key_header, value_header
        self._envelope = options.envelope
        self._diff, self._key = options.diff, options.key_in_value
        self._topic, self._updated = options.topic_in_value, options.updated
        self._mvcc, self._key_column = options.mvcc_timestamp, options.key_column
        self._source = "source" in options.enriched_properties
        self._primary = None if table is None else table.primary_key
        self._kinds = {} if table is None else kinds(table.record)
        self.wants_origin = table is None or options.envelope == "enriched"

    def _key_message(self, row: ChangeRow) -> pb.Key:
        key = pb.Key()
        names = key_names(row, self._primary, "format protobuf")
        fill(key.key, dict(zip(names, row.key, strict=True)), self._kinds)
        return key

    def key(self, row: ChangeRow, ctx: Context) -> bytes:
        """The ``Key`` of the row's key columns (``key_column``: that column)."""
        column = self._key_column
        try:
            if column is None:
                key = self._key_message(row)
            else:
                key = pb.Key()
                fill(key.key, {column: key_column_value(row, column)}, self._kinds)
            return self.key_header + serialized(key)
        except (ValueError, TypeError, OverflowError) as exc:
            raise _misfit("key", row, exc) from None

    def value(self, row: ChangeRow, ctx: Context) -> bytes | None:
        """The row's ``Message`` (None: a tombstone, a delete under ``bare``)."""
        if self._envelope == "bare" and row.after is None:
            return None
        message = pb.Message()
        try:
            if self._envelope == "enriched":
                self._enriched(message.enriched, row)
            elif self._envelope == "bare":
                fill(message.bare.values, row.after or {}, self._kinds)
                self._meta(message.bare.meta, row, ctx)
            else:
                self._images(message.wrapped, row)
                self._meta(message.wrapped, row, ctx)
            return self.value_header + serialized(message)
        except (ValueError, TypeError, OverflowError) as exc:
            raise _misfit("value", row, exc) from None

    def _images(self, envelope: Any, row: ChangeRow) -> None:
        if row.after is not None:
            envelope.after.SetInParent()  # an empty row is a row, not a delete
            fill(envelope.after.values, row.after, self._kinds)
        if self._diff and row.before is not None:
            envelope.before.SetInParent()
            fill(envelope.before.values, row.before, self._kinds)

    def _meta(self, meta: Any, row: ChangeRow, ctx: Context) -> None:
        """The options' fields (``Wrapped`` and ``Meta`` name them alike)."""
        if self._updated:
            meta.updated = str(row.updated)
        if self._mvcc:
            meta.mvcc_timestamp = str(row.mvcc_timestamp)
        if self._key:
            meta.key.CopyFrom(self._key_message(row))
        if self._topic:
            meta.topic = ctx.topic

    def _enriched(self, enriched: pb.Enriched, row: ChangeRow) -> None:
        self._images(enriched, row)
        enriched.op = _OPS[op_of(row)]
        if self._key:
            enriched.key.CopyFrom(self._key_message(row))
        enriched.ts_ns = time.time_ns()
        if self._source:
            block = source_block(row, self.changefeed, self._mvcc, self._updated, self._primary)
            source = enriched.source
            for name, value in block.items():
                if value is None:
                    continue
                if isinstance(value, list):
                    getattr(source, name).extend(value)
                else:
                    setattr(source, name, value)

    def resolved(self, ts: Hlc, ctx: Context) -> bytes:
        """A ``Message`` with ``resolved`` (``bare``: ``bare_resolved``)."""
        message = pb.Message()
        if self._envelope == "bare":
            message.bare_resolved.meta.resolved = str(ts)
        else:
            message.resolved.resolved = str(ts)
        return self.value_header + serialized(message)


def _misfit(side: str, row: ChangeRow, exc: Exception) -> EncodingError:
    """A value protobuf cannot hold as its column says (a bad record, named)."""
    return EncodingError(
        side, f"{side} of table {row.table!r} cannot be written as protobuf: {exc}"
    )
