"""Output schemas that follow their tables: ``schema_change_policy``.

A row its output schema cannot hold (a column added upstream: the encoder's
``SchemaChange``) ends its partition's part of the batch there, and the rest is left to the
driver (``batch/loop.py``: a rest with ``new_shape``). :meth:`SchemaEvolution.settle` decides, by
the policy:

* ``stop``: nothing runs again. The coordinator checkpoints just before the row, sends the
  marker the high-water mark allows and pauses the changefeed, naming the record, the
  table, the column(s) and the commit time; a new ``table_schema`` and ``resume`` go on
  from the row, without loss or duplicates;
* ``evolve``: the row's source record is read again here and its columns' types taken from
  the source's own schema (``Adapter.shape``: Debezium's, in JSON with schemas or Avro;
  ``schemas/connect.py`` maps them). The table's schema gains the columns it lacks, each
  optional with a null default (``TableSchema.with_columns``): a new version registered
  once the registry finds it compatible with the subject's latest (its rule; BACKWARD
  unless someone chose another), or published to the schema topic. The rest runs again in
  the same batch with the new encoder, and every later batch uses it. A change that cannot
  evolve so (the source carries no types, a column no Avro type holds exactly, the registry
  refuses) stops as ``stop`` does, and the pause says why;
* ``backfill``: ``evolve``, then the table is emitted again at the change's commit time from
  its source topic, before the rows of the new shape (``rescan.py``): the coordinator takes
  the :class:`~.rescan.Rescan` it is due (:meth:`SchemaEvolution.take_rescans`).

A Debezium table without a ``table_schema`` takes its whole schema from its source: at the
start from the newest change at its partitions' ends (``start.py``), else (an empty topic) from
its first row, which evolves it from nothing; its policy is ``evolve`` unless the config says
otherwise.

Evolved schemas last as long as the run: a restart begins from the declared (or derived)
ones and meets the same rows again, which evolve them the same way (the registry answers
the same ids).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import Any

from encoders.avro import AvroEncoder, AvroPending, Framing
from encoders.base import Encoder
from encoders.enriched import EnrichedAvroEncoder, EnrichedJsonEncoder
from encoders.json import JsonEncoder
from encoders.protobuf import ProtobufEncoder
from pipeline.config import ChangefeedConfig, SourceConfig
from schemas.avro import OutputSchemas, marker_schema
from schemas.connect import (
    NoAvroType,
    column_fields,
    derived_table,
    key_change,
    type_changes,
)
from schemas.errors import HighwaterError, RecordRef, SchemaChangeError
from schemas.hlc import Hlc
from schemas.tables import TableSchema
from sinks.compacted import CompactedTopic
from sinks.schemas import SchemaPublisher, register_protobuf

from ..batch import BatchPlan, Deferred, Settled, range_reader, read_range
from ..ledger import SourcePartition
from ..sources import Adapter, BadRecord, SourceShape
from .rescan import Rescan, defaults_of
from .start import described_tables, source_adapter, start_tables

log = logging.getLogger(__name__)

Record = tuple[bytes | None, bytes | None]  # a source record's key and value


@dataclass(frozen=True)
class TableVersion:
    """A table's output schema as the run writes it, and its last change."""

    schema: TableSchema | None  # None: to be derived from its source's first row
    version: str  # how a reader names it: the registry's id, or the fingerprint
    changed_at: str | None = None  # the commit time of the first row of the last change
    added: tuple[str, ...] = ()  # the columns it added

    def to_json(self) -> dict[str, Any]:
        """What the job status shows of it."""
        return {
            "version": self.version,
            "columns": [] if self.schema is None else list(self.schema.columns),
            "changed_at": self.changed_at,
            "added": list(self.added),
        }


def _before(time: str, version: TableVersion) -> bool:
    return version.changed_at is not None and Hlc.parse(time) < Hlc.parse(version.changed_at)


def json_encoders(config: ChangefeedConfig) -> dict[str, Encoder]:
    """JSON and protobuf output's encoders, by source topic.

    CockroachDB's enriched envelope (each of its declared table, whose schema
    ``enriched_properties: [schema]`` writes), or one encoder for every topic; protobuf's
    (each its table's key names and column types, its topic's registry ids if any).
    """
    if config.encoder.format == "protobuf":
        return {s.topic: protobuf_encoder(config, s) for s in config.sources}
    if config.encoder.envelope != "enriched":
        return dict.fromkeys(config.routes, JsonEncoder(config.encoder))
    return {
        s.topic: EnrichedJsonEncoder(config.encoder, config.changefeed_id, s.declared_schema)
        for s in config.sources
    }


