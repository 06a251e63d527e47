"""The config's sections, each validated on its own: Kafka, sources, and the run's own.

One frozen model per section of the YAML (``kafka``, ``sources[i]``, ``resolved``,
``checkpoint``, ``initial_scan``, ``jobs``, ``safepoints``, ``metrics``, ``spark``): its keys,
their types and defaults, and the combinations of its own options it refuses (a table schema
without its key). The output's, ``sink`` and ``encoder``, are ``output.py``'s; what spans
sections is ``checks.py``'s; the whole, ``changefeed.py``'s.
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

from schemas.tables import TableSchema

from .fields import (
    MASK,
    Duration,
    Name,
    Replication,
    Section,
    cockroachdb,
    combination,
    looks_secret,
    yaml_yes_no,
)


class KafkaOptions(Section):
    """Client settings for one Kafka cluster, shared by every client Highwater builds.

    ``options`` are librdkafka/Java client properties (``security.protocol``, ``sasl.*`` …).
    Values whose names look secret are never shown by ``repr``.
    """

    bootstrap_servers: Annotated[str, Field(min_length=1)] = Field(
        description="The cluster's brokers, `host:port` separated by commas."
    )
    options: dict[str, str] = Field(
        default_factory=dict,
        repr=False,
        description="Kafka client properties every client of this cluster gets "
        "(`security.protocol`, `sasl.*`, ...); values whose names look secret are masked "
        "in logs and `repr`.",
    )

    def __repr_args__(self) -> Any:
        yield from super().__repr_args__()
        yield (
            "options",
            {k: MASK if looks_secret(k) else v for k, v in self.options.items()},
        )


class SchemaRegistryConfig(Section):
    """A Confluent-compatible schema registry (Apicurio's ``/apis/ccompat/v7`` works)."""

    url: Annotated[str, Field(pattern=r"^https?://")] = Field(
        description="The registry's URL (Apicurio: `.../apis/ccompat/v7`)."
    )
    basic_auth_user_info: SecretStr | None = Field(
        None, description="`user:password` for the registry's basic auth; never shown."
    )

    def client_config(self) -> dict[str, str]:
        """The configuration of confluent-kafka's ``SchemaRegistryClient``."""
        out = {"url": self.url}
        if self.basic_auth_user_info is not None:
            out["basic.auth.user.info"] = self.basic_auth_user_info.get_secret_value()
        return out


class SourceConfig(Section):
    """One source change topic and the table it carries."""

    topic: Name = Field(description="The source change topic.")
    table: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] = Field(
        description="The table the topic carries; names its output topic."
    )
    format: Literal["native", "canal-json", "debezium"] = Field(
        "native",
        description="How the topic's records are written: CockroachDB's changefeed JSON "
        "(`native`), TiCDC's Canal-JSON, or Debezium's events (JSON or Avro).",
    )
    transactions: Name | None = Field(
        None,
        description="Debezium: the connector's transaction metadata topic "
        "(`provide.transaction.metadata`), one partition; resolved markers are derived from "
        "it. Without it rows flow but no marker is sent.",
    )
    collection: Annotated[str, Field(min_length=1)] | None = Field(
        None,
        description="Debezium: the table's name in the transaction topic's END events "
        "(`schema.table`); default: the topic's name after the transaction topic's prefix.",
    )
    schema_registry: SchemaRegistryConfig | None = Field(
        None,
        description="Debezium: the registry of its Avro records (AvroConverter, Confluent's "
        "wire format); unset: JSON records.",
    )
    database: Annotated[str, Field(min_length=1)] = Field(
        "defaultdb", description="The database's name in `full_table_name` output topics."
    )
    schema_name: Annotated[str, Field(min_length=1)] = Field(
        "public", description="The schema's name in `full_table_name` output topics."
    )
    table_schema: dict[str, Any] | None = Field(
        None,
        description="The table's columns as an Avro record schema: inline, or the path of "
        "an `.avsc` file (relative to the config file). Needed by CDC queries and by Avro "
        "output, except where the source's own schema gives them (Debezium with schemas, "
        "canal-json).",
    )
    primary_key: list[Annotated[str, Field(min_length=1)]] | None = Field(
        None, description="The key columns, in key order; required with `table_schema`."
    )

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


class ResolvedConfig(Section):
    """Resolved-timestamp markers to every partition of every output topic."""

    enabled: bool = Field(True, description="Send resolved markers.")
    interval: Duration = Field(
        timedelta(seconds=10),
        description="At most one marker per interval, and only when the high-water mark advanced.",
        json_schema_extra=cockroachdb("resolved"),
    )


class CheckpointConfig(Section):
    """Progress kept in a compacted Kafka topic (contract §6).

    While any partition advances, every partition's progress is checkpointed once per
    ``min_checkpoint_frequency`` (and before each marker, and at a stop:
    ``pipeline/core/progress/policy.py``), whether the high-water mark moved or not.
    ``frontier_highwater_lag_checkpoint_threshold`` is kept for compatibility: that rule
    subsumes it (it asked for a checkpoint of the leading partitions once the high-water mark
    lagged them by that much), so it is accepted and has no effect.
    """

    topic: Name = Field(
        "_highwater_checkpoints",
        description="The compacted topic of checkpoint records, one per changefeed, keyed by "
        "`changefeed_id`.",
    )
    replication_factor: Replication = Field(
        "auto", description="Copies of the topics of Highwater's own records it creates."
    )
    min_checkpoint_frequency: Duration = Field(
        timedelta(seconds=30),
        description="While any source partition advances, every partition's offset and "
        "resolved time are checkpointed this often, whether the high-water mark moved or not.",
        json_schema_extra=cockroachdb("min_checkpoint_frequency"),
    )
    frontier_highwater_lag_checkpoint_threshold: Duration = Field(
        timedelta(minutes=10),
        description="Kept for compatibility; no effect (the leading partitions' progress is "
        "always saved now).",
        json_schema_extra=cockroachdb("changefeed.frontier_highwater_lag_checkpoint_threshold"),
    )
    frontier_checkpoint_max_bytes: Annotated[int, Field(ge=1024)] = Field(
        1 << 20,
        description="A checkpoint record's size bound: past it, detail is dropped in safe "
        "steps (`leading`, then `offsets`, then `high_water`).",
        json_schema_extra=cockroachdb("changefeed.frontier_checkpoint_max_bytes"),
    )
    progress_topic: Name | None = Field(
        None,
        description="`delivery: exactly_once`: the compacted topic of each source "
        "partition's committed progress; default `_highwater_progress_<changefeed_id>`.",
    )


