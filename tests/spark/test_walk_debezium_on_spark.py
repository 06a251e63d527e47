"""The JVM walk of Debezium's JSON events against the Python loop: the same records out.

Events as PostgreSQL's and MySQL's connectors write them (``JsonConverter`` with and without
schemas) and as they should not: every semantic type with values in and out of range, text
with any characters, numbers of every form, nested values, snapshot reads, deletes and
tombstones, re-sends (positions at or below one already read), transactions (a binlog's at
its END's time, or waiting for an END not read yet), schemas that change, bad records. The
walk and the rests it leaves write the bytes the Python loop alone writes, per source
partition in order, with the same summaries: counts, the highest position, each
transaction's places and times.
"""

import base64
import json
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from encoders.json import JsonEncoder
from pipeline.config import EncoderConfig
from pipeline.core.batch.contract import BatchPlan
from pipeline.core.batch.walk import Walked, walk_plan
from schemas.hlc import Hlc
from tests.support.debezium_json import column, envelope_schema
from tests.support.json_text import number, string, text
from tests.support.tables import primitive_table
from tests.support.walk import (
    AVRO_OPTIONS,
    avro_encoder,
    avro_key_partition,
    frame,
    same_as_the_python_loop,
)

SRC = "pg.public.orders"
WALL_US = 1_700_000_000_000_000  # microseconds
LSN = 24_000_000

DECIMAL = "org.apache.kafka.connect.data.Decimal"
# column -> (Connect type, semantic name, parameters, values as JSON text)
b64 = st.binary(min_size=1, max_size=18).map(lambda b: json.dumps(base64.b64encode(b).decode()))
odd_b64 = st.sampled_from(
    ['""', '"AB=C"', '"AAA"', '"A==="', '"AB=="', '"@@@@"', "12", '"AQ\\u003d\\u003d"']
)
whole = st.integers(-(2**40), 2**40).map(str)
days = st.integers(-719162, 2932896).map(str)
odd_whole = st.sampled_from(
    ["-100000000", "100000000000000", "-719163", "2932897", "1e3", '"5"', "1.0"]
)
scaled = st.builds(lambda s, v: f'{{"scale":{s},"value":{v}}}', st.integers(-3, 20), b64)
odd_scaled = st.sampled_from(['{"value":"AQ=="}', '{"scale":"2","value":"AQ=="}', '"x"'])
# column -> (Connect type, semantic name, parameters, its values, values the walk leaves alone)
COLUMNS: dict[str, tuple[str, str | None, dict[str, str] | None, Any, Any]] = {
    "s": ("string", None, None, string, string),
    "n": ("double", None, None, number, number),
    "dec": ("bytes", DECIMAL, {"scale": "4"}, b64, odd_b64),
    "dec0": ("bytes", DECIMAL, {"scale": "0"}, b64, odd_b64),
    "decneg": ("bytes", DECIMAL, {"scale": "-3"}, b64, odd_b64),
    "vdec": ("struct", "io.debezium.data.VariableScaleDecimal", None, scaled, odd_scaled),
    "day": ("int32", "io.debezium.time.Date", None, days, odd_whole),
    "ms": ("int64", "io.debezium.time.Timestamp", None, whole, odd_whole),
    "us": ("int64", "io.debezium.time.MicroTimestamp", None, whole, odd_whole),
    "ns": ("int64", "io.debezium.time.NanoTimestamp", None, whole, odd_whole),
    "tm": (
        "int64",
        "io.debezium.time.MicroTime",
        None,
        whole.map(lambda t: t.lstrip("-")),
        odd_whole,
    ),
    "ctm": (
        "int32",
        "org.apache.kafka.connect.data.Time",
        None,
        st.integers(0, 86399999).map(str),
        odd_whole,
    ),
    "z": ("string", "io.debezium.time.ZonedTimestamp", None, string, string),
    "j": ("string", "io.debezium.data.Json", None, text, text),
}
NAMES = sorted(COLUMNS)


def value_schema(names: list[str]) -> str:
    row = []
    for name in names:
        kind, semantic, parameters, *_ = COLUMNS[name]
        row.append(column(name, kind, semantic, **(parameters or {})))
    return json.dumps(envelope_schema(row, "pg.public.orders.Envelope"))


