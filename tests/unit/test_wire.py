"""Confluent's wire format: writer schemas that reference others, and registries that refuse.

The real Apicurio converter registers a Debezium envelope's records (``Value``, ``Source``,
``block``) as schemas of their own and refers to them by name
(``tests/integration/test_debezium_avro_capture.py`` reads such a capture); here the rules of
writing them in, and what a registry's answers mean for a record.
"""

from __future__ import annotations

import io
import json
from types import SimpleNamespace
from typing import Any

import fastavro
import pytest

from pipeline.core.sources import BadRecord, SourceUnavailable
from pipeline.core.sources.wire import WireReader, whole_schema

VALUE = {
    "type": "record",
    "name": "Value",
    "namespace": "pg.public.items",
    "fields": [{"name": "id", "type": "int"}, {"name": "note", "type": ["null", "string"]}],
}
SOURCE = {
    "type": "record",
    "name": "Source",
    "namespace": "io.debezium.connector.postgresql",
    "fields": [{"name": "lsn", "type": ["null", "long"]}, {"name": "block", "type": "block"}],
}
BLOCK = {"type": "record", "name": "block", "fields": [{"name": "n", "type": "long"}]}
ENVELOPE = {
    "type": "record",
    "name": "Envelope",
    "namespace": "pg.public.items",
    "fields": [
        {"name": "before", "type": ["null", "pg.public.items.Value"]},
        {"name": "after", "type": ["null", "Value"]},  # the short name, in its namespace
        {"name": "source", "type": "io.debezium.connector.postgresql.Source"},
        {"name": "op", "type": "string"},
    ],
}


def ref(name: str, subject: str) -> Any:
    return SimpleNamespace(name=name, subject=subject, version=1)


SUBJECTS = {
    "value": (json.dumps(VALUE), []),
    "source": (json.dumps(SOURCE), [ref("block", "block")]),
    "block": (json.dumps(BLOCK), []),
}
REFS = [
    ref("pg.public.items.Value", "value"),
    ref("io.debezium.connector.postgresql.Source", "source"),
]


def test_referenced_schemas_are_written_in_at_their_first_use_and_named_after() -> None:
    whole = whole_schema(json.dumps(ENVELOPE), REFS, lambda subject, _: SUBJECTS[subject])
    fields = {f["name"]: f["type"] for f in whole["fields"]}
    assert fields["before"][1]["name"] == "Value"  # defined where first used
    assert fields["after"] == ["null", "Value"]  # then referred to by name
    assert fields["source"]["fields"][1]["type"]["name"] == "block"  # its own reference too
    parsed = fastavro.parse_schema(whole)
    record = {
        "before": None,
        "after": {"id": 7, "note": "ü 𝄞"},
        "source": {"lsn": 24023984, "block": {"n": 3}},
        "op": "c",
    }
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, record)
    assert fastavro.schemaless_reader(io.BytesIO(out.getvalue()), parsed, None) == record


class Refused(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}: Failed to discover artifact type from content.")
        self.http_status_code = status


def reader(fetch: Any) -> WireReader:
    return WireReader(f"http://registry-{id(fetch)}", fetch)


def record(schema_id: int) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + b"\x02"


@pytest.mark.parametrize("status", [400, 404, 422])
def test_a_schema_the_registry_refuses_makes_a_bad_record_not_a_wedged_batch(status: int) -> None:
    def refuse(_: int) -> str:
        raise Refused(status)

    with pytest.raises(BadRecord, match="schema id 3"):
        reader(refuse).read(record(3))


@pytest.mark.parametrize("status", [401, 403, 408, 429, 500, 503])
def test_a_registry_that_cannot_answer_now_fails_the_batch_which_runs_again(status: int) -> None:
    def refuse(_: int) -> str:
        raise Refused(status)

    with pytest.raises(SourceUnavailable, match="did not answer for schema id 3"):
        reader(refuse).read(record(3))


def test_a_schema_that_is_not_usable_avro_makes_a_bad_record() -> None:
    with pytest.raises(BadRecord, match="not a usable Avro schema"):
        reader(
            lambda _: '{"type": "record", "name": "x", "fields": [{"name": "a", "type": "nope"}]}'
        ).read(record(4))
