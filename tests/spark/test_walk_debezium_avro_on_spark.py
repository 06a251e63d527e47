"""The JVM walk of Debezium's Avro events (a real registry) against the Python loop.

Events as ``AvroConverter`` writes them (Confluent's wire format: byte 0, the writer schema's
registry id, Avro binary), the schema registered in the test session's registry (Apicurio):
every Avro type a Connect schema becomes (records, unions, arrays, maps, enums, fixed,
doubles and floats of any bits, text of any characters) and Connect's semantic types
(decimals, dates, times), two versions of the value schema, keys in Avro or JSON, and bytes
that are not what they claim. The walk and the rests it leaves write the bytes the Python
loop alone writes, per source partition in order, with the same summaries.
"""

import io
import itertools
import json
import math
import struct
from dataclasses import replace
from typing import Any

import fastavro
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from encoders.json import JsonEncoder
from pipeline.config import EncoderConfig
from pipeline.core.batch.contract import BatchPlan
from pipeline.core.batch.walk import Walked, walk_plan
from pipeline.core.sources.wire import without_logical_types
from schemas.avro import OutputSchemas
from schemas.hlc import Hlc
from tests.support.debezium_avro import avro_column, avro_envelope
from tests.support.tables import primitive_table
from tests.support.walk import (
    AVRO_OPTIONS,
    avro_encoder,
    avro_key_partition,
    frame,
    keyed,
    python_loop,
    same_as_the_python_loop,
)

SRC = "pg.public.avro_orders"
WALL_US = 1_700_000_000_000_000
LSN = 24_000_000
PER = 1000  # an image's id: partition * PER + offset


def optional(name: str, kind: Any, semantic: str | None = None, **extra: Any) -> Any:
    """An optional column (``semantic``: its Connect name); a complex ``kind`` as it is."""
    if semantic is None and not extra:
        return {"name": name, "type": ["null", kind], "default": None}
    return avro_column(name, kind, semantic, **extra)


COLUMNS = [
    {"name": "id", "type": "int"},
    optional(
        "amount",
        "bytes",
        "org.apache.kafka.connect.data.Decimal",
        logicalType="decimal",
        precision=10,
        scale=2,
        **{"connect.parameters": {"scale": "2", "connect.decimal.precision": "10"}},
    ),
    optional(
        "ratio",
        {
            "type": "record",
            "name": "VariableScaleDecimal",
            "namespace": "io.debezium.data",
            "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}],
            "connect.name": "io.debezium.data.VariableScaleDecimal",
        },
    ),
    optional("day", "int", "io.debezium.time.Date"),
    optional("at", "long", "io.debezium.time.MicroTimestamp"),
    optional("clock", "long", "io.debezium.time.MicroTime"),
    optional("zoned", "string", "io.debezium.time.ZonedTimestamp"),
    optional("note", "string"),
    optional("d", "double"),
    optional("f", "float"),
    optional("flag", "boolean"),
    optional("big", "long"),
    optional("tags", {"type": "array", "items": "string"}),
    optional("attrs", {"type": "map", "values": "long"}),
    optional("kind", {"type": "enum", "name": "Kind", "symbols": ["SMALL", "LARGE"]}),
    optional("raw", {"type": "fixed", "name": "Raw", "size": 4}),
]


KEY = {
    "type": "record",
    "name": "Key",
    "namespace": "pg.public.avro_orders",
    "fields": [{"name": "p", "type": "int"}, {"name": "id", "type": "int"}],
}
# two versions of the value schema: a column dropped in the second
SCHEMAS = {"v1": avro_envelope(COLUMNS, SRC), "v2": avro_envelope(COLUMNS[:-1], SRC)}


@pytest.fixture(scope="module")
def schema_ids(schema_registry_url: str) -> dict[str, int]:
    registry = SchemaRegistryClient({"url": schema_registry_url})
    ids = {}
    for name, schema in [*SCHEMAS.items(), ("key", KEY)]:
        subject = f"{SRC}-{'key' if name == 'key' else 'value'}"
        ids[name] = registry.register_schema(subject, Schema(json.dumps(schema), "AVRO"))
    return ids


def wire(schema_id: int, schema: Any, datum: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(without_logical_types(schema)), datum)
    return b"\x00" + schema_id.to_bytes(4, "big") + out.getvalue()


