"""The config's sections, each validated on its own: Kafka, sources, sink, encoder, the rest.

One frozen model per section of the YAML (``kafka``, ``sources[i]``, ``sink``, ``encoder``,
``resolved``, ``checkpoint``, ``initial_scan``, ``jobs``, ``safepoints``, ``metrics``,
``spark``): its keys, their types and defaults, and the combinations of its own options it
refuses (a table schema without its key, ``diff`` with ``key_only``, an unsafe producer
setting). What spans sections is ``checks.py``'s; the whole, ``changefeed.py``'s.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BeforeValidator,
    Field,
    PositiveInt,
    SecretStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from encoders.base import Envelope
from schemas.tables import TableSchema

from .fields import (
    MASK,
    Duration,
    Name,
    Replication,
    Section,
    combination,
    looks_secret,
    yaml_yes_no,
)


class KafkaOptions(Section):
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


class SchemaRegistryConfig(Section):
    """A Confluent-compatible schema registry (Apicurio's ``/apis/ccompat/v7`` works)."""

    url: Annotated[str, Field(pattern=r"^https?://")]
    basic_auth_user_info: SecretStr | None = None

    def client_config(self) -> dict[str, str]:
        """The configuration of confluent-kafka's ``SchemaRegistryClient``."""
        out = {"url": self.url}
        if self.basic_auth_user_info is not None:
            out["basic.auth.user.info"] = self.basic_auth_user_info.get_secret_value()
        return out


class SourceConfig(Section):
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
                raise combination("primary_key", "needs table_schema")
            return self
        if self.primary_key is None:
            raise combination("primary_key", "is required with table_schema")
        try:
            TableSchema.of(self.table_schema, self.primary_key)
        except ValueError as exc:
            raise combination("table_schema", str(exc)) from None
        return self

    @model_validator(mode="after")
    def _transactions(self) -> SourceConfig:
        if self.format != "debezium":
            for option in ("transactions", "collection"):
                if getattr(self, option) is not None:
                    raise combination(option, "is only used with format: debezium")
        elif self.collection is not None and self.transactions is None:
            raise combination("collection", "is only used with transactions")
        elif self.transactions is not None and self.data_collection is None:
            raise combination(
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


class SinkConfig(Section):
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


class EncoderConfig(Section):
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
                    raise combination(
                        option,
                        f"cannot be used with envelope 'key_only': a key-only message has "
                        f"no value to carry it (envelope: key_only, {option}: true)",
                    )
            if self.select is not None:
                raise combination("select", "has no effect with envelope 'key_only'")
        if self.envelope == "row" and self.diff:
            raise combination("diff", "cannot be used with envelope 'row' (no place for 'before')")
        if self.schema_registry is not None and self.format != "avro":
            raise combination("schema_registry", "is only used with format: avro")
        if self.format == "avro" and self.envelope not in ("wrapped", "key_only"):
            raise combination(
                "envelope", f"'{self.envelope}' has no Avro form (use wrapped or key_only)"
            )
        return self


class ResolvedConfig(Section):
    """Resolved-timestamp markers to every partition of every output topic."""

    enabled: bool = True
    interval: Duration = timedelta(seconds=10)


class CheckpointConfig(Section):
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


class InitialScanConfig(Section):
    """The snapshot before the stream (contract §7).

    ``initial_scan: yes | no | only`` is short for ``initial_scan: {mode: …}``. The mode
    defaults to ``yes`` for a new changefeed without ``cursor``, ``no`` with one.
    ``rate_limit`` is in rows per second.
    """

    mode: Annotated[Literal["yes", "no", "only"] | None, BeforeValidator(yaml_yes_no)] = None
    rate_limit: Annotated[float, Field(gt=0)] | None = None


def scan_shorthand(value: object) -> object:
    """``initial_scan: yes | no | only`` as ``{mode: …}``."""
    if value is None or isinstance(value, bool | str):
        return {"mode": yaml_yes_no(value)}
    return value


class JobsConfig(Section):
    """The job status topic: each changefeed's state, progress and error, for operators."""

    topic: Name = "_highwater_jobs"


class SafepointsConfig(Section):
    """Safepoints that hold back trimming of the source topics (contract §8)."""

    enabled: bool = True
    topic: Name = "_highwater_safepoints"
    cluster: Name = "default"
    gc_ttl: Duration = timedelta(hours=24)


class MetricsConfig(Section):
    """The run's Prometheus endpoint (``/metrics``); its address goes into the job status."""

    enabled: bool = True
    host: Annotated[str, Field(min_length=1)] = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 0  # 0: any free port
    # how often a run re-reads the replicas of the topics it relies on (the job status'
    # warnings, highwater_under_replicated_partitions); 0: only at its start
    replication_check_interval: Duration = timedelta(seconds=30)


class TriggerConfig(Section):
    """How often Spark runs a micro-batch; ``available_now`` drains what is there and stops."""

    processing_time: Duration = timedelta(seconds=1)
    available_now: bool = False


class SparkConfig(Section):
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
