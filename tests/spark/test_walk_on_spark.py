"""The JVM walk against the Python loop, on a local SparkSession: the same records out.

Whatever a batch holds (numbers of every form, escapes, keys in any spelling, markers,
duplicates, bad records of every kind), the walk and the rests it leaves to the Python loop
write the bytes the Python loop alone writes, in the same order per source partition, with
the same summaries; values passed on or written again keep every number's text.
"""

import io
import json
from dataclasses import replace
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_reader
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from encoders.avro import AvroEncoder, Framing
from encoders.json import JsonEncoder
from pipeline.config import EncoderConfig
from pipeline.core.batch.contract import BatchPlan
from pipeline.core.batch.walk import Walked, walk_plan
from schemas.avro import OutputSchemas
from schemas.hlc import Hlc
from schemas.tables import TableSchema
from tests.support.json_text import LAYOUTS, exact, integer, number, row, scalar, string, text
from tests.support.tables import WIDE
from tests.support.walk import (
    SCHEMA,
    by_partition,
    frame,
    json_key_partition,
    python_loop,
    same_as_the_python_loop,
    summaries,
    walk_then_rests,
)

SRC = "src.orders"
WALL = 1700000000000000000

# Keys as sources spell them: the first element names the source partition (the test groups
# the output by it); compact ones pass on as they came, the others are written again.
KEY_FORMS = {
    "compact": "[{p},{k}]",
    "spaced": "[ {p}, {k} ]",
    "text": '[{p},"k\\u00e9{k}"]',
    "escaped": '[{p},"a\\"b\\\\{k}"]',
    "fraction": "[{p},{k}.50]",
}
BAD = {
    "not_json": b"{not json",
    "truncated": b'{"after":{"a":1},"updated":"',
    "bad_utf8": b'{"after":{"a":"\xff"},"updated":"1700000000000000001.0000000000"}',
    "lone_surrogate": b'{"after":{"a":"\\ud800"},"updated":"1700000000000000001.0000000000"}',
    "array": b"[1,2]",
    "no_time": b'{"after":{"a":1}}',
    "null_value": b"",
}

change = st.tuples(
    st.just("change"),
    st.sampled_from(sorted(LAYOUTS)),
    row,
    st.one_of(st.none(), row),
    st.sampled_from(sorted(KEY_FORMS)),
    st.integers(0, 30),  # the time, within reach of the markers: some are duplicates
)
marker = st.tuples(st.just("marker"), st.integers(0, 30), st.booleans())  # canonical or not
bad = st.tuples(st.just("bad"), st.sampled_from(sorted(BAD)))
partition_records = st.lists(
    st.one_of(change, change, change, change, marker, bad), min_size=1, max_size=30
)


def source_records(
    partitions: list[list[tuple[Any, ...]]], key_forms: dict[str, str] = KEY_FORMS
) -> list[tuple[Any, ...]]:
    """Kafka records (key, value, topic, partition, offset, headers) of the drawn items."""
    records = []
    for p, items in enumerate(partitions):
        for offset, item in enumerate(items):
            key: bytes | None
            if item[0] == "change":
                _, layout, after, before, key_form, n = item
                t = f"{WALL + n}.0000000000"
                text = LAYOUTS[layout].format(a=after, b=before or "null", t=t, short=WALL + n)
                key = key_forms[key_form].format(p=p, k=offset).encode()
                value: bytes | None = text.encode()
            elif item[0] == "marker":
                _, n, canonical = item
                resolved = f"{WALL + n}.0000000000" if canonical else str(WALL + n)
                key, value = None, json.dumps({"resolved": resolved}).encode()
            else:
                key = f"[{p},{offset}]".encode()
                value = BAD[item[1]] or None
            headers = [{"key": "origin", "value": b"upstream"}]
            records.append((key, value, SRC, p, offset, headers))
    return records