KEY_SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"type": "int32", "optional": False, "field": "p"},
            {"type": "int32", "optional": False, "field": "id"},
        ],
        "optional": False,
    }
)


def image(odd: bool) -> Any:
    """A row's columns: each null or a value (with ``odd``, now and then one the walk leaves)."""
    return st.fixed_dictionaries(
        {n: st.one_of(st.just("null"), *[COLUMNS[n][3]] * 9, *[COLUMNS[n][4]] * odd) for n in NAMES}
    )


def choices(odd: bool) -> Any:
    """A change event's choices: those of a connector's events, ``odd`` ones too."""

    def pick(good: list[Any], bad: list[Any]) -> Any:
        return st.sampled_from(good + bad if odd else good)

    return st.fixed_dictionaries(
        {
            "op": pick(["c", "u", "d", "r", "c", "u"], ["t", "x"]),
            "after": image(odd),
            "before": st.one_of(st.none(), image(odd)),
            "schemas": pick(["full", "full", "none"], ["reordered", "fewer"]),
            "layout": pick(["debezium", "after_first", "spaced", "extra"], []),
            "clock": pick(["ts_us", "ts_us", "ts_ms", "ts_ns"], ["none", "float"]),
            "n": st.integers(0, 30),  # the time, within reach of the floor: some are duplicates
            "lsn": st.integers(0, 40),  # some at or below one already read: re-sends
            "last": pick(["lsn", "null", "number", "later"], ["bad"]),
            "snapshot": pick(['"false"', '"false"', "null", '"true"', "false"], ["0"]),
            "connector": pick(["postgresql"] * 4 + ["mysql", "mariadb"], ["oracle"]),
            "row": st.integers(0, 2),
            "tx": pick([None, "771", "772", "773", "x:1"], ["\\u0037"]),
            "key": pick(["schema", "schema", "plain", "spaced"], ["twice"]),
        }
    )


other = st.sampled_from(["tombstone", "null_key", "not_json", "null_payload", "array"])
change, odd_change = choices(False), choices(True)
# mostly events as a connector writes them, so that the walk has runs to take
record = st.integers(0, 99).flatmap(lambda k: change if k < 88 else odd_change if k < 96 else other)
partition_records = st.lists(record, min_size=1, max_size=25)


def key_bytes(p: int, offset: int, form: str) -> bytes:
    payload = {
        "schema": f'{{"p":{p},"id":{offset}}}',
        "plain": f'{{"p":{p},"id":{offset}}}',
        "spaced": f'{{ "p" : {p} , "id" : {offset} }}',
        "twice": f'{{"p":{p},"id":{offset},"id":{offset}}}',
    }[form]
    return (
        f'{{"schema":{KEY_SCHEMA},"payload":{payload}}}' if form == "schema" else payload
    ).encode()


def row_text(values: dict[str, str], names: list[str]) -> str:
    return "{" + ",".join(f'"{n}":{values[n]}' for n in names) + "}"


