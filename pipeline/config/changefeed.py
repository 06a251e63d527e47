"""The whole changefeed config, and the views the rest of the pipeline reads from it.

:class:`ChangefeedConfig` puts the sections together, refuses what spans them
(``checks.py``) and derives what the pipeline reads: each source's output topic, table and
format, the Debezium sources' registries and transaction topics, the CDC query, the initial
scan's mode, the effective dead-letter and progress topics, and the shape of the output
(with its fingerprint) that a resume compares.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import timedelta
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator
from pydantic_core import PydanticCustomError

from schemas.tables import TableSchema

from .checks import cross_section_problems
from .databases import DatabaseConfig
from .fields import Duration, Name, Section, Time, cockroachdb
from .output import EncoderConfig, SinkConfig
from .sections import (
    CheckpointConfig,
    InitialScanConfig,
    JobsConfig,
    KafkaOptions,
    MetricsConfig,
    ResolvedConfig,
    SafepointsConfig,
    SourceConfig,
    SparkConfig,
    scan_shorthand,
)

# A claim store: an absolute path, or a URI of a filesystem Arrow reaches
ClaimStore = Annotated[str, Field(pattern=r"^(/|[a-z][a-z0-9+.-]*://).+")]


class ChangefeedConfig(Section):
    """A whole changefeed, as validated from YAML."""

    changefeed_id: Name = Field(
        description="The changefeed's name: keys its checkpoint record, job status, "
        "safepoint and transactional ids."
    )
    kafka: KafkaOptions = Field(
        description="The source cluster (and the output's, unless `sink.kafka` names another)."
    )
    sources: list[SourceConfig] = Field([], description="The source change topics, one per table.")
    databases: list[DatabaseConfig] = Field(
        [], description="Whole databases.", json_schema_extra=cockroachdb("FOR DATABASE")
    )
    sink: SinkConfig = Field(SinkConfig(), description="The output topics.")
    encoder: EncoderConfig = Field(
        EncoderConfig(), description="The output records: format, envelope, CDC query."
    )
    resolved: ResolvedConfig = Field(ResolvedConfig(), description="Resolved markers.")
    checkpoint: CheckpointConfig = Field(
        CheckpointConfig(), description="Progress, in a compacted Kafka topic."
    )
    initial_scan: Annotated[InitialScanConfig, BeforeValidator(scan_shorthand)] = Field(
        InitialScanConfig(),
        description="The snapshot before the stream; `yes`, `no` or `only` is short for "
        "`{mode: ...}`.",
    )
    cursor: Time | None = Field(
        None,
        description="Start from this time instead of the sources' high-water mark (an "
        "initial scan, if any, is taken at it).",
        json_schema_extra=cockroachdb("cursor"),
    )
    end_time: Time | None = Field(
        None,
        description="Stop once the high-water mark reaches it, with a last marker at exactly "
        "`end_time` and no rows after it.",
        json_schema_extra=cockroachdb("end_time"),
    )
    on_error: Literal["fail", "pause", "dlq"] = Field(
        "fail",
        description="A source record that does not decode: stop at it (`fail`), pause there "
        "for an operator (`pause`), or send it to `dlq_topic` and go on (`dlq`).",
        json_schema_extra=cockroachdb("on_error"),
    )
    dlq_topic: Name | None = Field(
        None,
        description="The dead-letter topic (`on_error: dlq` or `pause`); default "
        "`_highwater_dlq_<changefeed_id>`.",
    )
    oversized_rows: Literal["fail", "dlq", "claim_check"] | None = Field(
        None,
        description="A row whose output record exceeds the producer's `max.request.size`: stop "
        "at it (`fail`), send its source record to `dlq_topic` and go on (`dlq`), or write it "
        "whole to `claim_store` with a reference record in its place (`claim_check`), which "
        "the consumer library follows. Unset: as `on_error` says.",
    )
    claim_store: ClaimStore | None = Field(
        None,
        description="Where `oversized_rows: claim_check` writes rows too large for Kafka: a "
        "folder every executor and consumer reaches, as an absolute path or a URI "
        "(`file://`, `hdfs://`, `s3://`, `gs://`).",
    )
    delivery: Literal["at_least_once", "exactly_once"] = Field(
        "exactly_once",
        description="`exactly_once`: a task's rows of a batch commit in one Kafka transaction "
        "with each source partition's progress, so a read_committed consumer sees each change "
        "once; `at_least_once`: no transactions, a kill writes again what came after the "
        "last checkpoint.",
    )
    schema_change_policy: Literal["stop", "evolve", "backfill"] | None = Field(
        None,
        description="Avro output: a row of a shape its output schema cannot hold (a column "
        "added upstream): pause there (`stop`), evolve the schema from the source's types "
        "(`evolve`), or evolve it and emit the table again at the change (`backfill`). "
        "Unset: `stop` for a declared `table_schema`, `evolve` for a derived one.",
        json_schema_extra=cockroachdb("schema_change_policy"),
    )
    lagging_threshold: Duration = Field(
        timedelta(minutes=3),
        description="A source partition whose resolved time lags now by more is lagging: "
        "logged by name, counted in `highwater_lagging_partitions`, named in the job "
        "status (CockroachDB's `lagging_ranges_threshold`); 0: off.",
        json_schema_extra=cockroachdb("lagging_ranges_threshold"),
    )
    stuck_threshold: Duration = Field(
        timedelta(minutes=10),
        description="The high-water standing still for longer while the sources send "
        "records is stuck: a log line naming the partition holding it, `highwater_stuck`, "
        "the job status; 0: off.",
    )
    safepoints: SafepointsConfig = Field(
        SafepointsConfig(), description="Safepoints that hold back trimming of the sources."
    )
    jobs: JobsConfig = Field(JobsConfig(), description="The job status topic.")
    metrics: MetricsConfig = Field(MetricsConfig(), description="The run's Prometheus endpoint.")
    spark: SparkConfig = Field(SparkConfig(), description="The SparkSession and its query.")

    @model_validator(mode="after")
    def _combinations(self) -> ChangefeedConfig:
        problems = cross_section_problems(self)
        if problems:
            # Several cross-section problems at once: one message per key path.
            raise PydanticCustomError(
                "combinations", "{joined}", {"joined": "\n".join(f"{p}: {r}" for p, r in problems)}
            )
        return self

    @property
    def scan_mode(self) -> Literal["yes", "no", "only"]:
        """The initial scan's mode: as configured, else ``yes`` without ``cursor``."""
        if self.initial_scan.mode is not None:
            return self.initial_scan.mode
        return "no" if self.cursor is not None else "yes"

    @property
    def effective_dlq_topic(self) -> str:
        """Dead-letter topic: the configured one, or one named after the changefeed."""
        return self.dlq_topic or f"_highwater_dlq_{self.changefeed_id}"

    @property
    def effective_progress_topic(self) -> str:
        """Progress topic (exactly-once): the configured one, or one named after the changefeed."""
        return self.checkpoint.progress_topic or f"_highwater_progress_{self.changefeed_id}"

    @property
    def sink_kafka(self) -> KafkaOptions:
        """The cluster the output topics live on (the source cluster unless overridden)."""
        return self.sink.kafka or self.kafka

    @property
    def routes(self) -> dict[str, str]:
        """Each source topic's output topic."""
        return {s.topic: self.output_topic(s) for s in self.sources}

    @property
    def tables(self) -> dict[str, str]:
        """Each source topic's table."""
        return {s.topic: s.table for s in self.sources}

    @property
    def formats(self) -> dict[str, str]:
        """Each source topic's format."""
        return {s.topic: s.format for s in self.sources}

    @property
    def registries(self) -> dict[str, dict[str, str]]:
        """Each Debezium source topic read as Avro -> its registry's client configuration."""
        return {
            s.topic: s.schema_registry.client_config()
            for s in self.sources
            if s.schema_registry is not None
        }

    @property
    def transaction_topics(self) -> dict[str, dict[str, str]]:
        """Debezium: each transaction topic -> its tables' names there -> their data topics."""
        out: dict[str, dict[str, str]] = {
            d.transactions: {} for d in self.databases if d.transactions is not None
        }
        for s in self.sources:
            if s.transactions is not None and s.data_collection is not None:
                out.setdefault(s.transactions, {})[s.data_collection] = s.topic
        return out

    @property
    def unmarked_sources(self) -> list[str]:
        """Source topics nothing resolves (Debezium without ``transactions``)."""
        return [s.topic for s in self.sources if s.format == "debezium" and s.transactions is None]

    @property
    def query(self) -> tuple[str, TableSchema] | None:
        """The CDC query's table and its declared columns (``select``/``where`` set)."""
        if self.encoder.select is None and self.encoder.where is None:
            return None
        first = self.sources[0]
        schema = first.declared_schema
        return None if schema is None else (first.table, schema)

    @cached_property
    def shape(self) -> dict[str, Any]:
        """What the existing output depends on, as the checkpoint record keeps it.

        The clusters, the sources, the encoder and topic naming: a resume compares it with
        the config it runs with (``pipeline/core/operators/update.py``), so a changed envelope is
        refused and an added table gets its own scan. Secrets are masked.
        """
        shape = self.model_dump(mode="json", include={"kafka", "sources", "encoder", "sink"})
        for source in shape["sources"]:  # options of one format only, where they are set
            for option in ("transactions", "collection", "schema_registry"):
                if source[option] is None:
                    del source[option]
            if "schema_registry" in source:  # where it is, not its secret
                source["schema_registry"] = {"url": source["schema_registry"]["url"]}
        shape["kafka"] = {"bootstrap_servers": self.kafka.bootstrap_servers}
        sink = self.sink
        shape["sink"] = {
            "kafka": None
            if sink.kafka is None
            else {"bootstrap_servers": sink.kafka.bootstrap_servers},
            "topic_prefix": sink.topic_prefix,
            "topic_name": sink.topic_name,
        }
        return shape

    @cached_property
    def fingerprint(self) -> str:
        """A short hash of :attr:`shape`, for logs and the checkpoint record."""
        return hashlib.sha256(json.dumps(self.shape, sort_keys=True).encode()).hexdigest()[:16]

    def output_topic(self, source: SourceConfig) -> str:
        """The output topic for a source table (contract §4)."""
        if self.sink.topic_name is not None:
            return self.sink.topic_name
        table = (
            f"{source.database}.{source.schema_name}.{source.table}"
            if self.encoder.full_table_name
            else source.table
        )
        return f"{self.sink.topic_prefix}{table}"

    def output_description(self, tables: Mapping[str, TableSchema] | None = None) -> dict[str, Any]:
        """Where and how the changefeed writes, as its job status tells consumers.

        ``tables``: each table's schema as the run writes it (declared, or derived from its
        source's); None: the declared ones.
        """
        encoder = self.encoder
        if tables is None:
            tables = {s.table: d for s in self.sources if (d := s.declared_schema) is not None}
        avro = encoder.format == "avro"
        registry = encoder.schema_registry
        return _keys_and_times(encoder) | {
            "topics": {self.output_topic(s): s.table for s in self.sources},
            "format": encoder.format,
            "envelope": encoder.envelope,
            "updated": encoder.updated,
            "registry": None if registry is None else registry.url,
            "schema_topic": encoder.schema_topic if avro and registry is None else None,
            "dead_letters": self.effective_dlq_topic,
            # the tables' schemas, whose rows the output carries as they say (a CDC query's
            # `select` writes other columns): what an applier makes its tables from
            "tables": {
                name: {"record": dict(t.record), "primary_key": list(t.primary_key)}
                for name, t in sorted(tables.items())
            }
            if encoder.select is None
            else {},
        }


def _keys_and_times(encoder: EncoderConfig) -> dict[str, Any]:
    """What the job status's output says of its keys and times beyond the envelope's name.

    The column the records are keyed by, named only where it is not the primary key; under
    ``enriched`` its properties (a consumer finds the commit times in its ``source``).
    """
    said: dict[str, Any] = {} if encoder.key_column is None else {"key_column": encoder.key_column}
    if encoder.envelope == "enriched":
        said["enriched_properties"] = list(encoder.enriched_properties)
    return said