def plan(dlq: str | None, floor: int) -> BatchPlan:
    encoder = JsonEncoder(EncoderConfig(updated=True, diff=True))
    return BatchPlan(
        thresholds={(SRC, 0): Hlc(WALL + floor)},  # the others start at the high-water mark
        tables={SRC: "orders"},
        formats={SRC: "native"},
        routes={SRC: "out.orders"},
        encoders={SRC: encoder},
        dlq_topic=dlq,
        new_partition_floor=Hlc(WALL + 3),
    )


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    partitions=st.lists(partition_records, min_size=1, max_size=3),
    floor=st.integers(0, 10),
    dlq=st.sampled_from(["dlq", None]),  # bad records dead-lettered, or where a partition stops
)
def test_the_walk_writes_what_the_python_loop_writes(
    spark, dlq: str | None, partitions: list[list[tuple[Any, ...]]], floor: int
) -> None:
    records = source_records(partitions)
    rows, _ = same_as_the_python_loop(frame(spark, records, len(partitions)), plan(dlq, floor))
    source_values = {json.dumps(exact(r[0])): r[1] for r in records if r[0] is not None}
    for r in rows:  # every number's text, whether passed on or written again
        if r["topic"] == "out.orders":
            out, source = exact(r["value"]), exact(source_values[json.dumps(exact(r["key"]))])
            assert (out["after"], out["before"]) == (source["after"], source.get("before"))


def test_clean_records_pass_as_they_came_and_a_bad_one_leaves_the_rest_to_python(spark) -> None:
    t = [f"{WALL + n}.0000000000" for n in range(10)]
    values = [
        f'{{"after":{{"d":12345678901234567.89,"s":"\\u00e9\\n"}},"before":null,"updated":"{t[1]}"}}',
        f'{{"after":null,"before":{{"d":-0,"e":1E400}},"updated":"{t[2]}"}}',
        f'{{"resolved":"{t[2]}"}}',
        f'{{"after":{{"n":1}},"before":null,"updated":"{t[2]}"}}',  # at the floor: dropped
        f'{{ "after" : {{"n":[[[{{}}]]]}}, "before" : null, "updated" : "{t[3]}" }}',
        "{not json",
        f'{{"after":{{"n":2}},"before":null,"updated":"{t[4]}"}}',
    ]
    keys = [b'["a",1]', b'["a",2]', None, b'["a",3]', b'["a",4]', b'["a",5]', b'["a",6]']
    records = [
        (k, v.encode(), SRC, 0, o, None) for o, (k, v) in enumerate(zip(keys, values, strict=True))
    ]
    frame = spark.createDataFrame(records, SCHEMA).coalesce(1)
    the_plan = plan("dlq", 0)
    walk = walk_plan(the_plan)
    records, run = Walked.rows(frame, walk, 0)
    walked = records.collect()
    result, rests = run.result()

    # the walk's own rows: the source's very bytes, up to the bad record
    assert [(bytes(r["key"]), bytes(r["value"])) for r in walked] == [
        (keys[i], values[i].encode()) for i in (0, 1, 4)
    ]
    assert [(r.start, r.stop, r.floor) for r in rests] == [(5, 7, Hlc(WALL + 2))]
    (seen,) = result.partitions
    assert (seen.next_offset, seen.resolved, seen.emitted, seen.duplicates) == (
        5,
        Hlc(WALL + 2),
        3,
        1,
    )
    rows, merged = walk_then_rests(frame, the_plan)
    assert [r["topic"] for r in rows] == ["out.orders"] * 3 + ["dlq", "out.orders"]
    assert (merged.emitted, merged.bad, merged.partitions[0].next_offset) == (4, 1, 7)


# Bytes a string may hold, each put at every place of an eight-byte word (a scan of a word
# at a time was tried, session 15): those the walk takes, and those it must not.
IN_STRINGS = {
    b'\\"': True,  # escaped quote
    b"\\\\": True,  # escaped backslash
    b"\\u00e9": True,
    "\u00e9".encode(): True,  # two-byte UTF-8
    "\U0001f600".encode(): True,  # four-byte UTF-8
    b"\x7f": True,  # DEL needs no escape
    b"~": True,
    b"\x1f": False,  # a control character
    b"\t": False,  # also one
    b"\xff": False,  # not UTF-8
    b"\x80": False,  # a lone continuation byte
}