def protobuf_encoder(config: ChangefeedConfig, source: SourceConfig) -> ProtobufEncoder:
    """A source table's protobuf encoder: its messages registered first where a registry is."""
    registry = config.encoder.schema_registry
    key_header = value_header = b""
    if registry is not None:
        topic = config.output_topic(source)
        key_header, value_header = register_protobuf(registry.client_config(), topic)
    return ProtobufEncoder(
        config.encoder,
        config.changefeed_id,
        source.declared_schema,
        key_header=key_header,
        value_header=value_header,
    )


def avro_encoder(
    config: ChangefeedConfig, schemas: OutputSchemas, framing: Framing, table: str
) -> AvroEncoder:
    """Avro output's encoder of ``table``: CockroachDB's enriched envelope, or any other."""
    if config.encoder.envelope == "enriched":
        return EnrichedAvroEncoder(schemas, framing, config.encoder, table, config.changefeed_id)
    return AvroEncoder(schemas, framing, config.encoder, table)


class SchemaEvolution:
    """The run's output encoders, and their schemas as the policy lets them follow the tables."""

    def __init__(
        self,
        config: ChangefeedConfig,
        publisher: SchemaPublisher | None,
        tables: Mapping[str, TableSchema | None],
        source: Mapping[str, Any],
        read: Callable[[SourcePartition, int], Record] | None = None,
        *,
        newest: Mapping[str, SourceShape] | None = None,
        warnings: list[str] | None = None,
    ) -> None:
        """Make each source topic's encoder (``publisher`` None: JSON output).

        ``tables``: each source topic's output table (None: not known yet); ``read``: a
        source record by partition and offset (default: from Kafka); ``newest``: each source
        topic's newest shape found at the start; ``warnings``: what the start found amiss.
        """
        self.config = config
        self._publisher = publisher
        self._source = source
        self._read = read or self._record
        self._encoders: dict[str, Encoder] = {}  # source topic -> its output topic's encoder
        self.tables: dict[str, TableVersion] = {}  # source topic -> its output schema
        if publisher is None:
            self._encoders = json_encoders(config)
        for topic, table in tables.items():
            self._use(topic, table)
        self.refused: dict[RecordRef, str] = {}  # why a change could not evolve
        self._tried: set[RecordRef] = set()  # rows run again with an evolved schema
        self._rescans: list[Rescan] = []  # tables evolved under backfill, to emit again
        self.changes = 0  # schema changes evolved in this run
        self.warnings = warnings or []  # declared schemas that differ from their sources'
        self._newest = dict(newest or {})
        self.described: dict[str, TableSchema] = {}  # JSON output: tables typed at the start

    @classmethod
    def open(
        cls,
        config: ChangefeedConfig,
        sink: Mapping[str, Any],
        source: Mapping[str, Any],
        resources: ExitStack,
    ) -> SchemaEvolution:
        """The run's encoders: Avro schemas registered or published first, derived where due."""
        if config.encoder.format != "avro":  # JSON, protobuf: table-independent records
            evolution = cls(config, None, {}, source)
            evolution.described = described_tables(config, source)
            return evolution
        registry = config.encoder.schema_registry
        if registry is None:
            schema_topic = CompactedTopic(sink, config.encoder.schema_topic)
            resources.callback(schema_topic.close)
            schema_topic.ensure(config.sink.replication_factor)
            publisher = SchemaPublisher(None, schema_topic)
        else:
            prefix = config.encoder.avro_schema_prefix or ""
            publisher = SchemaPublisher(registry.client_config(), subject_prefix=prefix)
        tables, newest, warnings = start_tables(config, source)
        return cls(config, publisher, tables, source, newest=newest, warnings=warnings)

    @property
    def encoders(self) -> Mapping[str, Encoder]:
        """Each source topic's encoder, as the schemas stand."""
        return self._encoders

    def policy(self, topic: str) -> str:
        """``schema_change_policy`` for a source topic: as configured, else by its schema.

        One of ``stop``, ``evolve``, ``backfill``.

        A declared ``table_schema`` stops; one derived from the source evolves.
        """
        configured = self.config.schema_change_policy
        if configured is not None:
            return configured
        declared = self.config.sources[list(self.config.routes).index(topic)].table_schema
        return "stop" if declared is not None else "evolve"

    def status(self) -> dict[str, Any]:
        """Per table: its output schema's version, columns and last change."""
        return {self.config.tables[t]: v.to_json() for t, v in sorted(self.tables.items())}

    def settle(self, plan: BatchPlan, rests: list[Deferred]) -> Settled:
        """The plan to run rests at a schema change again with, and those it can run.

        Under ``evolve`` (and ``backfill``) each such rest's table evolves first, the earliest
        change first; under ``stop`` none runs. A table due to be emitted again
        (``backfill``) is scanned up to where the rests stand, so under ``backfill`` a rest
        runs alone in its round: the later ones wait, and the rows before a change are
        written before its table is scanned.
        """
        changes = sorted(
            (r for r in rests if r.new_shape), key=lambda r: Hlc.parse(str(r.new_shape))
        )
        again: list[Deferred] = []
        for i, rest in enumerate(changes):
            if self._rescans or (again and self.policy(rest.partition.topic) == "backfill"):
                return Settled(self._with_encoders(plan), again, tuple(changes[i:]))
            if self._evolved(rest):
                again.append(rest)
        return Settled(self._with_encoders(plan) if again else plan, again)

    def _with_encoders(self, plan: BatchPlan) -> BatchPlan:
        return replace(plan, encoders=dict(self._encoders))

    def before_scan(self) -> dict[str, dict[str, Any]]:
        """Ready the tables for a changefeed's first scan; each source topic's defaults.

        The snapshot is the tables as they are: under ``evolve`` and ``backfill`` a table's
        schema first takes the columns its source's newest shape has and it lacks (the rows
        would meet them at once). Under ``backfill`` a column a row's record predates takes
        its default, as the later scans at a change do; a row the schema still cannot hold
        pauses the scan (``stop``).
        """
        defaults = {}
        for topic, shape in self._newest.items():
            policy, current = self.policy(topic), self.tables.get(topic)
            if policy == "stop" or current is None or current.schema is None:
                continue
            new = [c for c in shape.columns if c not in current.schema.columns]
            if new:
                try:
                    grown = current.schema.with_columns(column_fields(shape.columns, new))
                except NoAvroType as exc:
                    log.warning("table %s not evolved before its scan: %s", topic, exc)
                    continue
                self._use(topic, grown)
                self.changes += 1
            if policy == "backfill":
                defaults[topic] = defaults_of(shape.columns)
        return defaults

    def take_rescans(self) -> list[Rescan]:
        """The tables ``backfill`` evolved since last asked, to emit again (``rescan.py``)."""
        rescans, self._rescans = self._rescans, []
        return rescans

    def rescan_at(self, change: RecordRef, time: Hlc) -> Rescan:
        """A scan at a schema change (``time``: its) that a killed run left unfinished.

        The table's schema evolves from the change's row again if this run's does not hold
        it yet (a declared one); the defaults are read from that row's schema.
        """
        sp = SourcePartition(change.topic, change.partition)
        try:
            shape = self._evolve(sp, change.offset, str(time.next()))  # the row's own time
        except (NoAvroType, HighwaterError) as exc:
            raise SchemaChangeError(
                change, f"its table cannot be emitted again: {exc}", str(time)
            ) from None
        return Rescan(change, time, defaults_of(shape.columns))

    def explain(self, change: SchemaChangeError) -> SchemaChangeError:
        """The pause's error, with why the change could not evolve where it was tried."""
        why = self.refused.get(change.record)
        if why is None:
            return change
        return SchemaChangeError(change.record, f"{change.reason}; not evolved: {why}", change.time)

    def _use(self, topic: str, table: TableSchema | None, time: str | None = None) -> None:
        """Make ``table`` (None: not known yet) the output schema of ``topic``'s table."""
        config, publisher = self.config, self._publisher
        assert publisher is not None  # noqa: S101 - Avro output
        name, output = config.tables[topic], config.routes[topic]
        if table is None:
            marker = marker_schema(name, config.encoder.avro_schema_prefix)
            header = publisher.marker(output, marker)
            self._encoders[topic] = AvroPending(name, marker, header)
            self.tables[topic] = TableVersion(None, "none yet (derived from the first row)")
            return
        schemas = OutputSchemas.of(table, config.encoder)
        before = self.tables.get(topic)
        framing = publisher.framing(output, schemas, evolved=before is not None)
        self._encoders[topic] = avro_encoder(config, schemas, framing, name)
        added = () if before is None else _added(before, table)
        self.tables[topic] = TableVersion(table, publisher.version(output, framing), time, added)

    def _evolved(self, rest: Deferred) -> bool:
        """Evolve the table of ``rest`` to hold its first row; False (reason kept) if not."""
        sp = rest.partition
        policy = self.policy(sp.topic)
        if policy == "stop":
            return False
        ref = RecordRef(sp.topic, sp.partition, rest.start)
        current = self.tables.get(sp.topic)
        had = current is not None and current.schema is not None  # rows were written in it
        try:
            if ref in self._tried:
                raise HighwaterError("the row does not fit the evolved schema either")
            self._tried.add(ref)
            before = self.changes
            shape = self._evolve(sp, rest.start, rest.new_shape)
        except (NoAvroType, HighwaterError) as exc:
            self.refused[ref] = str(exc)
            log.warning("schema change at %s not evolved: %s", ref, exc)
            return False
        if policy == "backfill" and had and self.changes > before and rest.new_shape:
            before_it = Hlc.parse(rest.new_shape).previous()
            self._rescans.append(Rescan(ref, before_it, defaults_of(shape.columns)))
        return True

    def _evolve(self, sp: SourcePartition, offset: int, time: str | None) -> SourceShape:
        """Evolve ``sp``'s table to hold the row at ``offset``, if it does not; its shape."""
        topic, config = sp.topic, self.config
        if self._publisher is None:  # JSON output whose columns are declared
            raise HighwaterError(
                "JSON output writes the declared table_schema's columns (a CDC query's select "
                "*, enriched's schema): add the new column(s) there and resume"
            )
        shape = _shape(
            source_adapter(config, topic), *self._read(sp, offset), config.formats[topic]
        )
        current = self.tables[topic]
        if current.schema is None:
            evolved = derived_table(config.tables[topic], shape.columns, shape.key)
        else:
            new = [name for name in shape.columns if name not in current.schema.columns]
            refused = _cannot_evolve(current.schema, shape, grows=bool(new))
            if refused is not None:
                raise HighwaterError(refused)
            if not new:  # evolved already (at another partition's row of the same change)
                if time is not None and _before(time, current):
                    self.tables[topic] = replace(current, changed_at=time)  # the earliest
                return shape
            evolved = current.schema.with_columns(column_fields(shape.columns, new))
        self._use(topic, evolved, time)
        self.changes += 1
        log.info(
            "table %s: output schema evolved at %s/%d@%d: added %s (%s)",
            config.tables[topic],
            topic,
            sp.partition,
            offset,
            ", ".join(self.tables[topic].added),
            self.tables[topic].version,
        )
        return shape

    def _record(self, sp: SourcePartition, offset: int) -> Record:
        """The key and value of the source record at ``offset``."""
        consumer = range_reader(self._source, "highwater-schema-change")
        try:
            for message in read_range(consumer, sp, offset, offset + 1):
                return message.key(), message.value()
        finally:
            consumer.close()
        raise HighwaterError(f"{sp}: no record at offset {offset} to read its schema from")