doubles = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(0, 2**64 - 1).map(lambda b: struct.unpack("<d", b.to_bytes(8, "little"))[0]),
    st.sampled_from([0.0, -0.0, 1e-5, 1e-6, 1e16, 1e15, 123456789012345.6, 5e-324, 0.1]),
)
floats32 = st.integers(0, 2**32 - 1).map(lambda b: struct.unpack("<f", b.to_bytes(4, "little"))[0])
text = st.text(st.characters(exclude_categories=("Cs",)), max_size=10)
row = st.fixed_dictionaries(
    {
        "amount": st.one_of(st.none(), st.binary(min_size=1, max_size=12)),
        "ratio": st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {"scale": st.integers(-3, 20), "value": st.binary(min_size=1, max_size=12)}
            ),
        ),
        "day": st.one_of(st.none(), st.integers(-719162, 2932896)),
        "at": st.one_of(st.none(), st.integers(-(2**50), 2**50)),
        "clock": st.one_of(st.none(), st.integers(0, 86_399_999_999)),
        "zoned": st.one_of(st.none(), text),
        "note": st.one_of(st.none(), text),
        "d": st.one_of(st.none(), doubles),
        "f": st.one_of(st.none(), floats32),
        "flag": st.one_of(st.none(), st.booleans()),
        "big": st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
        "tags": st.one_of(st.none(), st.lists(text, max_size=3)),
        "attrs": st.one_of(st.none(), st.dictionaries(text, st.integers(-5, 5), max_size=3)),
        "kind": st.one_of(st.none(), st.sampled_from(["SMALL", "LARGE"])),
        "raw": st.one_of(st.none(), st.binary(min_size=4, max_size=4)),
    }
)
change = st.fixed_dictionaries(
    {
        "op": st.sampled_from(["c", "u", "d", "r", "c", "u"]),
        "after": row,
        "before": st.one_of(st.none(), row),
        "schema": st.sampled_from(["v1", "v1", "v2"]),
        "key": st.sampled_from(["avro", "avro", "json"]),
        "n": st.integers(0, 30),
        "lsn": st.integers(0, 40),
        "tx": st.sampled_from([None, "771", "772"]),
    }
)
other = st.sampled_from(["unknown_id", "truncated", "trailing", "nan", "tombstone"])
record = st.integers(0, 99).flatmap(lambda k: change if k < 90 else other)
partition_records = st.lists(record, min_size=1, max_size=20)


def event(c: dict[str, Any], p: int, offset: int, ids: dict[str, int]) -> bytes:
    columns = SCHEMAS[c["schema"]]["fields"][0]["type"][1]["fields"]
    names = [column["name"] for column in columns]

    def image(values: dict[str, Any] | None) -> dict[str, Any] | None:
        if values is None:
            return None
        # the id names the partition too: keyed by it (key_column), the output groups by it
        return {"id": p * PER + offset, **{n: values[n] for n in names if n != "id"}}

    lsn = LSN + c["lsn"]
    datum = {
        "before": image(c["before"]),
        "after": None if c["op"] == "d" else image(c["after"]),
        "source": {
            "connector": "postgresql",
            "ts_ms": (WALL_US + c["n"]) // 1000,
            "ts_us": WALL_US + c["n"],
            "ts_ns": None,
            "lsn": lsn,
            "sequence": json.dumps([str(LSN), str(lsn)]),
        },
        "op": c["op"],
        "ts_ms": WALL_US // 1000,
        "transaction": None
        if c["tx"] is None
        else {"id": f"{c['tx']}:{lsn}", "total_order": 1, "data_collection_order": 1},
    }
    return wire(ids[c["schema"]], SCHEMAS[c["schema"]], datum)


def source_records(partitions: list[list[Any]], ids: dict[str, int]) -> list[tuple[Any, ...]]:
    records = []
    for p, items in enumerate(partitions):
        for offset, item in enumerate(items):
            key: bytes | None = wire(ids["key"], KEY, {"p": p, "id": offset})
            if isinstance(item, dict):
                value: bytes | None = event(item, p, offset, ids)
                if item["key"] == "json":
                    key = json.dumps({"p": p, "id": offset}).encode()
            elif item == "tombstone":
                value = None
            else:
                good = {"op": "c", "after": None, "before": None, "schema": "v1", "key": "avro"}
                good |= {"n": 5, "lsn": 5, "tx": None}
                good["after"] = dict.fromkeys(("amount", "ratio", "day", "at", "clock"))
                good["after"] |= dict.fromkeys(("zoned", "note", "d", "f", "flag", "big"))
                good["after"] |= {"tags": None, "attrs": None, "kind": None, "raw": None}
                value = event(good, p, offset, ids)
                if item == "unknown_id":
                    value = b"\x00\x7f\xff\xff\xf0" + value[5:]
                elif item == "truncated":
                    value = value[:-3]
                elif item == "trailing":
                    value += b"\x00"
                else:  # a NaN double where the after image's "d" is
                    good["after"]["d"] = math.nan
                    value = event(good, p, offset, ids)
            records.append((key, value, SRC, p, offset, [{"key": "h", "value": b"v"}]))
    return records