def test_a_special_byte_anywhere_in_a_word_is_seen(spark) -> None:
    cases = [(piece, at) for piece in IN_STRINGS for at in range(10)]
    records = []
    for p, (piece, at) in enumerate(cases):
        text = b"a" * at + piece + b"b" * (17 - at)
        value = (
            b'{"after":{"s":"' + text + b'"},"before":null,"updated":"%d.0000000000"}' % (WALL + 10)
        )
        records.append((f"[{p},1]".encode(), value, SRC, p, 0, None))
    frame = (
        spark.createDataFrame(records, SCHEMA)
        .coalesce(1)
        .sortWithinPartitions("partition", "offset")
    )
    the_plan = plan("dlq", 0)
    walk = walk_plan(the_plan)
    assert walk is not None
    taken = {json_key_partition(bytes(r["key"])) for r in Walked.rows(frame, walk, 0)[0].collect()}
    assert taken == {p for p, (piece, _) in enumerate(cases) if IN_STRINGS[piece]}

    rows, result = walk_then_rests(frame, the_plan)
    expected_rows, expected = python_loop(frame, the_plan)
    assert by_partition(rows) == by_partition(expected_rows)
    assert summaries(result) == summaries(expected)
    assert sum(r["topic"] == "dlq" for r in rows) == 10 * list(IN_STRINGS.values()).count(False)


def test_which_sources_and_encoders_take_the_walk() -> None:
    the_plan = plan(None, 0)
    assert walk_plan(the_plan) is not None
    for fmt in ("debezium", "canal-json"):
        walked = walk_plan(replace(the_plan, formats={SRC: fmt}))
        assert json.loads(walked or "")["routes"][SRC]["format"] == fmt
    registry = {"url": "http://registry"}  # Debezium's Avro: the walk reads by its schemas
    walked = walk_plan(replace(the_plan, formats={SRC: "debezium"}, registries={SRC: registry}))
    assert json.loads(walked or "")["routes"][SRC]["registry"] == registry
    avro = AvroEncoder(
        OutputSchemas.of(WIDE, EncoderConfig(format="avro")),
        Framing.confluent(1, 2, 3),
        EncoderConfig(format="avro"),
        "wide",
    )
    assert avro.walk is not None
    for fmt in ("native", "debezium", "canal-json"):  # Avro out from every source format
        walked = walk_plan(replace(the_plan, formats={SRC: fmt}, encoders={SRC: avro}))
        assert json.loads(walked or "")["routes"][SRC]["encoding"]["kind"] == "avro"
    for changed in (
        {"encoders": {SRC: JsonEncoder(EncoderConfig(updated=True, key_in_value=True))}},
        {"encoders": {SRC: JsonEncoder(EncoderConfig(updated=False))}},
        {"end_time": Hlc(WALL + 5)},
    ):
        assert walk_plan(replace(the_plan, **changed)) is None, changed


def test_a_floor_beyond_the_walks_longs_holds_in_the_rest(spark) -> None:
    """A floor past 2**63 (a marker near the year 2262) holds beyond the walk.

    The walk's floor is capped, the rest's is the plan's: a change between the two is a
    duplicate, as in the Python loop.
    """
    far = 2**64
    values = [
        f'{{"after":{{"n":1}},"before":null,"updated":"{WALL}.0000000000"}}',
        "{not json",
        f'{{"after":{{"n":2}},"before":null,"updated":"{2**63 + 5}.0000000000"}}',
        f'{{"after":{{"n":3}},"before":null,"updated":"{far + 1}.0000000000"}}',
    ]
    records = [(f"[{o}]".encode(), v.encode(), SRC, 0, o, None) for o, v in enumerate(values)]
    frame = spark.createDataFrame(records, SCHEMA).coalesce(1)
    the_plan = replace(plan("dlq", 0), thresholds={(SRC, 0): Hlc(far)})
    expected_rows, expected = python_loop(frame, the_plan)
    rows, result = walk_then_rests(frame, the_plan)
    topics = [r["topic"] for r in rows]
    assert topics == [r["topic"] for r in expected_rows] == ["dlq", "out.orders"]
    assert bytes(rows[1]["value"]) == values[3].encode()
    assert summaries(result) == summaries(expected)