def _cannot_evolve(schema: TableSchema, shape: SourceShape, *, grows: bool) -> str | None:
    """Why ``schema`` cannot follow ``shape`` by growing (None: it can, or need not)."""
    rekeyed = key_change(schema.primary_key, shape.key)
    if rekeyed is not None:
        return (
            f"the table's key changed ({rekeyed}): its rows would be keyed otherwise than the "
            "output's; declare the new key and schema and resume, or create a new changefeed"
        )
    retyped = type_changes(schema.record, shape.columns)
    if retyped and not grows:
        return (
            f"a column's type changed ({'; '.join(retyped)}): Avro has no compatible schema "
            "for both; declare the new type in table_schema and resume (its consumers read "
            "the new type from there), or create a new changefeed"
        )
    return None


def _added(before: TableVersion, table: TableSchema) -> tuple[str, ...]:
    had = () if before.schema is None else before.schema.columns
    return tuple(c for c in table.columns if c not in had)


def _shape(source: Adapter, key: bytes | None, value: bytes | None, fmt: str) -> SourceShape:
    """The record's columns as its source types them, or why there are none."""
    try:
        shape = source.shape(key, value)
    except BadRecord as exc:
        raise HighwaterError(f"its schema cannot be read: {exc}") from None
    if shape is None:
        raise HighwaterError(
            f"the source (format {fmt}) carries no column types: declare the new column(s) "
            "in table_schema"
        )
    return shape


def written(evolution: SchemaEvolution) -> dict[str, TableSchema]:
    """Each table's schema as the run writes it, where known: declared, derived, evolved.

    What the job status tells appliers to make their tables from. JSON output: the declared
    schemas and those its sources' newest changes type at the start.
    """
    names, tables = evolution.config.tables, evolution.tables  # Avro output's, as they evolve
    held = {names[t]: v.schema for t, v in tables.items() if v.schema is not None}
    return {**evolution.described, **held}
