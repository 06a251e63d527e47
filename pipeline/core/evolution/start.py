"""A table's output schema at the start: derived from its source's newest change, or declared.

Where a source types its columns (Debezium's schemas, canal-json's ``mysqlType``), the start
reads the last records of each of its partitions and takes the newest change's shape (by
its commit time, then by when Kafka took it). A table without a ``table_schema`` takes its
schema from that shape (none yet: from its first row, later); a declared one is written as
declared, with a warning for the job status where it differs from the source's newest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from pipeline.config import ChangefeedConfig, SourceConfig
from schemas.connect import NoAvroType, derived_table, key_change, type_changes
from schemas.errors import ConfigError, SourceError
from schemas.hlc import Hlc
from schemas.tables import TableSchema
from sinks.admin import partition_counts

from ..batch import range_reader, read_range, watermarks
from ..ledger import SourcePartition
from ..sources import Adapter, BadRecord, Change, SourceShape, adapter

TAIL = 20  # records read at the end of each partition to derive a table's schema at start
TYPED = frozenset({"debezium", "canal-json"})  # formats whose records type their columns


def start_tables(
    config: ChangefeedConfig, client: Mapping[str, Any]
) -> tuple[dict[str, TableSchema | None], dict[str, SourceShape], list[str]]:
    """Each source topic's table at the start (None: not known yet), its newest shape, warnings.

    The warnings: the declared schemas that differ from their sources' newest.
    """
    tables: dict[str, TableSchema | None] = {}
    warnings, newest = [], {}
    for i, s in enumerate(config.sources):
        shape = newest_shape(config, s, client) if s.format in TYPED else None
        if shape is not None:
            newest[s.topic] = shape
        declared = s.declared_schema
        if declared is None:
            tables[s.topic] = _derived_at_start(i, s, shape)
            continue
        tables[s.topic] = declared
        mismatch = declared_mismatch(i, declared, shape)
        if mismatch is not None:
            warnings.append(mismatch)
    return tables, newest, warnings


def described_tables(config: ChangefeedConfig, client: Mapping[str, Any]) -> dict[str, TableSchema]:
    """JSON output's tables, by name, where known: declared, or typed by the source's newest.

    Only for the job status (JSON output writes whatever a row holds): a source whose newest
    change no Avro type holds exactly, that has none yet, or whose tail cannot be read now is
    left out, not refused: the run starts as it did before the status named its tables.
    """
    out = {}
    for s in config.sources:
        declared, shape = s.declared_schema, None
        if declared is None and s.format in TYPED:
            try:
                shape = newest_shape(config, s, client)
            except (SourceError, KafkaException):  # the status does without; the stream reports
                continue
        if declared is None and shape is not None:
            try:
                declared = derived_table(s.table, shape.columns, shape.key)
            except NoAvroType:
                continue
        if declared is not None:
            out[s.table] = declared
    return out


def source_adapter(config: ChangefeedConfig, topic: str) -> Adapter:
    """The adapter of a source topic's records, as the stream's."""
    return adapter(config.formats[topic], config.registries.get(topic))


def newest_shape(
    config: ChangefeedConfig, source: SourceConfig, client: Mapping[str, Any]
) -> SourceShape | None:
    """The columns of the newest change at a topic's end (None: none there yet).

    Newest by the change's own time (its commit), then by when Kafka took it: of the last
    changes of each partition, counting columns would take an older change's (one with a
    column dropped since, or a type widened since) as often as the newest's.
    """
    read = source_adapter(config, source.topic)
    newest: tuple[tuple[Hlc, int], SourceShape] | None = None
    consumer = range_reader(client, "highwater-schema-start")
    try:
        count = partition_counts(client, [source.topic])[source.topic]
        for partition in range(count):
            sp = SourcePartition(source.topic, partition)
            low, high = watermarks(consumer, TopicPartition(sp.topic, sp.partition), 30)
            for message in read_range(consumer, sp, max(low, high - TAIL), high):
                found = _timed_shape(read, message.key(), message.value())
                if found is None:
                    continue
                when = (found[0], message.timestamp()[1])
                if newest is None or when > newest[0]:
                    newest = (when, found[1])
    finally:
        consumer.close()
    return None if newest is None else newest[1]


def _timed_shape(
    read: Adapter, key: bytes | None, value: bytes | None
) -> tuple[Hlc, SourceShape] | None:
    """A change record's time and shape (None: not a change it can read; the stream reports it)."""
    try:
        change, shape = read.decode(key, value), read.shape(key, value)
    except BadRecord:
        return None
    if not isinstance(change, Change) or shape is None:
        return None
    return change.ts, shape


def _derived_at_start(
    index: int, source: SourceConfig, shape: SourceShape | None
) -> TableSchema | None:
    """A table's schema from its source's newest (None: not known yet)."""
    if shape is None:
        return None
    try:
        return derived_table(source.table, shape.columns, shape.key)
    except NoAvroType as exc:
        raise ConfigError(
            [
                (
                    f"sources[{index}].table_schema",
                    f"is needed: the output schema cannot be derived from the source's: {exc}",
                )
            ]
        ) from None


def declared_mismatch(index: int, declared: TableSchema, shape: SourceShape | None) -> str | None:
    """How a declared ``table_schema`` differs from its source's newest schema, if it does."""
    if shape is None:
        return None
    missing = [c for c in shape.columns if c not in declared.columns]
    found = [f"column(s) {', '.join(missing)} not declared"] if missing else []
    found.extend(type_changes(declared.record, shape.columns))
    rekeyed = key_change(declared.primary_key, shape.key)
    if rekeyed is not None:
        found.append(rekeyed)
    if not found:
        return None
    return (
        f"sources[{index}].table_schema differs from the source's newest schema: "
        f"{'; '.join(found)} (the declared schema is written; rows it cannot hold follow "
        "schema_change_policy)"
    )
