"""The output's sections: where the rows go (``sink``) and in what shape (``encoder``).

The sink's topics, their partitions and copies, and the producer settings the rows are
written with (``producer``, and CockroachDB's ``kafka_sink_config`` mapped to them); the
envelope, its options, the format and where Avro schemas are made known. Each refuses the
combinations of its own options that make no sense (``diff`` with ``key_only``, an unsafe
producer setting, a setting given twice).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, PositiveInt, field_validator, model_validator

from encoders.base import Envelope

from .fields import Name, Replication, Section, cockroachdb, combination
from .kafka_sink import KafkaSinkOption, json_text, merged
from .sections import KafkaOptions, SchemaRegistryConfig

HeaderName = Annotated[str, Field(min_length=1)]


class SinkConfig(Section):
    """Where output topics go and how they are created."""

    kafka: KafkaOptions | None = Field(
        None, description="Another cluster for the output topics; unset: the source cluster."
    )
    topic_prefix: str = Field(
        "",
        description="Output topics are named `<topic_prefix><table>`.",
        json_schema_extra=cockroachdb("topic_prefix"),
    )
    topic_name: Name | None = Field(
        None,
        description="One output topic instead (a changefeed of one table only).",
        json_schema_extra=cockroachdb("topic_name"),
    )
    partitions: PositiveInt = Field(
        3, description="Partitions of the output topics Highwater creates."
    )
    replication_factor: Replication = Field(
        "auto",
        description="Copies of the output, dead-letter and schema topics it creates: `auto` "
        "is 3 on a cluster of 3 brokers or more, else one per broker; a number is taken as "
        "given (a warning when below what the cluster could keep).",
    )
    producer: dict[str, str] = Field(
        default_factory=dict,
        description="Kafka producer settings over Highwater's defaults (`linger.ms` 5, "
        "`batch.size` 262144; exactly once's transactional producers `retry.backoff.ms` "
        "10). `acks` stays `all`, idempotence on, and `transactional.id` is the "
        "changefeed's.",
    )

    kafka_sink_config: KafkaSinkOption | None = Field(
        None,
        description="CockroachDB's `kafka_sink_config` (a mapping or its JSON text): Sarama's "
        "`Flush`, `Compression`, `CompressionLevel`, `ClientID`, `RequiredAcks` and `Version`, "
        "mapped to the producer settings that do the same (a setting given here and in "
        "`producer` too is refused).",
        json_schema_extra={"cockroachdb": "kafka_sink_config"},
    )

    extra_headers: (
        Annotated[dict[Annotated[str, Field(min_length=1)], str], BeforeValidator(json_text)] | None
    ) = Field(
        None,
        description="Kafka headers on every output record, rows and resolved markers: names "
        "to string values (a mapping or its JSON text), after a record's own; names under "
        "`highwater.` are Highwater's.",
        json_schema_extra=cockroachdb("extra_headers"),
    )

    @model_validator(mode="after")
    def _one_source_per_setting(self) -> SinkConfig:
        merged(self.kafka_sink_config, self.producer)
        return self

    @property
    def producer_settings(self) -> dict[str, str]:
        """The settings over Highwater's: ``kafka_sink_config``'s, then ``producer``'s."""
        return merged(self.kafka_sink_config, self.producer)

    def warnings(self) -> list[str]:
        """What a run says of these settings at its start: keys without an equivalent."""
        return [] if self.kafka_sink_config is None else self.kafka_sink_config.warnings()

    @field_validator("extra_headers")
    @classmethod
    def _not_ours(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        ours = sorted(name for name in value or () if name.startswith("highwater."))
        if ours:
            raise ValueError(
                f"header names under 'highwater.' are Highwater's own (a dead letter's reason "
                f"and source): {', '.join(ours)}"
            )
        return value

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

    format: Literal["json", "avro", "protobuf"] = Field(
        "json",
        description="The output records' format (`protobuf`: the table-independent messages "
        "of `schemas/highwater_changefeed.proto`, wire-compatible with CockroachDB's).",
        json_schema_extra=cockroachdb("format"),
    )
    envelope: Envelope = Field(
        "wrapped",
        description="The value's shape: `wrapped` (`after`, `before`, metadata), `bare` "
        "(columns at the top, metadata under `__hw__`), `key_only`, `row` (the columns only), "
        "`enriched` (CockroachDB's: `after`, `before`, `op`, `ts_ns`, the key an object).",
        json_schema_extra=cockroachdb("envelope"),
    )
    enriched_properties: list[Literal["source", "schema"]] = Field(
        [],
        description="Under `envelope: enriched`: `source` adds the block saying where each "
        "change came from (changefeed, table, source topic, partition and offset, the "
        "database's position, the transaction; with `updated` its commit time).",
        json_schema_extra=cockroachdb("enriched_properties"),
    )
    updated: bool = Field(
        False,
        description="Add `updated`, the change's commit time.",
        json_schema_extra=cockroachdb("updated"),
    )
    mvcc_timestamp: bool = Field(
        False,
        description="Add `mvcc_timestamp`, the version's own commit time.",
        json_schema_extra=cockroachdb("mvcc_timestamp"),
    )
    diff: bool = Field(
        False,
        description="Add `before`, the row before the change.",
        json_schema_extra=cockroachdb("diff"),
    )
    key_in_value: bool = Field(
        False, description="Add `key` to the value.", json_schema_extra=cockroachdb("key_in_value")
    )
    topic_in_value: bool = Field(
        False,
        description="Add `topic` to the value.",
        json_schema_extra=cockroachdb("topic_in_value"),
    )
    full_table_name: bool = Field(
        False,
        description="Name output topics `<database>.<schema_name>.<table>` (with the prefix).",
        json_schema_extra=cockroachdb("full_table_name"),
    )
    select: list[Annotated[str, Field(min_length=1)]] | None = Field(
        None,
        description="A CDC query's columns: Spark SQL expressions over the row (`AS` names a "
        "computed one), replacing `after` and `before`; needs the table's declared columns.",
    )
    where: Annotated[str, Field(min_length=1)] | None = Field(
        None,
        description="A CDC query's filter: a Spark SQL condition a change's new version must "
        "meet (a delete is judged by the row it deletes).",
    )
    schema_registry: SchemaRegistryConfig | None = Field(
        None,
        description="Avro and protobuf: a Confluent-compatible registry (subjects "
        "`<topic>-key`, `<topic>-value`, the Confluent wire format); unset: Avro's "
        "single-object encoding with the schemas in `schema_topic`, protobuf's bare messages.",
        json_schema_extra=cockroachdb("confluent_schema_registry"),
    )
    key_column: Annotated[str, Field(min_length=1)] | None = Field(
        None,
        description="Key (and so partition) the records by this column's value instead of the "
        "primary key: the key is `[value]` (Avro: a record of that column). A key's versions "
        "stay in order only while that column keeps its value: needs `unordered`.",
        json_schema_extra=cockroachdb("key_column"),
    )
    headers_json_column_name: Annotated[str, Field(min_length=1)] | None = Field(
        None,
        description="A column holding a JSON object (or its text) whose members become each "
        "record's Kafka headers (strings as their UTF-8, other values as JSON, nulls left "
        "out), the column left out of the value; from the new version, a delete's old one.",
        json_schema_extra=cockroachdb("headers_json_column_name"),
    )
    unordered: bool = Field(
        False,
        description="Accept that a row's versions may be on several partitions, out of order "
        "between them (`key_column`); markers still hold on every partition.",
        json_schema_extra=cockroachdb("unordered"),
    )
    avro_schema_prefix: (
        Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")] | None
    ) = Field(
        None,
        description="Avro: the namespace of the output's records, and (with a registry) a "
        "prefix of their subjects (`<prefix><topic>-key`, `<prefix><topic>-value`), so "
        "changefeeds of tables with the same name share one registry.",
        json_schema_extra={"cockroachdb": "avro_schema_prefix"},
    )
    schema_topic: Name = Field(
        "_highwater_schemas",
        description="Registry-free Avro: the compacted topic the schemas are published to, "
        "keyed by fingerprint.",
    )

    def _enriched(self) -> None:
        """What ``envelope: enriched`` and ``enriched_properties`` cannot go with."""
        if self.enriched_properties and self.envelope != "enriched":
            raise combination("enriched_properties", "is only used with envelope: enriched")
        if self.envelope == "enriched":
            for option in ("topic_in_value", "select", "where"):
                if getattr(self, option) not in (False, None):
                    raise combination(
                        option,
                        "cannot be used with envelope 'enriched' (as in CockroachDB: its "
                        "envelope has no place for it)",
                    )

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
        if self.key_column is not None and not self.unordered:
            raise combination(
                "unordered",
                "must be true with key_column: a row's versions are keyed by that column's "
                "value, so they may be on several partitions, in no order between them",
            )
        if self.key_column is not None and self.envelope == "key_only":
            raise combination(
                "key_column",
                "cannot be used with envelope 'key_only' (the record would not name its row)",
            )
        self._enriched()
        if self.envelope == "row" and self.diff:
            raise combination("diff", "cannot be used with envelope 'row' (no place for 'before')")
        self._formats()
        return self

    def _formats(self) -> None:
        """What each output format holds."""
        if self.schema_registry is not None and self.format == "json":
            raise combination("schema_registry", "is only used with format: avro or protobuf")
        if self.avro_schema_prefix is not None and self.format != "avro":
            raise combination("avro_schema_prefix", "is only used with format: avro")
        if self.format == "avro" and self.envelope not in ("wrapped", "key_only", "enriched"):
            raise combination(
                "envelope",
                f"'{self.envelope}' has no Avro form (use wrapped, key_only or enriched)",
            )
        if self.format == "protobuf" and self.envelope not in ("wrapped", "bare", "enriched"):
            raise combination(
                "envelope",
                f"'{self.envelope}' has no protobuf message (as in CockroachDB: use wrapped, "
                "bare or enriched)",
            )
        if self.format == "protobuf" and self.headers_json_column_name is not None:
            raise combination(
                "headers_json_column_name",
                "cannot be used with format: protobuf (as in CockroachDB)",
            )