def event(c: dict[str, Any]) -> bytes:
    """A change event's value as the drawn choices make it."""
    names = NAMES
    after = "null" if c["op"] == "d" else row_text(c["after"], names)
    before = "null" if c["before"] is None else row_text(c["before"], names)
    lsn = LSN + c["lsn"]
    last = {
        "lsn": f'\\"{LSN}\\"',
        "null": "null",
        "number": str(LSN),
        "bad": '\\"x\\"',
        "later": f'\\"{lsn + 5}\\"',
    }[c["last"]]
    clocks = {
        "ts_us": f'"ts_ms":{(WALL_US + c["n"]) // 1000},"ts_us":{WALL_US + c["n"]}',
        "ts_ms": f'"ts_ms":{(WALL_US + c["n"] * 1000) // 1000},"ts_us":null',
        "ts_ns": f'"ts_ns":{(WALL_US + c["n"]) * 1000}',
        "none": '"ts_us":null',
        "float": f'"ts_us":{WALL_US + c["n"]}.0',
    }[c["clock"]]
    source = (
        f'{{"version":"2.5.0.Final","connector":"{c["connector"]}","name":"pg",{clocks},'
        f'"snapshot":{c["snapshot"]},"db":"shop","sequence":"[{last},\\"{lsn}\\"]",'
        f'"schema":"public","table":"orders","txId":771,"lsn":{lsn},'
        f'"file":"binlog.000003","pos":{lsn},"row":{c["row"]}}}'
    )
    tx = "null" if c["tx"] is None else f'{{"id":"{c["tx"]}:{lsn}","total_order":1}}'
    members = {
        "before": before,
        "after": after,
        "source": source,
        "transaction": tx,
        "op": f'"{c["op"]}"',
        "ts_ms": str(WALL_US // 1000),
    }
    order = list(members)
    if c["layout"] == "after_first":
        order = ["after", "op", "before", "source", "transaction", "ts_ms"]
    sep = " , " if c["layout"] == "spaced" else ","
    payload = "{" + sep.join(f'"{m}":{members[m]}' for m in order)
    payload += ',"extra":[1,{"a":"b"}]}' if c["layout"] == "extra" else "}"
    schema_names = {
        "full": names,
        "reordered": list(reversed(names)),
        "fewer": names[:-1],
    }.get(c["schemas"])
    if schema_names is None:
        return payload.encode()
    return f'{{"schema":{value_schema(schema_names)},"payload":{payload}}}'.encode()


def source_records(partitions: list[list[Any]]) -> list[tuple[Any, ...]]:
    records = []
    for p, items in enumerate(partitions):
        for offset, item in enumerate(items):
            key: bytes | None = key_bytes(p, offset, "plain")
            value: bytes | None
            if isinstance(item, dict):
                key, value = key_bytes(p, offset, item["key"]), event(item)
            elif item == "tombstone":
                value = None
            elif item == "null_key":
                key, value = None, b'{"op":"c"}'
            elif item == "not_json":
                value = b'{"schema":{"type":"struct"'
            elif item == "null_payload":
                value = b'{"schema":null,"payload":null}'
            else:
                value = b"[1,2]"
            records.append((key, value, SRC, p, offset, [{"key": "h", "value": b"v"}]))
    return records


def plan(dlq: str | None, floor: int, diff: bool, position: int | None) -> BatchPlan:
    return BatchPlan(
        thresholds={(SRC, 0): Hlc((WALL_US + floor) * 1000)},
        tables={SRC: "orders"},
        formats={SRC: "debezium"},
        routes={SRC: "out.orders"},
        encoders={SRC: JsonEncoder(EncoderConfig(updated=True, diff=diff))},
        dlq_topic=dlq,
        new_partition_floor=Hlc((WALL_US + 3) * 1000),
        positions={} if position is None else {(SRC, 1): (LSN, LSN + position)},
        # binlogs: the ENDs the driver read (773's not yet: its changes wait)
        commits={SRC: {"771": Hlc(WALL_US * 1000 + 7_000_000), "772": Hlc(WALL_US * 1000)}},
        # its transaction topic read: each transaction's places in the summaries, compared
        # (the Avro test leaves them out, as for a source without one)
        counted=frozenset({SRC}),
    )


def key_partition(key: bytes) -> int:
    return int(json.loads(key)[0])


# A change as PostgreSQL's connector writes it; after it, one whose Timestamp column reads 1e3
# (bad: not an integer). The walk stops at the bad one (or at [1,2] before it), so its rest
# starts there; the Python loop alone reads it after a change it wrote. Its reason must be the
# same either way: in the summary (first_bad, no dead-letter topic) and the dead letter's header.
PLAIN: dict[str, Any] = {
    "op": "c",
    "after": dict.fromkeys(NAMES, "null"),
    "before": None,
    "schemas": "full",
    "layout": "debezium",
    "clock": "ts_us",
    "n": 5,
    "lsn": 1,
    "last": "lsn",
    "snapshot": '"false"',
    "connector": "postgresql",
    "row": 0,
    "tx": None,
    "key": "schema",
}
MS_1E3 = {**PLAIN, "after": {**PLAIN["after"], "ms": "1e3"}}


@example(
    partitions=[[PLAIN, {**MS_1E3, "lsn": 2, "n": 7}]],
    floor=0,
    dlq=None,
    diff=False,
    position=None,
)
@example(
    partitions=[[PLAIN, "array", {**MS_1E3, "lsn": 3, "n": 8}]],
    floor=0,
    dlq="dlq",
    diff=False,
    position=None,
)
@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    partitions=st.lists(partition_records, min_size=1, max_size=3),
    floor=st.integers(0, 10),
    dlq=st.sampled_from(["dlq", None]),
    diff=st.booleans(),
    position=st.one_of(st.none(), st.integers(0, 40)),
)
def test_the_walk_writes_what_the_python_loop_writes_of_debezium_events(  # noqa: PLR0917
    spark, dlq: str | None, partitions: list[list[Any]], floor: int, diff: bool, position: Any
) -> None:
    the_plan = plan(dlq, floor, diff, position)
    assert walk_plan(the_plan) is not None
    records = source_records(partitions)
    same_as_the_python_loop(frame(spark, records, len(partitions)), the_plan, key_partition)


