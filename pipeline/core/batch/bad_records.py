"""A record the loop cannot write as a row: a schema change found, or a dead letter.

A value its declared type cannot hold is checked against the record's own schema first
(Debezium's, read on this error path only): a column retyped or the table rekeyed upstream is
a schema change for the driver to settle, not a bad value. A record no adapter or encoder
takes is counted in its partition's summary and, with a dead-letter topic (``on_error: dlq``,
or the record an operator skips on resume), written there as it came with the reason and its
place in headers (a pointer to it when the copy would be too large); without one its
partition's walk stops there. The loop's tasks and the initial scan's share it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from encoders.avro import AvroEncoder
from schemas.connect import key_change, type_changes
from schemas.errors import EncodingError, OversizedRecord, RecordRef, SchemaChange

from ..sources import Adapter
from .contract import RECORD_FRAMING, BatchPlan, PartitionSeen
from .output import ERROR_HEADER, SOURCE_HEADER, OutputColumns, bad_reason

if TYPE_CHECKING:
    import pyarrow as pa


class BadRecords:
    """A task's bad records: what ``plan`` says to do with each, by its source's adapter."""

    def __init__(self, plan: BatchPlan, adapters: Mapping[str, Adapter]) -> None:
        self.plan = plan
        self.adapters = adapters

    def retyped(
        self, topic: str, key: bytes | None, value: bytes | None, exc: EncodingError
    ) -> EncodingError:
        """A value its declared type cannot hold: a schema change if its source retyped it.

        That is, where the record's own schema (Debezium's) gives a column a type that maps to
        another Avro type than the output's, or keys the table by other columns; else
        ``exc``, a bad value. The record's schema is read on this error path only.
        """
        encoder = self.plan.encoders[topic]
        if isinstance(exc, SchemaChange) or not isinstance(encoder, AvroEncoder):
            return exc
        try:
            shape = self.adapters[topic].shape(key, value)
        except Exception:  # a record it cannot read says nothing of types
            return exc
        if shape is None:
            return exc
        changed = type_changes(encoder.row_schema, shape.columns)
        rekeyed = key_change(encoder.key_columns, shape.key)
        if not changed and rekeyed is None:
            return exc
        return SchemaChange(encoder.table, (), changed, rekeyed)

    def dead_letter(  # noqa: PLR0917 - the record, where it sits in its stretch
        self,
        out: OutputColumns,
        state: PartitionSeen,
        offset: int,
        exc: Exception,
        run: pa.RecordBatch,
        index: int,
    ) -> bool:
        """Count a bad record (``exc`` says why); with a dead-letter topic, write it there.

        Returns True when the partition's walk stops here: without a dead-letter topic
        (``on_error: fail`` or ``pause``) nothing after a bad record is written. A row too
        large for Kafka (:class:`OversizedRecord`) goes to ``oversized_rows: dlq``'s topic,
        if set, whatever ``on_error`` says, and then stops nothing.
        """
        state.bad += 1
        sp = state.partition
        dlq, reason = self.plan.dlq_topic, bad_reason(exc)
        diverted = isinstance(exc, OversizedRecord) and self.plan.oversized_topic is not None
        if diverted:
            dlq = self.plan.oversized_topic
        elif dlq is None and self.plan.skip == RecordRef(sp.topic, sp.partition, offset):
            dlq = self.plan.skip_topic
            reason = f"skipped by an operator (resume --skip-bad-record): {reason}"
        elif state.first_bad is None:
            state.first_bad = (offset, reason)
        if dlq is None:
            return True
        where = f"{sp.topic}/{sp.partition}@{offset}"
        headers = run.column("headers")[index].as_py() if "headers" in run.schema.names else None
        key, value = run.column("key")[index].as_py(), run.column("value")[index].as_py()
        size = len(key or b"") + len(value or b"")
        size += sum(len(h["key"]) + len(h["value"] or b"") for h in headers or ())
        if size + len(reason) > self.plan.max_record_bytes - RECORD_FRAMING - len(where):
            # the producer would refuse the copy: the dead letter points at the source record
            reason += (
                f"; the source record ({size:,} bytes) is too large to copy here: read {where}"
            )
            headers, value = None, None
            if len(key or b"") > (self.plan.max_record_bytes - RECORD_FRAMING) // 2:
                key = None
        ours = [
            {"key": ERROR_HEADER, "value": reason.encode()},
            {"key": SOURCE_HEADER, "value": where.encode()},
        ]
        out.headers.extend([None] * (len(out.key) - len(out.headers)))  # rows before it
        out.key.append(key)
        out.value.append(value)
        out.headers.append([*(headers or []), *ours])
        out.topic_run(dlq, 1)
        return False
