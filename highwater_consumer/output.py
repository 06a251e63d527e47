"""A changefeed's output as a consumer needs it: its topics and tables, format and schemas.

Found from the changefeed id (its job status, which every run writes to the jobs topic with
where and how it writes), or given. No Spark and no pipeline: the job status is read here as
the JSON it is.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from schemas.tables import TableSchema

from .decoding import (
    AvroDecoder,
    ConsumerError,
    Decoder,
    JsonDecoder,
    fingerprint_lookup,
    registry_lookup,
)
from .protobuf import ProtobufDecoder

JOBS_TOPIC = "_highwater_jobs"  # the default of the changefeed's ``jobs.topic``
SCHEMA_TOPIC = "_highwater_schemas"  # the default of ``encoder.schema_topic``


@dataclass(frozen=True)
class Output:
    """Where and how a changefeed writes.

    ``topics``: output topic -> the table it carries; ``registry``: confluent-kafka's
    ``SchemaRegistryClient`` config (Avro in Confluent's wire format); ``schema_topic``:
    registry-free Avro's compacted schema topic; ``schemas``: the tables the changefeed
    declares (table -> its schema and key), from which an applier makes its tables.
    """

    bootstrap: str
    topics: Mapping[str, str]
    format: str = "json"
    registry: Mapping[str, Any] | None = None
    schema_topic: str | None = None
    kafka: Mapping[str, Any] = field(default_factory=dict)  # more client settings (security)
    schemas: Mapping[str, TableSchema] = field(default_factory=dict)
    dead_letters: str | None = None  # the changefeed's dead-letter topic (appliers' --on-error)
    key_column: str | None = None  # the records are keyed by this column, not the primary key

    def __post_init__(self) -> None:
        if not self.topics:
            raise ConsumerError("an output has at least one topic")
        if self.format not in ("json", "avro", "protobuf"):
            raise ConsumerError(f"format: {self.format!r} is none of json, avro, protobuf")
        if self.format == "avro" and self.registry is None and self.schema_topic is None:
            raise ConsumerError("format: avro needs a schema registry or a schema topic")

    @classmethod
    def of_changefeed(
        cls,
        bootstrap: str,
        changefeed_id: str,
        *,
        jobs_topic: str = JOBS_TOPIC,
        registry: Mapping[str, Any] | None = None,
        kafka: Mapping[str, Any] | None = None,
    ) -> Output:
        """The output a changefeed's job status names (``registry``: credentials to add)."""
        settings = dict(kafka or {})
        data = read_compacted(bootstrap, jobs_topic, settings).get(changefeed_id.encode())
        if data is None:
            raise ConsumerError(
                f"no job status of changefeed {changefeed_id!r} in topic {jobs_topic!r} "
                f"(has it run? is jobs.topic another?)"
            )
        output = json.loads(data).get("output")
        if output is None:
            raise ConsumerError(
                f"the job status of changefeed {changefeed_id!r} does not name its output "
                f"(written by an older Highwater): give the topics instead"
            )
        timed = output["envelope"] == "wrapped" or (
            output["envelope"] == "enriched" and "source" in output.get("enriched_properties", [])
        )
        if not (timed and output["updated"]):
            raise ConsumerError(
                f"changefeed {changefeed_id!r} writes envelope: {output['envelope']}, updated: "
                f"{str(output['updated']).lower()}; windows need envelope: wrapped with "
                f"updated: true (or enriched with updated: true and enriched_properties: "
                f"[source])"
            )
        url = output.get("registry")
        return cls(
            bootstrap=bootstrap,
            topics=dict(output["topics"]),
            format=output["format"],
            registry=None if url is None else {"url": url, **(registry or {})},
            schema_topic=output.get("schema_topic"),
            dead_letters=output.get("dead_letters"),
            key_column=output.get("key_column"),
            kafka=settings,
            schemas={
                table: TableSchema.of(declared["record"], declared["primary_key"])
                for table, declared in (output.get("tables") or {}).items()
            },
        )

    def keyed_by_rows(self) -> None:
        """Refuse (:class:`ConsumerError`) records keyed by another column than the rows' key.

        An applier upserts and deletes rows by their records' keys (``key_column``: not them).
        """
        if self.key_column is not None:
            raise ConsumerError(
                f"the changefeed keys its records by column {self.key_column!r} (key_column), "
                "not by the tables' primary keys, which an applier upserts and deletes by"
            )

    def decoder(self) -> Decoder:
        """The decoder of this output's records."""
        if self.format == "json":
            return Decoder(JsonDecoder())
        if self.format == "protobuf":
            return Decoder(ProtobufDecoder())
        if self.registry is not None:
            return Decoder(AvroDecoder(registry_lookup(self.registry)))
        topic = self.schema_topic or SCHEMA_TOPIC

        def schemas() -> dict[str, str]:
            records = read_compacted(self.bootstrap, topic, dict(self.kafka))
            return {k.decode(): v.decode() for k, v in records.items() if v is not None}

        return Decoder(AvroDecoder(fingerprint_lookup(schemas(), schemas)))


def read_compacted(
    bootstrap: str, topic: str, kafka: Mapping[str, Any], timeout: float = 30.0
) -> dict[bytes, bytes | None]:
    """A compacted topic's latest value per key, read to its end as it stands now."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "highwater-consumer-reader",
            "enable.auto.commit": False,
            **kafka,
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        if metadata is None or metadata.error is not None:
            raise ConsumerError(f"topic {topic!r} cannot be read at {bootstrap}")
        ends = {}
        for partition in metadata.partitions:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=timeout
            )
            if high > low:
                ends[partition] = high
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        out: dict[bytes, bytes | None] = {}
        deadline = time.monotonic() + timeout
        while ends:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None and message.key() is not None:
                out[message.key()] = message.value()  # type: ignore[index]
            # the position, not the last offset read: a transaction's markers take offsets too
            for tp in consumer.position([TopicPartition(topic, p) for p in list(ends)]):
                if tp.offset >= ends[tp.partition]:
                    del ends[tp.partition]
            if ends and time.monotonic() > deadline:
                raise ConsumerError(f"topic {topic!r} was not read to its end in {timeout:.0f} s")
        return out
    finally:
        consumer.close()


def keyed_by_rows(consumer: Any) -> None:
    """Refuse a consumer whose output keys its records by another column (an applier's check).

    Any object with ``windows()`` applies; one without an ``output`` (a test's windows) has
    nothing to refuse.
    """
    output = getattr(consumer, "output", None)
    if isinstance(output, Output):
        output.keyed_by_rows()