# Avro output: the table in primitive types, so the walk writes it. Decimals into doubles (a
# scale of 0 into a long: beyond it, a misfit), Debezium's times as their ISO text, JSON and
# zoned times as strings; without schemas a decimal is base64 text, a misfit in a double.
TABLE = primitive_table(
    "orders",
    ["p", "id"],
    {
        "s": "string",
        "n": "double",
        "dec": "double",
        "dec0": "long",
        "decneg": "double",
        "vdec": "double",
        **dict.fromkeys(("day", "ms", "us", "ns", "tm", "ctm", "z", "j"), "string"),
    },
)


def avro_plan(
    dlq: str | None, floor: int, position: int | None, options: EncoderConfig, confluent: bool
) -> BatchPlan:
    encoder = avro_encoder(TABLE, options, confluent=confluent)
    return replace(plan(dlq, floor, options.diff, position), encoders={SRC: encoder})


avro_partition = avro_key_partition(TABLE, "p")


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    partitions=st.lists(partition_records, min_size=1, max_size=3),
    floor=st.integers(0, 10),
    dlq=st.sampled_from(["dlq", None]),
    position=st.one_of(st.none(), st.integers(0, 40)),
    options=st.sampled_from(AVRO_OPTIONS),
    confluent=st.booleans(),
)
def test_the_walk_writes_what_the_python_loop_writes_of_debezium_events_in_avro(  # noqa: PLR0917
    spark,
    dlq: str | None,
    partitions: list[list[Any]],
    floor: int,
    position: Any,
    options: EncoderConfig,
    confluent: bool,
) -> None:
    the_plan = avro_plan(dlq, floor, position, options, confluent)
    assert walk_plan(the_plan) is not None
    records = source_records(partitions)
    same_as_the_python_loop(frame(spark, records, len(partitions)), the_plan, avro_partition)


def test_clean_debezium_events_are_all_the_walks_in_avro(spark) -> None:
    """Events as a connector writes them, values that fit the table: the walk takes them all.

    Inserts, updates with their before image, deletes, NULLs, decimals, a bigint's 19 digits,
    text with escapes and any characters; in both framings, as the Python loop writes them.
    """
    values = {
        "s": '"q\\"b\\\\ \\u0000\\n é€😀"',
        "n": "-1.5e-3",
        "dec": '"AeJA"',
        "dec0": '"f/////////8="',  # 2**63 - 1
        "decneg": '"Bw=="',
        "vdec": '{"scale":3,"value":"/zs="}',
        "day": "19675",
        "us": "1700000000123456",
        "j": '"{\\"a\\": [1, 2.50]}"',
    }
    nulls = dict.fromkeys(NAMES, "null")
    events = [
        {**PLAIN, "after": {**nulls, **values}, "lsn": 1, "n": 5},
        {**PLAIN, "op": "u", "after": nulls, "before": {**nulls, **values}, "lsn": 2, "n": 6},
        {**PLAIN, "op": "d", "before": {**nulls, "s": '""'}, "lsn": 3, "n": 7},
        {**PLAIN, "after": {**nulls, "n": "123456789012345678901234567890"}, "lsn": 4, "n": 8},
    ]
    records = [(key_bytes(0, o, "schema"), event(e), SRC, 0, o, None) for o, e in enumerate(events)]
    batch = frame(spark, records, 1)
    for options in AVRO_OPTIONS:
        for confluent in (True, False):
            the_plan = avro_plan(None, 0, None, options, confluent)
            rows, walked = Walked.rows(batch, walk_plan(the_plan) or "", 0)
            assert len(rows.collect()) == len(events)
            result, rests = walked.result()
            assert rests == []
            assert result.partitions[0].emitted == len(events)
            same_as_the_python_loop(batch, the_plan, avro_partition)
