"""Making output schemas known: registered in a schema registry, or published to a topic.

* **Registry** (Confluent-compatible API; Apicurio's ``/apis/ccompat/v7`` works): the key
  schema under ``<topic>-key``, the envelope and the resolved record under ``<topic>-value``
  (TopicNameStrategy). Registering an identical schema again returns its id, so a restart
  registers nothing new; a changed table registers a new version if the subject's
  compatibility rule accepts it, else :class:`SchemaError` names the subject and the
  registry's reason, before anything is written.
* **Schema topic** (no registry): every schema in canonical form, keyed by its CRC-64-AVRO
  fingerprint (hex) in a compacted topic, so a consumer reads the topic once and decodes any
  single-object record by the fingerprint in its header.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from fastavro.schema import to_parsing_canonical_form

from encoders.avro import Framing
from schemas.avro import OutputSchemas, single_object_fingerprint
from schemas.errors import SchemaError

from .compacted import CompactedTopic


def register(registry: Mapping[str, Any], topic: str, schemas: OutputSchemas) -> Framing:
    """Register ``topic``'s schemas; the framing carries their ids.

    ``registry`` is the ``SchemaRegistryClient`` configuration (``url``, auth).
    """
    # the registry client (and its HTTP stack) only for Avro with a registry
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient  # noqa: PLC0415
    from confluent_kafka.schema_registry.error import SchemaRegistryError  # noqa: PLC0415

    client = SchemaRegistryClient(dict(registry))
    ids = []
    for subject, schema in (
        (f"{topic}-key", schemas.key),
        (f"{topic}-value", schemas.value),
        (f"{topic}-value", schemas.resolved),
    ):
        try:
            ids.append(client.register_schema(subject, Schema(json.dumps(schema), "AVRO")))
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
    return Framing.confluent(*ids)


def publish(topic: CompactedTopic, schemas: OutputSchemas) -> Framing:
    """Publish the schemas to the schema topic under their fingerprints (hex keys)."""
    for schema in (schemas.key, schemas.value, schemas.resolved):
        canonical = to_parsing_canonical_form(schema)
        topic.put(single_object_fingerprint(schema).hex(), canonical.encode())
    return Framing.single_object(schemas)
