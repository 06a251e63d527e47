"""Making output schemas known: registered in a schema registry, or published to a topic.

* **Registry** (Confluent-compatible API; Apicurio's ``/apis/ccompat/v7`` works): the key
  schema under ``<topic>-key``, the envelope and the resolved record under ``<topic>-value``
  (TopicNameStrategy; ``avro_schema_prefix`` goes before each subject, as CockroachDB's).
  Registering an identical schema again returns its id, so a restart registers nothing new;
  a changed table registers a new version if the subject's compatibility rule accepts it,
  else :class:`SchemaError` names the subject and the registry's reason, before anything is
  written.
* **Schema topic** (no registry): every schema whole (logical types and all), keyed by the
  CRC-64-AVRO fingerprint (hex) of its canonical form in a compacted topic, so a consumer
  reads the topic once and decodes any single-object record by the fingerprint in its
  header. (Published before it is used: an evolved schema too.)
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from typing import Any

from encoders.avro import Framing
from schemas.avro import (
    CONFLUENT_MAGIC,
    SINGLE_OBJECT_MAGIC,
    OutputSchemas,
    single_object_fingerprint,
)
from schemas.errors import SchemaError
from schemas.protobuf import KEY_INDEX, MESSAGE_INDEX, header, proto_text

from .compacted import CompactedTopic


class SchemaPublisher:
    """Where a changefeed's output schemas are made known: its registry, or its schema topic."""

    def __init__(
        self,
        registry: Mapping[str, Any] | None,
        topic: CompactedTopic | None = None,
        subject_prefix: str = "",
    ) -> None:
        if (registry is None) == (topic is None):
            raise ValueError("a registry or a schema topic, one of them")
        self.registry = registry
        self.topic = topic
        self.subject_prefix = subject_prefix  # ``avro_schema_prefix``: before each subject

    def framing(self, topic: str, schemas: OutputSchemas, *, evolved: bool = False) -> Framing:
        """Make ``topic``'s schemas known; the framing names them in each record.

        ``evolved``: a schema grown during the run, which the registry must find compatible
        with the subject's latest version (its compatibility rule) before it is registered.
        """
        if self.registry is None:
            assert self.topic is not None  # noqa: S101 - __init__ checked
            return publish(self.topic, schemas)
        if evolved:
            check_compatible(self.registry, f"{self.subject_prefix}{topic}-value", schemas.value)
        return register(self.registry, self.subject_prefix + topic, schemas)

    def marker(self, topic: str, schema: Mapping[str, Any]) -> bytes:
        """Make only the resolved marker's ``schema`` known (a table whose columns are not yet).

        Returns the header of its records.
        """
        if self.registry is None:
            assert self.topic is not None  # noqa: S101 - __init__ checked
            self.topic.put(_fingerprint(schema), _text(schema))
            return SINGLE_OBJECT_MAGIC + single_object_fingerprint(schema)
        (schema_id,) = _register(self.registry, [(f"{self.subject_prefix}{topic}-value", schema)])
        return CONFLUENT_MAGIC + struct.pack(">I", schema_id)

    def version(self, topic: str, framing: Framing) -> str:
        """How a reader names the value schema: its registry id, or its fingerprint."""
        header = framing.value
        if self.registry is None:
            return f"fingerprint {header[2:].hex()}"
        schema_id = int.from_bytes(header[1:5], "big")
        return f"id {schema_id} of subject {self.subject_prefix}{topic}-value"


def check_compatible(registry: Mapping[str, Any], subject: str, schema: Mapping[str, Any]) -> None:
    """Refuse (:class:`SchemaError`) a schema the registry finds incompatible with ``subject``."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient  # noqa: PLC0415
    from confluent_kafka.schema_registry.error import SchemaRegistryError  # noqa: PLC0415

    client = SchemaRegistryClient(dict(registry))
    try:
        compatible = client.test_compatibility(subject, Schema(json.dumps(schema), "AVRO"))
    except SchemaRegistryError as exc:
        if exc.http_status_code == 404:  # no version yet: nothing to be incompatible with
            return
        raise SchemaError(
            f"the schema registry could not check the schema of subject {subject!r}: "
            f"{exc.error_message} (HTTP {exc.http_status_code})"
        ) from None
    except Exception as exc:
        raise SchemaError(
            f"cannot reach the schema registry for subject {subject!r}: {exc}"
        ) from exc
    if not compatible:
        raise SchemaError(
            f"the schema registry finds the new schema of subject {subject!r} incompatible with "
            "its latest version (the subject's compatibility rule)"
        )


def register(registry: Mapping[str, Any], topic: str, schemas: OutputSchemas) -> Framing:
    """Register ``topic``'s schemas, under ``<topic>-key`` and ``<topic>-value``.

    The framing carries their ids.

    ``registry`` is the ``SchemaRegistryClient`` configuration (``url``, auth).
    """
    ids = _register(
        registry,
        [
            (f"{topic}-key", schemas.key),
            (f"{topic}-value", schemas.value),
            (f"{topic}-value", schemas.resolved),
        ],
    )
    return Framing.confluent(*ids)


def register_protobuf(registry: Mapping[str, Any], topic: str) -> tuple[bytes, bytes]:
    """Register the protobuf messages under ``<topic>-key`` and ``<topic>-value``.

    One file for both (``schemas/highwater_changefeed.proto``, its import a well-known type
    the registry knows); the headers of keys (``Key``) and values (``Message``) returned.
    """
    text = proto_text()
    key_id, value_id = _register(
        registry, [(f"{topic}-key", text), (f"{topic}-value", text)], "PROTOBUF"
    )
    return header(key_id, KEY_INDEX), header(value_id, MESSAGE_INDEX)


def _register(
    registry: Mapping[str, Any],
    schemas: list[tuple[str, Mapping[str, Any] | str]],
    kind: str = "AVRO",
) -> list[int]:
    """Each ``(subject, schema)`` registered, in order: their ids (``kind``: its type)."""
    # the registry client (and its HTTP stack) only for outputs with a registry
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient  # noqa: PLC0415
    from confluent_kafka.schema_registry.error import SchemaRegistryError  # noqa: PLC0415

    client = SchemaRegistryClient(dict(registry))
    ids = []
    for subject, schema in schemas:
        text = schema if isinstance(schema, str) else json.dumps(schema)
        try:
            ids.append(client.register_schema(subject, Schema(text, kind)))
        except SchemaRegistryError as exc:
            raise SchemaError(
                f"the schema registry refused the schema for subject {subject!r}: "
                f"{exc.error_message} (HTTP {exc.http_status_code})"
            ) from None
        except Exception as exc:
            raise SchemaError(
                f"cannot register the schema for subject {subject!r} at "
                f"{registry.get('url')}: {exc}"
            ) from exc
    return ids


def publish(topic: CompactedTopic, schemas: OutputSchemas) -> Framing:
    """Publish the schemas to the schema topic under their fingerprints (hex keys)."""
    for schema in (schemas.key, schemas.value, schemas.resolved):
        topic.put(_fingerprint(schema), _text(schema))
    return Framing.single_object(schemas)


def _fingerprint(schema: Mapping[str, Any]) -> str:
    return single_object_fingerprint(schema).hex()


def _text(schema: Mapping[str, Any]) -> bytes:
    """The whole schema, logical types included (the canonical form drops them)."""
    return json.dumps(schema, sort_keys=True, separators=(",", ":")).encode()
