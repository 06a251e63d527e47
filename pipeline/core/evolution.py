"""Output schemas that follow their tables: ``schema_change_policy``.

A row its output schema cannot hold (a column added upstream: the encoder's
``SchemaChange``) ends its partition's part of the batch there, and the rest is left to the
driver (``batch.py``: a rest with ``new_shape``). :meth:`SchemaEvolution.settle` decides, by
the policy:

* ``stop``: nothing runs again. The coordinator checkpoints just before the row, sends the
  marker the high-water mark allows and pauses the changefeed, naming the record, the
  table, the column(s) and the commit time; a new ``table_schema`` and ``resume`` go on
  from the row, without loss or duplicates;
* ``evolve``: the row's source record is read again here and its columns' types taken from
  the source's own schema (``Adapter.columns``: Debezium's, in JSON with schemas or Avro;
  ``schemas/connect.py`` maps them). The table's schema gains the columns it lacks, each
  optional with a null default (``TableSchema.with_columns``): a new version registered
  once the registry finds it compatible with the subject's latest (its rule; BACKWARD
  unless someone chose another), or published to the schema topic. The rest runs again in
  the same batch with the new encoder, and every later batch uses it. A change that cannot
  evolve so (the source carries no types, a column no Avro type holds exactly, the registry
  refuses) stops as ``stop`` does, and the pause says why.

Evolved schemas last as long as the run: a restart begins from the declared ones and meets
the same rows again, which evolve them the same way (the registry answers the same ids).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from encoders.avro import AvroEncoder
from encoders.base import Encoder
from pipeline.config import ChangefeedConfig
from schemas.avro import OutputSchemas
from schemas.connect import NoAvroType, column_fields
from schemas.errors import HighwaterError, RecordRef, SchemaChangeError
from schemas.hlc import Hlc
from schemas.tables import TableSchema
from sinks.schemas import SchemaPublisher

from .batch import BatchPlan, Deferred
from .frontier import SourcePartition
from .kafka_clients import range_reader, read_range
from .sources import BadRecord, adapter

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableVersion:
    """A table's output schema as the run writes it, and its last change."""

    schema: TableSchema
    version: str  # how a reader names it: the registry's id, or the fingerprint
    changed_at: str | None = None  # the commit time of the first row of the last change
    added: tuple[str, ...] = ()  # the columns it added

    def to_json(self) -> dict[str, Any]:
        """What the job status shows of it."""
        return {
            "version": self.version,
            "columns": list(self.schema.columns),
            "changed_at": self.changed_at,
            "added": list(self.added),
        }


def _before(time: str, version: TableVersion) -> bool:
    return version.changed_at is not None and Hlc.parse(time) < Hlc.parse(version.changed_at)