# Avro: a table with a column of every type the walk writes; the key (p, k) names the source
# partition. Most changes fit: values of the column's type in every form a source may write
# them, keys in three spellings. The others may not fit at all: values of any type, duplicate
# members, escaped names, keys of the wrong shape, members the schema lacks (a schema change:
# the partition stops there).
FITTING = {
    "s": string,
    "l": st.one_of(st.integers(-(2**63), 2**63 - 1).map(str), st.just("-0")),
    "i": st.one_of(st.integers(-(2**31), 2**31 - 1).map(str), st.just("-0")),
    "d": number,
    "f": number,
    "b": st.sampled_from(["true", "false"]),
}
# beyond the range: an int's, a long's (18 digits or more), a float's
BEYOND = st.sampled_from(["2147483648", "-2147483649", "9223372036854775808", "3.5e38", "1e309"])
ANY = {c: st.one_of(fitting, scalar, integer, BEYOND) for c, fitting in FITTING.items()}
AVRO_KEYS = {
    "compact": '[{p},"k{k}"]',
    "spaced": '[ {p} , "k{k}" ]',
    "escaped": '[{p},"k\\u00e9\\n\\"{k}"]',
    "float": '[{p}.0,"k{k}"]',  # a misfit: p is a long
    "longer": '[{p},"k{k}",1]',  # a misfit: the key has two columns
}
AVRO_OPTIONS = [
    EncoderConfig(format="avro", updated=True, diff=True),
    EncoderConfig(
        format="avro",
        updated=True,
        diff=True,
        mvcc_timestamp=True,
        key_in_value=True,
        topic_in_value=True,
    ),
    EncoderConfig(format="avro"),
    EncoderConfig(format="avro", envelope="key_only"),
]


def avro_change(fits: bool) -> st.SearchStrategy[tuple[Any, ...]]:
    """A change whose row and key fit the table, or one that may not."""
    values = FITTING if fits else ANY
    column = st.sampled_from(sorted(values)).flatmap(
        lambda c: st.tuples(st.just(f'"{c}"'), values[c])
    )
    lacking = st.tuples(st.from_regex(r"[a-z]{2,5}", fullmatch=True).map(json.dumps), text)
    members = (
        st.lists(column, max_size=6, unique_by=lambda m: m[0])
        if fits
        else st.lists(
            st.one_of(column, lacking, st.just(('"\\u0073"', '"an escaped name"'))), max_size=8
        )
    )
    row = st.builds(
        lambda ms, more: "{" + ",".join(f"{name}:{value}" for name, value in ms + more) + "}",
        members,
        st.lists(lacking, max_size=0 if fits else 2),
    )
    return st.tuples(
        st.just("change"),
        st.sampled_from(sorted(set(LAYOUTS) - {"short_time"}) if fits else sorted(LAYOUTS)),
        row,
        st.one_of(st.none(), row),
        st.sampled_from(["compact", "spaced", "escaped"] if fits else sorted(AVRO_KEYS)),
        st.integers(0, 30),
    )


# one record in twenty may not fit, one is a marker, one is bad
avro_item = st.integers(0, 19).flatmap(
    lambda n: (avro_change(False), marker, bad)[n - 17] if n >= 17 else avro_change(True)
)


def avro_plan(dlq: str | None, floor: int, options: EncoderConfig) -> BatchPlan:
    schemas = OutputSchemas.of(WIDE, options)
    encoder = AvroEncoder(schemas, Framing.confluent(1, 2, 3), options, "wide")
    return replace(plan(dlq, floor), encoders={SRC: encoder})


def avro_key_partition(key: bytes) -> int:
    """The source partition an Avro key names (its p, after the 5-byte Confluent header)."""
    key_schema = parse_schema(OutputSchemas.of(WIDE, AVRO_OPTIONS[0]).key)
    return int(schemaless_reader(io.BytesIO(key[5:]), key_schema, None)["p"])


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    partitions=st.lists(
        st.lists(avro_item, max_size=30),
        min_size=1,
        max_size=3,
    ),
    floor=st.integers(0, 10),
    dlq=st.sampled_from(["dlq", None]),
    options=st.sampled_from(AVRO_OPTIONS),
)
def test_the_avro_walk_writes_what_the_python_loop_writes(
    spark,
    dlq: str | None,
    partitions: list[list[tuple[Any, ...]]],
    floor: int,
    options: EncoderConfig,
) -> None:
    records = source_records(partitions, AVRO_KEYS)
    if not records:
        return
    batch = frame(spark, records, len(partitions))
    same_as_the_python_loop(batch, avro_plan(dlq, floor, options), avro_key_partition)


