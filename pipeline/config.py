"""The changefeed config: YAML loaded once into frozen, typed objects.

This is the only module that reads a config file. Everything downstream receives a
:class:`ChangefeedConfig` (or a section of it) and may trust it: unknown keys, wrong types and
impossible combinations were refused here, before Spark starts, each with its key path. All
problems in a file are reported together, so one ``highwater validate`` run shows them all.

Sections follow the contract (``../shared/design/contract.md``); option names follow
CockroachDB's changefeed options where one exists.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
from collections.abc import Mapping
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    PositiveInt,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from encoders.base import Envelope
from schemas.errors import ConfigError
from schemas.hlc import Hlc, parse_time
from schemas.tables import TableSchema

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_NAME = r"^[A-Za-z0-9._-]+$"
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}")


def parse_duration(value: object) -> object:
    """Accept ``10s``, ``1h30m``, ``500ms`` or a number of seconds; leave the rest to pydantic."""
    if isinstance(value, bool):
        return value  # refused by the timedelta type with a clear message
    if isinstance(value, int | float):
        return timedelta(seconds=value)
    if isinstance(value, str):
        text = value.strip()
        parts = _DURATION.findall(text)
        if not parts or "".join(a + u for a, u in parts) != text:
            raise PydanticCustomError(
                "duration",
                "not a duration: {value!r} (use e.g. 500ms, 10s, 5m, 1h30m, 1d)",
                {"value": value},
            )
        return timedelta(seconds=sum(float(a) * _DURATION_UNITS[u] for a, u in parts))
    return value


def _parse_hlc(value: object) -> object:
    if isinstance(value, Hlc) or value is None:
        return value
    try:
        return parse_time(str(value))
    except ValueError as exc:
        raise PydanticCustomError("time", "{reason}", {"reason": str(exc)}) from exc


def _yaml_yes_no(value: object) -> object:
    # YAML 1.1 reads a bare yes/no as a boolean; the option's values are the words.
    if value is True:
        return "yes"
    if value is False:
        return "no"
    return value


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]
Time = Annotated[Hlc, BeforeValidator(_parse_hlc)]
Name = Annotated[str, Field(min_length=1, pattern=_NAME)]


def _replication(value: Any) -> int | str:
    if value == "auto" or (type(value) is int and value > 0):
        return value  # type: ignore[no-any-return]
    if isinstance(value, str) and value.isdigit() and int(value) > 0:
        return int(value)
    raise PydanticCustomError("replication", "should be a positive integer or 'auto'")


# Topics created: "auto" is 3 copies where the cluster has 3 brokers or more, else one per
# broker (sinks.admin.replication_for); a number is taken as given (a warning when lower).
Replication = Annotated[int | Literal["auto"], PlainValidator(_replication)]
_SECRET_WORDS = ("password", "secret", "jaas", "token", "credentials", "sasl", "ssl.key")
MASK = "**********"


def looks_secret(name: str) -> bool:
    """True for a setting whose value must never be printed or logged (``sasl.jaas.config``…)."""
    lowered = name.lower()
    return any(word in lowered for word in _SECRET_WORDS)


def _combination(field: str, reason: str) -> PydanticCustomError:
    """An impossible combination, reported at ``<section>.<field>``."""
    return PydanticCustomError("combination", reason, {"field": field})


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


class KafkaOptions(_Section):
    """Client settings for one Kafka cluster, shared by every client Highwater builds.

    ``options`` are librdkafka/Java client properties (``security.protocol``, ``sasl.*`` …).
    Values whose names look secret are never shown by ``repr``.
    """

    bootstrap_servers: Annotated[str, Field(min_length=1)]
    options: dict[str, str] = Field(default_factory=dict, repr=False)

    def __repr_args__(self) -> Any:
        yield from super().__repr_args__()
        yield (
            "options",
            {k: MASK if looks_secret(k) else v for k, v in self.options.items()},
        )


class SchemaRegistryConfig(_Section):
    """A Confluent-compatible schema registry (Apicurio's ``/apis/ccompat/v7`` works)."""

    url: Annotated[str, Field(pattern=r"^https?://")]
    basic_auth_user_info: SecretStr | None = None

    def client_config(self) -> dict[str, str]:
        """The configuration of confluent-kafka's ``SchemaRegistryClient``."""
        out = {"url": self.url}
        if self.basic_auth_user_info is not None:
            out["basic.auth.user.info"] = self.basic_auth_user_info.get_secret_value()
        return out


class SourceConfig(_Section):
    """One source change topic and the table it carries."""

    topic: Name
    table: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
    format: Literal["native", "canal-json", "debezium"] = "native"
    # debezium: the connector's transaction metadata topic (provide.transaction.metadata),
    # what resolved markers are derived from, and the table's name there (schema.table;
    # default: the topic's name after the transaction topic's prefix)
    transactions: Name | None = None
    collection: Annotated[str, Field(min_length=1)] | None = None
    # debezium: the registry of its Avro records (AvroConverter, Confluent's wire format)
    schema_registry: SchemaRegistryConfig | None = None
    database: Annotated[str, Field(min_length=1)] = "defaultdb"
    schema_name: Annotated[str, Field(min_length=1)] = "public"
    # The table's columns as an Avro record schema: inline, or the path of an .avsc file
    # (relative to the config file). Needed by CDC queries and Avro output.
    table_schema: dict[str, Any] | None = None
    primary_key: list[Annotated[str, Field(min_length=1)]] | None = None

    @field_validator("table_schema", mode="before")
    @classmethod
    def _load_schema_file(cls, value: object, info: ValidationInfo) -> object:
        if not isinstance(value, str):
            return value
        base = (info.context or {}).get("base_dir") or Path.cwd()
        path = Path(value) if Path(value).is_absolute() else Path(base) / value
        try:
            return yaml.safe_load(path.read_text(encoding="utf-8"))  # JSON is YAML
        except OSError as exc:
            raise ValueError(f"cannot read {path}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise ValueError(f"{path} is not valid JSON: {exc}") from None

    @model_validator(mode="after")
    def _schema_and_key(self) -> SourceConfig:
        if self.table_schema is None:
            if self.primary_key is not None:
                raise _combination("primary_key", "needs table_schema")
            return self
        if self.primary_key is None:
            raise _combination("primary_key", "is required with table_schema")
        try:
            TableSchema.of(self.table_schema, self.primary_key)
        except ValueError as exc:
            raise _combination("table_schema", str(exc)) from None
        return self

    @model_validator(mode="after")
    def _transactions(self) -> SourceConfig:
        if self.format != "debezium":
            for option in ("transactions", "collection"):
                if getattr(self, option) is not None:
                    raise _combination(option, "is only used with format: debezium")
        elif self.collection is not None and self.transactions is None:
            raise _combination("collection", "is only used with transactions")
        elif self.transactions is not None and self.data_collection is None:
            raise _combination(
                "collection",
                f"is needed: topic {self.topic!r} does not start with the transaction topic's "
                f"prefix {self.transactions.removesuffix('.transaction')!r} + '.'",
            )
        return self

    @property
    def data_collection(self) -> str | None:
        """Debezium's name of the table (``schema.table``), as its END events count it."""
        if self.collection is not None or self.transactions is None:
            return self.collection
        prefix = self.transactions.removesuffix(".transaction") + "."
        rest = self.topic.removeprefix(prefix)
        return rest if rest != self.topic and rest else None

    @property
    def declared_schema(self) -> TableSchema | None:
        """The declared table schema, if any."""
        if self.table_schema is None or self.primary_key is None:
            return None
        return TableSchema.of(self.table_schema, self.primary_key)


class SinkConfig(_Section):
    """Where output topics go and how they are created."""

    kafka: KafkaOptions | None = None
    topic_prefix: str = ""
    topic_name: Name | None = None
    partitions: PositiveInt = 3
    replication_factor: Replication = "auto"
    producer: dict[str, str] = Field(default_factory=dict)

    @field_validator("producer")
    @classmethod
    def _no_unsafe_producer(cls, value: dict[str, str]) -> dict[str, str]:
        if value.get("acks", "all") not in ("all", "-1"):
            raise ValueError("acks must stay 'all': markers promise rows are durable")
        if value.get("enable.idempotence", "true") != "true":
            raise ValueError("enable.idempotence must stay true: retries must not reorder a key")
        if "transactional.id" in value:
            raise ValueError(
                "transactional.id is the changefeed's to choose (delivery: exactly_once gives "
                "each source partition its own)"
            )
        return value


class EncoderConfig(_Section):
    """The envelope and its options (contract §4)."""

    format: Literal["json", "avro"] = "json"
    envelope: Envelope = "wrapped"
    updated: bool = False
    mvcc_timestamp: bool = False
    diff: bool = False
    key_in_value: bool = False
    topic_in_value: bool = False
    full_table_name: bool = False
    select: list[Annotated[str, Field(min_length=1)]] | None = None
    where: Annotated[str, Field(min_length=1)] | None = None
    schema_registry: SchemaRegistryConfig | None = None
    # Registry-free Avro: where the schemas are published, keyed by fingerprint.
    schema_topic: Name = "_highwater_schemas"

    @model_validator(mode="after")
    def _combinations(self) -> EncoderConfig:
        if self.envelope == "key_only":
            for option in ("diff", "updated", "mvcc_timestamp", "key_in_value", "topic_in_value"):
                if getattr(self, option):
                    raise _combination(
                        option,
                        f"cannot be used with envelope 'key_only': a key-only message has "
                        f"no value to carry it (envelope: key_only, {option}: true)",
                    )
            if self.select is not None:
                raise _combination("select", "has no effect with envelope 'key_only'")
        if self.envelope == "row" and self.diff:
            raise _combination("diff", "cannot be used with envelope 'row' (no place for 'before')")
        if self.schema_registry is not None and self.format != "avro":
            raise _combination("schema_registry", "is only used with format: avro")
        if self.format == "avro" and self.envelope not in ("wrapped", "key_only"):
            raise _combination(
                "envelope", f"'{self.envelope}' has no Avro form (use wrapped or key_only)"
            )
        return self


class ResolvedConfig(_Section):
    """Resolved-timestamp markers to every partition of every output topic."""

    enabled: bool = True
    interval: Duration = timedelta(seconds=10)


class CheckpointConfig(_Section):
    """Progress kept in a compacted Kafka topic (contract §6).

    While any partition advances, every partition's progress is checkpointed once per
    ``min_checkpoint_frequency`` (and before each marker, and at a stop:
    ``pipeline/core/progress/policy.py``), whether the high-water mark moved or not.
    ``frontier_highwater_lag_checkpoint_threshold`` is kept for compatibility: that rule
    subsumes it (it asked for a checkpoint of the leading partitions once the high-water mark
    lagged them by that much), so it is accepted and has no effect.
    """

    topic: Name = "_highwater_checkpoints"
    replication_factor: Replication = "auto"
    min_checkpoint_frequency: Duration = timedelta(seconds=30)
    frontier_highwater_lag_checkpoint_threshold: Duration = timedelta(minutes=10)  # no effect
    frontier_checkpoint_max_bytes: Annotated[int, Field(ge=1024)] = 1 << 20
    # delivery: exactly_once: each source partition's committed progress (progress/claim.py);
    # default _highwater_progress_<changefeed_id>
    progress_topic: Name | None = None


class InitialScanConfig(_Section):
    """The snapshot before the stream (contract §7).

    ``initial_scan: yes | no | only`` is short for ``initial_scan: {mode: …}``. The mode
    defaults to ``yes`` for a new changefeed without ``cursor``, ``no`` with one.
    ``rate_limit`` is in rows per second.
    """

    mode: Annotated[Literal["yes", "no", "only"] | None, BeforeValidator(_yaml_yes_no)] = None
    rate_limit: Annotated[float, Field(gt=0)] | None = None


def _scan_shorthand(value: object) -> object:
    if value is None or isinstance(value, bool | str):
        return {"mode": _yaml_yes_no(value)}
    return value


class JobsConfig(_Section):
    """The job status topic: each changefeed's state, progress and error, for operators."""

    topic: Name = "_highwater_jobs"


class SafepointsConfig(_Section):
    """Safepoints that hold back trimming of the source topics (contract §8)."""

    enabled: bool = True
    topic: Name = "_highwater_safepoints"
    cluster: Name = "default"
    gc_ttl: Duration = timedelta(hours=24)


class MetricsConfig(_Section):
    """The run's Prometheus endpoint (``/metrics``); its address goes into the job status."""

    enabled: bool = True
    host: Annotated[str, Field(min_length=1)] = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 0  # 0: any free port
    # how often a run re-reads the replicas of the topics it relies on (the job status'
    # warnings, highwater_under_replicated_partitions); 0: only at its start
    replication_check_interval: Duration = timedelta(seconds=30)


class TriggerConfig(_Section):
    """How often Spark runs a micro-batch; ``available_now`` drains what is there and stops."""

    processing_time: Duration = timedelta(seconds=1)
    available_now: bool = False


class SparkConfig(_Section):
    """The SparkSession and the streaming query."""

    master: Annotated[str, Field(min_length=1)] = "local[2]"
    app_name: str | None = None
    checkpoint_location: str | None = None
    trigger: TriggerConfig = TriggerConfig()
    max_offsets_per_trigger: PositiveInt | None = None
    conf: dict[str, str] = Field(default_factory=dict)
    # Off local mode, the Python executors run: "auto" packs the runtime environment and
    # ships it with each run (pipeline/runtime/pyenv.py); "none" lets them use the driver's
    # interpreter path (workers that see the submitter's files); or a .tar.gz to ship.
    python_env: Annotated[str, Field(pattern=r"^(auto|none|.+\.tar\.gz)$")] = "auto"

    @field_validator("conf")
    @classmethod
    def _client_mode(cls, value: dict[str, str]) -> dict[str, str]:
        if value.get("spark.submit.deployMode", "client") != "client":
            raise ValueError(
                "spark.submit.deployMode must stay 'client': the driver runs where "
                "`highwater run` runs and reads the config and table schemas there"
            )
        return value


class ChangefeedConfig(_Section):
    """A whole changefeed, as validated from YAML."""

    changefeed_id: Name
    kafka: KafkaOptions
    sources: Annotated[list[SourceConfig], Field(min_length=1)]
    sink: SinkConfig = SinkConfig()
    encoder: EncoderConfig = EncoderConfig()
    resolved: ResolvedConfig = ResolvedConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    initial_scan: Annotated[InitialScanConfig, BeforeValidator(_scan_shorthand)] = (
        InitialScanConfig()
    )
    cursor: Time | None = None
    end_time: Time | None = None
    on_error: Literal["fail", "pause", "dlq"] = "fail"
    dlq_topic: Name | None = None
    # exactly_once (the default): each source partition's rows of a batch commit in one Kafka
    # transaction with its progress, so a read_committed consumer sees each change once
    # (pipeline/core/progress/claim.py); at_least_once: a kill writes again what came after the last
    # checkpoint (no transactions: for clusters that cannot run them, or read_uncommitted readers)
    delivery: Literal["at_least_once", "exactly_once"] = "exactly_once"
    # A row of a shape its output schema cannot hold (a column added upstream): stop there
    # (the changefeed pauses, naming it), or evolve the schema from the source's own types,
    # or evolve it and emit the table again at the change (backfill, from the source topic).
    # Unset: stop where table_schema is declared, evolve where it is derived (Debezium).
    schema_change_policy: Literal["stop", "evolve", "backfill"] | None = None
    safepoints: SafepointsConfig = SafepointsConfig()
    jobs: JobsConfig = JobsConfig()
    metrics: MetricsConfig = MetricsConfig()
    spark: SparkConfig = SparkConfig()

    @model_validator(mode="after")
    def _combinations(self) -> ChangefeedConfig:
        problems: list[tuple[str, str]] = []
        self._check_sources(problems)
        self._check_formats(problems)
        if self.end_time is not None and self.initial_scan.mode == "only":
            problems.append(("end_time", "cannot be used with initial_scan.mode: only"))
        if self.cursor is not None and self.end_time is not None and self.end_time <= self.cursor:
            problems.append(("end_time", f"must be after cursor ({self.cursor})"))
        if self.dlq_topic is not None and self.on_error == "fail":
            problems.append(("dlq_topic", "is only used with on_error: dlq or pause"))
        if problems:
            # Several cross-section problems at once: one message per key path.
            raise PydanticCustomError(
                "combinations", "{joined}", {"joined": "\n".join(f"{p}: {r}" for p, r in problems)}
            )
        return self

    def _check_sources(self, problems: list[tuple[str, str]]) -> None:
        if self.sink.topic_name is not None and len(self.sources) > 1:
            problems.append(
                (
                    "sink.topic_name",
                    "cannot hold several tables: rows of different tables could have the same "
                    "key (and in Avro each table's envelope needs its own <topic>-value "
                    "subject); use topic_prefix, one topic per table",
                )
            )
        seen_topics: set[str] = set()
        seen_tables: set[str] = set()
        for i, source in enumerate(self.sources):
            if source.topic in seen_topics:
                problems.append((f"sources[{i}].topic", f"topic {source.topic!r} listed twice"))
            if source.table in seen_tables and self.sink.topic_name is None:
                problems.append((f"sources[{i}].table", f"table {source.table!r} listed twice"))
            seen_topics.add(source.topic)
            seen_tables.add(source.table)
        self._check_avro_tables(problems)
        for option in ("select", "where"):
            if getattr(self.encoder, option) is None:
                continue
            if len(self.sources) != 1:
                problems.append(
                    (f"encoder.{option}", "a CDC query works on one table; list one source")
                )
            elif self.sources[0].table_schema is None:
                problems.append(
                    (
                        f"encoder.{option}",
                        "a CDC query needs the table's columns: declare sources[0].table_schema",
                    )
                )

    def _check_avro_tables(self, problems: list[tuple[str, str]]) -> None:
        """Avro needs each table's columns: declared, or from the source's (Debezium, canal)."""
        if self.encoder.format != "avro":
            if self.schema_change_policy == "backfill":
                problems.append(
                    (
                        "schema_change_policy",
                        "backfill re-emits a table whose Avro schema evolved: it needs "
                        "encoder.format: avro (JSON output passes new columns through)",
                    )
                )
            return
        for i, source in enumerate(self.sources):
            if source.table_schema is not None:
                continue
            if source.format not in ("debezium", "canal-json"):
                problems.append(
                    (
                        f"sources[{i}].table_schema",
                        "is required with encoder.format: avro (the columns and their "
                        f"types): format {source.format} carries none to derive them from",
                    )
                )
            elif self.schema_change_policy == "stop":
                problems.append(
                    (
                        "schema_change_policy",
                        f"stop needs sources[{i}].table_schema: a schema derived from "
                        "the source's grows with its table (evolve)",
                    )
                )

    def _check_formats(self, problems: list[tuple[str, str]]) -> None:
        for i, source in enumerate(self.sources):
            if source.schema_registry is not None and source.format != "debezium":
                problems.append(
                    (f"sources[{i}].schema_registry", "is only used with format: debezium")
                )
            if source.format == "debezium" and self.scan_mode != "no" and not source.transactions:
                problems.append(
                    (
                        f"sources[{i}].transactions",
                        "the initial scan of a Debezium topic needs its transaction topic: the "
                        "snapshot's time is a commit it lists, and only it tells when every "
                        "change at or below that time was read (or use initial_scan: no)",
                    )
                )

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
        out: dict[str, dict[str, str]] = {}
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

    def output_description(self) -> dict[str, Any]:
        """Where and how the changefeed writes, as its job status tells consumers."""
        encoder = self.encoder
        avro = encoder.format == "avro"
        registry = encoder.schema_registry
        return {
            "topics": {self.output_topic(s): s.table for s in self.sources},
            "format": encoder.format,
            "envelope": encoder.envelope,
            "updated": encoder.updated,
            "registry": registry.url if avro and registry is not None else None,
            "schema_topic": encoder.schema_topic if avro and registry is None else None,
            # the declared tables, whose rows the output carries as declared (a CDC query's
            # `select` writes other columns): what an applier makes its tables from
            "tables": {
                s.table: {"record": s.table_schema, "primary_key": s.primary_key}
                for s in self.sources
                if s.table_schema is not None and s.primary_key is not None
            }
            if encoder.select is None
            else {},
        }


def load_config(path: str | Path, base_dir: str | Path | None = None) -> ChangefeedConfig:
    """Read and validate a YAML config file; raise :class:`ConfigError` listing every problem.

    Relative paths in it start at ``base_dir`` (default: the file's folder).
    """
    file = Path(path)
    try:
        raw = yaml.safe_load(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError([("", f"cannot read {file}: {exc.strerror}")]) from exc
    except yaml.YAMLError as exc:
        raise ConfigError([("", f"{file} is not valid YAML: {exc}")]) from exc
    return parse_config(raw, base_dir=file.parent if base_dir is None else Path(base_dir))


def parse_config(
    raw: object, env: Mapping[str, str] | None = None, base_dir: Path | None = None
) -> ChangefeedConfig:
    """Validate an already-parsed YAML document, after ``${VAR}`` substitution from ``env``.

    Relative file paths in it (table schemas) are taken from ``base_dir`` (default: the
    working directory).
    """
    if not isinstance(raw, Mapping):
        raise ConfigError([("", "the config must be a mapping of sections at the top level")])
    problems: list[tuple[str, str]] = []
    expanded = _expand(raw, os.environ if env is None else env, "", problems)
    if problems:
        raise ConfigError(problems)
    try:
        return ChangefeedConfig.model_validate(expanded, context={"base_dir": base_dir})
    except ValidationError as exc:
        raise ConfigError(_problems(exc)) from exc


def _expand(
    node: object, env: Mapping[str, str], path: str, problems: list[tuple[str, str]]
) -> object:
    """Substitute ``${VAR}`` and ``${VAR:-default}`` in every string value.

    Lets one config serve several clusters and keeps secrets out of the file.
    """
    if isinstance(node, Mapping):
        return {
            k: _expand(v, env, _join([path, str(k)]) if path else str(k), problems)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_expand(v, env, f"{path}[{i}]", problems) for i, v in enumerate(node)]
    if not isinstance(node, str) or "${" not in node:
        return node

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(3)
        if name in env:
            return env[name]
        if default is not None:
            return default
        problems.append((path, f"environment variable {name} is not set"))
        return ""

    return _ENV_REF.sub(substitute, node)


def _problems(exc: ValidationError) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    for error in exc.errors(include_url=False):
        loc = [str(p) if isinstance(p, str) else f"[{p}]" for p in error["loc"]]
        ctx = error.get("ctx") or {}
        if error["type"] == "combinations":
            problems.extend(_prefixed(loc, line) for line in str(ctx["joined"]).splitlines())
            continue
        if error["type"] == "combination":
            loc.append(str(ctx["field"]))
        message = error["msg"]
        if error["type"] == "value_error":
            message = message.removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = _unknown_key(exc, error["loc"])
        problems.append((_join(loc), message))
    return problems


def _prefixed(loc: list[str], line: str) -> tuple[str, str]:
    path, _, reason = line.partition(": ")
    return _join([*loc, path]), reason


def _join(parts: list[str]) -> str:
    return ".".join(parts).replace(".[", "[")


def _unknown_key(exc: ValidationError, loc: tuple[int | str, ...]) -> str:
    model: type[BaseModel] = ChangefeedConfig
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        annotation = model.model_fields[str(part)].annotation
        nested = _model_in(annotation)
        if nested is None:
            return "unknown key"
        model = nested
    known = sorted(model.model_fields)
    close = difflib.get_close_matches(str(loc[-1]), known, n=1)
    hint = f"did you mean {close[0]!r}?" if close else "known keys: " + ", ".join(known)
    return f"unknown key ({hint})"


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found is not None:
            return found
    return None