class SchemaEvolution:
    """The run's output encoders, and their schemas as the policy lets them follow the tables."""

    def __init__(
        self,
        config: ChangefeedConfig,
        encoders: Mapping[str, Encoder],
        publisher: SchemaPublisher | None,
        source: Mapping[str, Any],
        read: Callable[[SourcePartition, int], bytes | None] | None = None,
    ) -> None:
        """``read``: a source record's value by partition and offset (default: from Kafka)."""
        self.config = config
        self.policy = config.schema_change_policy
        self._encoders = dict(encoders)  # source topic -> its output topic's encoder
        self._publisher = publisher  # None: JSON output, nothing to evolve
        self._source = source
        self._read = read or self._value
        self.tables: dict[str, TableVersion] = {}  # source topic -> its output schema
        if publisher is not None:
            for s in config.sources:
                encoder, declared = self._encoders[s.topic], s.declared_schema
                assert isinstance(encoder, AvroEncoder)  # noqa: S101 - Avro output
                assert declared is not None  # noqa: S101 - the config requires it for Avro
                version = publisher.version(config.routes[s.topic], encoder.framing)
                self.tables[s.topic] = TableVersion(declared, version)
        self.refused: dict[RecordRef, str] = {}  # why a change could not evolve
        self._tried: set[RecordRef] = set()  # rows run again with an evolved schema
        self.changes = 0  # schema changes evolved in this run

    @property
    def encoders(self) -> Mapping[str, Encoder]:
        """Each source topic's encoder, as the schemas stand."""
        return self._encoders

    def status(self) -> dict[str, Any]:
        """Per table: its output schema's version, columns and last change."""
        return {self.config.tables[t]: v.to_json() for t, v in sorted(self.tables.items())}

    def settle(self, plan: BatchPlan, rests: list[Deferred]) -> tuple[BatchPlan, list[Deferred]]:
        """The plan to run rests at a schema change again with, and those it can run.

        Under ``evolve`` each such rest's table evolves first; under ``stop`` none runs.
        """
        changes = sorted(
            (r for r in rests if r.new_shape), key=lambda r: Hlc.parse(str(r.new_shape))
        )
        again = [r for r in changes if self._evolved(r)]  # the earliest commit first
        return (replace(plan, encoders=dict(self._encoders)) if again else plan), again

    def explain(self, change: SchemaChangeError) -> SchemaChangeError:
        """The pause's error, with why the change could not evolve where it was tried."""
        why = self.refused.get(change.record)
        if why is None:
            return change
        return SchemaChangeError(change.record, f"{change.reason}; not evolved: {why}", change.time)

    def _evolved(self, rest: Deferred) -> bool:
        """Evolve the table of ``rest`` to hold its first row; False (reason kept) if not."""
        if self.policy != "evolve":
            return False
        sp = rest.partition
        ref = RecordRef(sp.topic, sp.partition, rest.start)
        try:
            if ref in self._tried:
                raise HighwaterError("the row does not fit the evolved schema either")
            self._tried.add(ref)
            self._evolve(sp, rest.start, rest.new_shape)
        except (NoAvroType, HighwaterError) as exc:
            self.refused[ref] = str(exc)
            log.warning("schema change at %s not evolved: %s", ref, exc)
            return False
        return True

    def _evolve(self, sp: SourcePartition, offset: int, time: str | None) -> None:
        topic, config = sp.topic, self.config
        if self._publisher is None:
            raise HighwaterError("JSON output has no schema to evolve")
        source = adapter(config.formats[topic], config.registries.get(topic))
        try:
            columns = source.columns(self._read(sp, offset))
        except BadRecord as exc:
            raise HighwaterError(f"its schema cannot be read: {exc}") from None
        if columns is None:
            raise HighwaterError(
                f"the source (format {config.formats[topic]}) carries no column types: "
                "declare the new column(s) in table_schema"
            )
        current = self.tables[topic]
        new = [name for name in columns if name not in current.schema.columns]
        if not new:  # evolved already (at another partition's row of the same change)
            if time is not None and _before(time, current):
                self.tables[topic] = replace(current, changed_at=time)  # the earliest row's
            return
        evolved = current.schema.with_columns(column_fields(columns, new))
        output = config.routes[topic]
        schemas = OutputSchemas.of(evolved, config.encoder)
        framing = self._publisher.framing(output, schemas, evolved=True)
        self._encoders[topic] = AvroEncoder(schemas, framing, config.encoder, config.tables[topic])
        self.tables[topic] = TableVersion(
            evolved, self._publisher.version(output, framing), time, tuple(new)
        )
        self.changes += 1
        log.info(
            "table %s: output schema evolved at %s/%d@%d: added %s (%s)",
            config.tables[topic],
            topic,
            sp.partition,
            offset,
            ", ".join(new),
            self.tables[topic].version,
        )

    def _value(self, sp: SourcePartition, offset: int) -> bytes | None:
        """The value of the source record at ``offset``."""
        consumer = range_reader(self._source, "highwater-schema-change")
        try:
            for message in read_range(consumer, sp, offset, offset + 1):
                value: bytes | None = message.value()
                return value
        finally:
            consumer.close()
        raise HighwaterError(f"{sp}: no record at offset {offset} to read its schema from")