def plan(registry: str, dlq: str | None, floor: int, diff: bool) -> BatchPlan:
    return BatchPlan(
        thresholds={(SRC, 0): Hlc((WALL_US + floor) * 1000)},
        tables={SRC: "avro_orders"},
        formats={SRC: "debezium"},
        routes={SRC: "out.avro_orders"},
        encoders={SRC: JsonEncoder(EncoderConfig(updated=True, diff=diff))},
        dlq_topic=dlq,
        new_partition_floor=Hlc((WALL_US + 3) * 1000),
        registries={SRC: {"url": registry}},
    )


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    partitions=st.lists(partition_records, min_size=1, max_size=3),
    floor=st.integers(0, 10),
    dlq=st.sampled_from(["dlq", None]),
    diff=st.booleans(),
)
def test_the_walk_writes_what_the_python_loop_writes_of_debezium_avro_events(  # noqa: PLR0917
    spark: Any,
    schema_registry_url: str,
    schema_ids: dict[str, int],
    dlq: str | None,
    partitions: list[list[Any]],
    floor: int,
    diff: bool,
) -> None:
    the_plan = plan(schema_registry_url, dlq, floor, diff)
    assert walk_plan(the_plan) is not None
    records = source_records(partitions, schema_ids)
    same_as_the_python_loop(frame(spark, records, len(partitions)), the_plan)


def test_clean_events_are_all_the_walks(
    spark: Any, schema_registry_url: str, schema_ids: dict[str, int]
) -> None:
    """Connector-made events with doubles and floats: the walk takes them all, no rest."""
    items: list[Any] = []
    for n, d in enumerate([0.1, 1e-7, 1e16, -0.0, 2.5, 123456789.125]):
        after = {c["name"]: None for c in COLUMNS if c["name"] != "id"}
        after |= {"d": d, "f": struct.unpack("<f", struct.pack("<f", d))[0], "note": "é\n"}
        after |= {"tags": ["a"], "attrs": {"k": 1}, "kind": "LARGE", "raw": b"\x00\x01\x02\x03"}
        items.append({"op": "c", "after": after, "before": None, "schema": "v1", "key": "avro"})
        items[-1] |= {"n": 10 + n, "lsn": 10 + n, "tx": None}
    the_plan = plan(schema_registry_url, None, 0, True)
    walk = walk_plan(the_plan)
    assert walk is not None
    batch = frame(spark, source_records([items], schema_ids), 1)
    records, walked = Walked.rows(batch, walk, 0)
    rows = records.collect()
    _, rests = walked.result()
    assert rests == []
    assert len(rows) == len(items)
    first = json.loads(rows[0]["value"])
    assert (first["after"]["d"], first["after"]["tags"], first["after"]["raw"]) == (
        0.1,
        ["a"],
        "AAECAw==",
    )
    same_as_the_python_loop(batch, the_plan)


# Avro output of a table in primitive types (so the walk writes it): decimals into doubles,
# times, enums and fixed bytes as the text the source's reading gives them, a float into a
# float; arrays and maps into strings are misfits (the loop names them).
TABLE = primitive_table(
    "avro_orders",
    ["p", "id"],
    {
        "amount": "double",
        "ratio": "double",
        "d": "double",
        "f": "float",
        "flag": "boolean",
        "big": "long",
        **dict.fromkeys(("day", "at", "clock", "zoned", "note", "tags", "attrs", "kind"), "string"),
        "raw": "string",
    },
)


def avro_plan(
    registry: str, dlq: str | None, floor: int, options: EncoderConfig, confluent: bool
) -> BatchPlan:
    encoder = avro_encoder(TABLE, options, confluent=confluent)
    return replace(plan(registry, dlq, floor, options.diff), encoders={SRC: encoder})