def test_clean_avro_records_are_written_by_the_walk_as_the_python_loop_writes_them(spark) -> None:
    t = [f"{WALL + n}.0000000000" for n in range(4)]
    values = [
        f'{{"after":{{"p":0,"k":"k0","s":"\\u00e9\\n\\\\ \\u20ac x","l":-0,"i":-2147483648,'
        f'"d":12345678901234567.89,"f":1E-3,"b":true}},"before":null,'
        f'"updated":"{t[1]}"}}',
        f'{{"after":null,"before":{{"d":-0,"f":3.4028235e38,"l":9223372036854775,"b":false}},'
        f'"updated":"{t[2]}"}}',
        f'{{ "before" : null, "after" : {{ "b" : false , "d" : 123456789012345678 }}, '
        f'"mvcc_timestamp" : "x", "updated" : "{t[3]}" }}',
    ]
    keys = [b'[0,"k0"]', b'[0, "k\\u00e9"]', b'[0,"k2"]']
    records = [
        (k, v.encode(), SRC, 0, o, None) for o, (k, v) in enumerate(zip(keys, values, strict=True))
    ]
    frame = spark.createDataFrame(records, SCHEMA).coalesce(1)
    the_plan = avro_plan("dlq", 0, AVRO_OPTIONS[1])
    records, run = Walked.rows(frame, walk_plan(the_plan), 0)
    walked = records.collect()
    result, rests = run.result()
    assert (rests, result.emitted) == ([], 3)  # the walk took every record

    expected_rows, _ = python_loop(frame, the_plan)
    assert [(bytes(r["key"]), bytes(r["value"])) for r in walked] == [
        (bytes(r["key"]), bytes(r["value"])) for r in expected_rows
    ]
    value_schema = parse_schema(OutputSchemas.of(WIDE, AVRO_OPTIONS[1]).value)
    first = schemaless_reader(io.BytesIO(bytes(walked[0]["value"])[5:]), value_schema, None)
    assert first["after"] == {
        "p": 0,
        "k": "k0",
        "s": "é\n\\ € x",
        "l": 0,
        "i": -(2**31),
        "d": 12345678901234567.89,
        "f": pytest.approx(1e-3),
        "b": True,
    }
    assert (first["key"], first["topic"], first["updated"], first["mvcc_timestamp"]) == (
        {"p": 0, "k": "k0"},
        "out.orders",
        t[1],
        t[1],
    )


def test_avro_schemas_with_types_the_walk_does_not_write_are_left_to_python() -> None:
    options = AVRO_OPTIONS[0]
    record = {
        **WIDE.record,
        "fields": [
            *WIDE.record["fields"],
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        ],
    }
    table = TableSchema.of(record, ["p", "k"])
    encoder = AvroEncoder(
        OutputSchemas.of(table, options), Framing.confluent(1, 2, 3), options, "wide"
    )
    assert walk_plan(replace(avro_plan(None, 0, options), encoders={SRC: encoder})) is None
    assert walk_plan(avro_plan(None, 0, options)) is not None


def test_avro_values_beyond_their_types_range_are_left_to_the_python_loop(spark) -> None:
    """Python refuses them (misfits: dead letters); the walk must not write them anyway."""
    t = f"{WALL + 5}.0000000000"
    columns = ['"i":2147483648', '"l":9223372036854775808', '"f":3.5e38', '"d":1e309']
    records = [
        (f'[{p},"k"]'.encode(), f'{{"after":{{{c}}},"updated":"{t}"}}'.encode(), SRC, p, 0, None)
        for p, c in enumerate(columns)
    ]
    frame = spark.createDataFrame(records, SCHEMA).repartition(4, "partition")
    the_plan = avro_plan("dlq", 0, AVRO_OPTIONS[0])
    records, run = Walked.rows(frame, walk_plan(the_plan), 0)
    assert len(records.collect()) == 1  # the infinite double, as Python writes it
    assert sorted(rest.partition.partition for rest in run.result()[1]) == [0, 1, 2]

    expected_rows, _ = python_loop(frame, the_plan)
    rows, _ = walk_then_rests(frame, the_plan)
    assert by_partition(rows, avro_key_partition) == by_partition(expected_rows, avro_key_partition)
    assert sorted(r["topic"] for r in rows) == ["dlq", "dlq", "dlq", "out.orders"]