class InitialScanConfig(Section):
    """The snapshot before the stream (contract §7).

    ``initial_scan: yes | no | only`` is short for ``initial_scan: {mode: …}``. The mode
    defaults to ``yes`` for a new changefeed without ``cursor``, ``no`` with one.
    ``rate_limit`` is in rows per second.
    """

    mode: Annotated[Literal["yes", "no", "only"] | None, BeforeValidator(yaml_yes_no)] = Field(
        None,
        description="`yes`: a snapshot at the statement time, then the stream; `no`: the "
        "changes only; `only`: the snapshot and its marker, then the job ends. Unset: `yes` "
        "without `cursor`, `no` with one.",
        json_schema_extra=cockroachdb("initial_scan"),
    )
    rate_limit: Annotated[float, Field(gt=0)] | None = Field(
        None,
        description="Rows per second the snapshot may write, shared by the chunks in flight.",
    )


def scan_shorthand(value: object) -> object:
    """``initial_scan: yes | no | only`` as ``{mode: …}``."""
    if value is None or isinstance(value, bool | str):
        return {"mode": yaml_yes_no(value)}
    return value


class JobsConfig(Section):
    """The job status topic: each changefeed's state, progress and error, for operators."""

    topic: Name = Field(
        "_highwater_jobs",
        description="The compacted job status topic (on the source cluster): each "
        "changefeed's status and the operators' specs.",
    )


class SafepointsConfig(Section):
    """Safepoints that hold back trimming of the source topics (contract §8)."""

    enabled: bool = Field(True, description="Hold a safepoint for the changefeed.")
    topic: Name = Field(
        "_highwater_safepoints", description="The compacted topic of safepoint records."
    )
    cluster: Name = Field(
        "default",
        description="The cluster's name in safepoint ids (`highwater-<cluster>-...`).",
    )
    gc_ttl: Duration = Field(
        timedelta(hours=24),
        description="How long the changefeed's safepoint outlives its last refresh (a "
        "stopped changefeed's data is protected this long).",
    )


class MetricsConfig(Section):
    """The run's Prometheus endpoint (``/metrics``); its address goes into the job status."""

    enabled: bool = Field(True, description="Serve Prometheus' `/metrics`.")
    host: Annotated[str, Field(min_length=1)] = Field(
        "127.0.0.1", description="The address the endpoint binds."
    )
    port: Annotated[int, Field(ge=0, le=65535)] = Field(
        0, description="The endpoint's port; 0: any free port (the job status names it)."
    )
    replication_check_interval: Duration = Field(
        timedelta(seconds=30),
        description="How often a run re-reads the replicas of the topics it relies on (the "
        "job status' warnings, `highwater_under_replicated_partitions`); 0: at its start only.",
    )


class TriggerConfig(Section):
    """How often Spark runs a micro-batch; ``available_now`` drains what is there and stops."""

    processing_time: Duration = Field(
        timedelta(seconds=1), description="How often a micro-batch starts."
    )
    available_now: bool = Field(False, description="Drain what is on the source topics, then stop.")


class SparkConfig(Section):
    """The SparkSession and the streaming query."""

    master: Annotated[str, Field(min_length=1)] = Field(
        "local[2]",
        description="Spark's master: `local[N]`, `spark://host:7077`, `yarn`, `k8s://...` "
        "(the driver runs where `highwater run` runs).",
    )
    app_name: str | None = Field(None, description="The Spark application's name.")
    checkpoint_location: str | None = Field(
        None,
        description="Spark's own checkpoint directory: scratch, cleared at every start "
        "(progress lives in the checkpoint topic).",
    )
    trigger: TriggerConfig = Field(TriggerConfig(), description="When micro-batches run.")
    max_offsets_per_trigger: PositiveInt | None = Field(
        None, description="At most this many source records per micro-batch."
    )
    conf: dict[str, str] = Field(
        default_factory=dict,
        description="Spark settings for `spark-submit --conf` "
        "(`spark.submit.deployMode` must stay `client`).",
    )
    python_env: Annotated[str, Field(pattern=r"^(auto|none|.+\.tar\.gz)$")] = Field(
        "auto",
        description="The executors' Python off local mode: `auto` packs the runtime "
        "environment and ships it with each run; `none` uses the driver's interpreter path "
        "(workers that see the submitter's files); or a `.tar.gz` to ship.",
    )

    @field_validator("conf")
    @classmethod
    def _client_mode(cls, value: dict[str, str]) -> dict[str, str]:
        if value.get("spark.submit.deployMode", "client") != "client":
            raise ValueError(
                "spark.submit.deployMode must stay 'client': the driver runs where "
                "`highwater run` runs and reads the config and table schemas there"
            )
        return value
