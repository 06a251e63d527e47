"""CockroachDB's ``kafka_sink_config``, taken as written and mapped to Kafka producer settings.

A changefeed moved from CockroachDB carries its sink settings in Sarama's words (CockroachDB
writes with the Go client Sarama): ``{"Flush": {"Frequency": "1s", "Bytes": 1048576},
"Compression": "ZSTD", "ClientID": "orders-feed", "RequiredAcks": "ALL"}``, as a mapping or
as the JSON text CockroachDB takes. Highwater writes with Kafka's Java producer, so each key
becomes the producer setting that does the same (:meth:`KafkaSinkConfig.producer_settings`):

==========================  ==================================================================
``Flush.Frequency``         ``linger.ms``: how long a batch waits for more records
``Flush.Bytes``             ``batch.size``: a batch sent once it holds this many bytes
``Flush.Messages``,         no equivalent (the Java producer batches by bytes and time, not by
``Flush.MaxMessages``       count): accepted so the config carries over, and named in the
                            run's warnings
``Compression``             ``compression.type`` (``NONE``, ``GZIP``, ``SNAPPY``, ``LZ4``,
                            ``ZSTD``)
``CompressionLevel``        ``compression.<gzip|lz4|zstd>.level``
``ClientID``                ``client.id``
``RequiredAcks``            ``ALL`` (or ``-1``) only: a resolved marker promises its rows are
                            on every in-sync replica, which ``ONE`` and ``NONE`` do not give
``Version``                 none: the Java client agrees on the protocol with each broker;
                            named in the run's warnings
==========================  ==================================================================

Unknown keys are refused by their key path, as everywhere in the config.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, NonNegativeInt, PositiveInt, model_validator
from pydantic_core import PydanticCustomError

from .fields import Duration, Section, combination

Codec = Literal["NONE", "GZIP", "SNAPPY", "LZ4", "ZSTD"]
LEVELLED = {"GZIP": "gzip", "LZ4": "lz4", "ZSTD": "zstd"}  # codecs with a compression level


def json_text(value: object) -> object:
    """CockroachDB takes such options as JSON text: the same object, written out."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise PydanticCustomError(
            "json", "not a JSON object: {reason}", {"reason": exc.msg}
        ) from exc


def _upper(value: object) -> object:
    return value.upper() if isinstance(value, str) else value


def _acks(value: object) -> object:
    text = str(value).upper() if isinstance(value, str | int) else value
    if text in ("ALL", "-1", "WAITFORALL"):
        return "ALL"
    if text in ("ONE", "1", "WAITFORLOCAL", "NONE", "0", "NORESPONSE"):
        raise PydanticCustomError(
            "acks",
            "Highwater writes with acks=all and cannot take {value!r}: a resolved marker "
            "promises that its rows are on every in-sync replica",
            {"value": value},
        )
    return value  # refused by the type, with the values it takes


class FlushConfig(Section):
    """Sarama's ``Producer.Flush``: when a batch is sent."""

    frequency: Duration | None = Field(
        None, alias="Frequency", description="`linger.ms`: how long a batch waits for more."
    )
    bytes: PositiveInt | None = Field(
        None, alias="Bytes", description="`batch.size`: a batch is sent once this full."
    )
    messages: NonNegativeInt | None = Field(
        None,
        alias="Messages",
        description="Sarama's count trigger: no Java producer equivalent (it batches by bytes "
        "and time); accepted and named in the run's warnings.",
    )
    max_messages: NonNegativeInt | None = Field(
        None,
        alias="MaxMessages",
        description="Sarama's cap on a request's records: no Java producer equivalent; "
        "accepted and named in the run's warnings.",
    )


class KafkaSinkConfig(Section):
    """CockroachDB's `kafka_sink_config`, mapped to Kafka producer settings."""

    flush: FlushConfig = Field(
        FlushConfig(), alias="Flush", description="When a batch is sent (Sarama's Flush)."
    )
    required_acks: Annotated[Literal["ALL"], BeforeValidator(_acks)] | None = Field(
        None,
        alias="RequiredAcks",
        description="`ALL` (or `-1`): what Highwater always writes with; `ONE` and `NONE` "
        "are refused (a marker promises its rows are durable).",
    )
    compression: Annotated[Codec, BeforeValidator(_upper)] | None = Field(
        None, alias="Compression", description="`compression.type` of the output's batches."
    )
    compression_level: int | None = Field(
        None,
        alias="CompressionLevel",
        description="`compression.gzip.level`, `compression.lz4.level` or "
        "`compression.zstd.level`, by `Compression`.",
    )
    client_id: Annotated[str, Field(min_length=1)] | None = Field(
        None, alias="ClientID", description="`client.id` of the output's producers."
    )
    version: Annotated[str, Field(min_length=1)] | None = Field(
        None,
        alias="Version",
        description="Sarama's protocol version: the Java client agrees on one with each "
        "broker; accepted and named in the run's warnings.",
    )

    @model_validator(mode="after")
    def _level_needs_codec(self) -> KafkaSinkConfig:
        if self.compression_level is not None and self.compression not in LEVELLED:
            raise combination(
                "CompressionLevel",
                f"needs Compression GZIP, LZ4 or ZSTD (Compression: {self.compression or 'unset'})",
            )
        return self

    def producer_settings(self) -> dict[str, str]:
        """The Kafka producer settings these keys stand for."""
        flush, out = self.flush, {}
        if flush.frequency is not None:
            out["linger.ms"] = str(round(flush.frequency.total_seconds() * 1000))
        if flush.bytes is not None:
            out["batch.size"] = str(flush.bytes)
        if self.compression is not None:
            out["compression.type"] = self.compression.lower()
        if self.compression_level is not None and self.compression in LEVELLED:
            out[f"compression.{LEVELLED[self.compression]}.level"] = str(self.compression_level)
        if self.client_id is not None:
            out["client.id"] = self.client_id
        return out

    def warnings(self) -> list[str]:
        """The keys taken but without an equivalent, each with why."""
        ignored = {
            "Flush.Messages": self.flush.messages,
            "Flush.MaxMessages": self.flush.max_messages,
            "Version": self.version,
        }
        return [
            f"sink.kafka_sink_config.{key} has no Kafka Java producer equivalent and is "
            "ignored: its producer batches by bytes (Flush.Bytes) and time (Flush.Frequency) "
            "and agrees on the protocol version with each broker"
            for key, value in ignored.items()
            if value is not None
        ]


KafkaSinkOption = Annotated[KafkaSinkConfig, BeforeValidator(json_text)]


def merged(kafka_sink: KafkaSinkConfig | None, producer: dict[str, str]) -> dict[str, str]:
    """``kafka_sink_config``'s settings under ``producer``'s; a setting given by both refused."""
    mapped = {} if kafka_sink is None else kafka_sink.producer_settings()
    both = sorted(set(mapped) & set(producer))
    if both:
        raise combination(
            "kafka_sink_config",
            "sets what `producer` sets too: " + ", ".join(both) + " (keep one of them)",
        )
    return mapped | producer


__all__ = ["KafkaSinkConfig", "KafkaSinkOption", "json_text", "merged"]