avro_partition = avro_key_partition(TABLE, "p")


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    partitions=st.lists(partition_records, min_size=1, max_size=3),
    floor=st.integers(0, 10),
    dlq=st.sampled_from(["dlq", None]),
    options=st.sampled_from(AVRO_OPTIONS),
    confluent=st.booleans(),
)
def test_the_walk_writes_what_the_python_loop_writes_of_debezium_avro_events_in_avro(  # noqa: PLR0917
    spark: Any,
    schema_registry_url: str,
    schema_ids: dict[str, int],
    dlq: str | None,
    partitions: list[list[Any]],
    floor: int,
    options: EncoderConfig,
    confluent: bool,
) -> None:
    """Keyed by the primary key, then (but key_only) by key_column ``id``, an image's column.

    Keyed by it, each event's rows written straight (``AvroRow``), a delete by its old
    version (read even without diff), a delete without one the loop's; the envelope's way (a
    JSON key) keyed as the loop keys it.
    """
    batch = frame(spark, source_records(partitions, schema_ids), len(partitions))
    ways = [(options, avro_partition)]
    if options.envelope != "key_only":  # (key_only refuses key_column)
        by_id = keyed(options, "id")
        ways.append((by_id, avro_key_partition(TABLE, "id", PER, by_id)))
    for way, partition_of in ways:
        the_plan = avro_plan(schema_registry_url, dlq, floor, way, confluent)
        assert walk_plan(the_plan) is not None
        same_as_the_python_loop(batch, the_plan, partition_of)


def test_clean_events_are_all_the_walks_in_avro(
    spark: Any, schema_registry_url: str, schema_ids: dict[str, int]
) -> None:
    """Connector-made events whose values fit the table: the walk takes them all, no rest.

    Decimals, doubles and floats of any bits, a long's extremes, text of any characters,
    enums and fixed bytes, NULLs, deletes; in both framings, as the Python loop writes them.
    """
    items: list[Any] = []
    for n, d in enumerate([0.1, 1e-7, 1e16, -0.0, 2.5, 123456789.125]):
        after = {c["name"]: None for c in COLUMNS if c["name"] != "id"}
        after |= {"d": d, "f": struct.unpack("<f", struct.pack("<f", d))[0], "note": 'é\n"😀'}
        after |= {"amount": b"\x80\x00\x01", "big": [2**63 - 1, -(2**63)][n % 2]}
        after |= {"kind": "LARGE", "raw": b"\x00\x01\x02\x03", "day": 19675, "flag": True}
        op = "d" if n == 5 else "c"
        items.append({"op": op, "after": after, "before": after, "schema": "v1", "key": "avro"})
        items[-1] |= {"n": 10 + n, "lsn": 10 + n, "tx": None}
    batch = frame(spark, source_records([items], schema_ids), 1)
    for options in AVRO_OPTIONS:
        for confluent in (True, False):
            the_plan = avro_plan(schema_registry_url, None, 0, options, confluent)
            records, walked = Walked.rows(batch, walk_plan(the_plan) or "", 0)
            assert len(records.collect()) == len(items)
            _, rests = walked.result()
            assert rests == []
            same_as_the_python_loop(batch, the_plan, avro_partition)


def test_debezium_avro_deletes_are_keyed_by_their_old_version_in_the_walk(
    spark: Any, schema_registry_url: str, schema_ids: dict[str, int]
) -> None:
    """Creates and deletes, with and without diff: the walk keys each itself, no rest.

    By the id, by a long after doubles, a float and a boolean, by a string after strings: the
    column found in the written row record past every kind of column before it.
    """
    items = []
    for n, op in enumerate(["c", "u", "d", "c", "d"]):
        after = {c["name"]: None for c in COLUMNS if c["name"] != "id"}
        after |= {"note": f"n{n} é", "big": 7 * n, "d": 0.5, "f": 0.25, "flag": True}
        after |= {"day": 19675, "at": 5, "clock": 7, "zoned": "2024-01-01T00:00:00Z"}
        items.append({"op": op, "after": after, "before": after, "schema": "v1", "key": "avro"})
        items[-1] |= {"n": 10 + n, "lsn": 10 + n, "tx": None}
    batch = frame(spark, source_records([items], schema_ids), 1)
    expected = {
        "id": range(5),
        "big": [7 * n for n in range(5)],
        "note": [f"n{n} é" for n in range(5)],
    }
    for (column, values), base in itertools.product(expected.items(), AVRO_OPTIONS[:2]):
        options = keyed(base, column)  # with before (diff) and without
        the_plan = avro_plan(schema_registry_url, None, 0, options, True)
        records, walked = Walked.rows(batch, walk_plan(the_plan) or "", 0)
        rows = records.collect()
        assert walked.result()[1] == [], column  # no rest
        key = fastavro.parse_schema(OutputSchemas.of(TABLE, options).key)
        keys = [
            fastavro.schemaless_reader(io.BytesIO(bytes(r["key"])[5:]), key, None) for r in rows
        ]
        assert keys == [{column: v} for v in values]
        expected_rows, _ = python_loop(batch, the_plan)
        assert [(r["key"], r["value"]) for r in rows] == [
            (r["key"], r["value"]) for r in expected_rows
        ]
