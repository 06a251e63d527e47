"""``key_column`` and ``headers_json_column_name`` on the JVM walk's Avro routes, on Spark.

``Avro.java`` keys a change by one column's value, from its new version or, a delete, its old
one (the loop's ``encoders.base.key_column_value``), and takes the headers' column out of both
versions, its compact object the record's headers (``encoders/headers.py``). The walk and the
rests it leaves write the bytes and headers the Python loop alone writes, per source
partition in order, with the same summaries, whatever the columns hold: the key column
missing, null, named twice or of another type; the headers' column an object compact or not,
its JSON text in a string, another value, nothing; deletes with and without their old version.
"""

import io
import json
from typing import Any

from fastavro import parse_schema, schemaless_reader
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.config import EncoderConfig
from pipeline.core.batch.contract import BatchPlan
from pipeline.core.batch.walk import Walked, walk_plan
from schemas.avro import OutputSchemas
from schemas.hlc import Hlc
from schemas.tables import TableSchema
from tests.support.json_text import LAYOUTS, number, string
from tests.support.walk import (
    avro_encoder,
    avro_key_partition,
    frame,
    keyed,
    python_loop,
    same_as_the_python_loop,
)

SRC = "src.orders"
WALL = 1700000000000000000
PER = 1000  # the key column's value: partition * PER + offset, so the output groups by it

TABLE = TableSchema.of(
    {
        "type": "record",
        "name": "keyed",
        "fields": [
            {"name": "p", "type": "long"},
            {"name": "k", "type": "string"},
            {"name": "g", "type": "long"},  # key_column: not nullable
            {"name": "s", "type": ["null", "string"], "default": None},  # key_column: nullable
            {"name": "d", "type": ["null", "double"], "default": None},
            {"name": "h", "type": ["null", "string"], "default": None},  # the headers' column
        ],
    },
    ["p", "k"],
)
OPTIONS = [
    EncoderConfig(format="avro", updated=True, diff=True),
    EncoderConfig(format="avro", updated=True, diff=True, key_in_value=True, topic_in_value=True),
    EncoderConfig(format="avro", mvcc_timestamp=True),  # no before: a delete is keyed by it
]  # (key_only refuses key_column: its record would not name its row)

# The key column's value as a source may write it ({v}: the value naming the partition)
G_FORMS = {
    "plain": "{v}",
    "twice": '9,"g":{v}',  # the loop's parse keeps the last
    "fraction": "{v}.5",  # a misfit: g is a long
    "text": '"{v}"',  # a misfit
    "null": "null",  # a misfit: g is not nullable
    "missing": None,
}
G_TAKEN = ("plain",)
# The headers' column, under headers_json_column_name
H_FORMS = {
    "object": '{{"a":"x{p}","n":12.50,"z":null,"o":{{"q":[1,2.0e1]}}}}',
    "empty": "{{}}",
    "null": "null",
    "missing": None,
    "spaced": '{{ "a" : "x{p}" }}',  # not compact: the loop writes it
    "escaped": '{{"a":"\\u00e9{p}"}}',
    "escaped_name": '{{"\\u0061":"x"}}',
    "twice": '{{"a":"1","a":"2"}}',
    "member_twice": '{{}},"h":{{"a":"x{p}"}}',  # the column named twice: the loop keeps the last
    "text": '"{{\\"a\\":\\"x{p}\\"}}"',  # its JSON text: the loop reads it, the walk does not
    "number": "5",  # a bad record
}
H_TAKEN = ("object", "empty", "null", "missing")
# ... and without headers_json_column_name: a string column like any other
H_PLAIN = {"text": '"plain"', "null": "null", "missing": None}
KEY = '[{p},"k{k}"]'  # the source's key; others: spaced, and a misfit for key_in_value


def clean(g: str, h: str, kind: str, *, s: str | None, d: str, n: int) -> tuple[Any, ...]:
    """A change of a compact layout and key, its members in the schema's order."""
    return ("change", "as_output", g, h, kind, s, d, range(6), KEY, n)


def image(p: int, offset: int, g: str, h: str, *, s: str | None, d: str, order: list[int]) -> str:
    """A version of the row; ``order``: its members' (a permutation of six places)."""
    members = [f'"p":{p}', f'"k":"k{offset}"', f'"d":{d}']
    if s is not None:
        members.append(f'"s":{s}')
    g_text = G_FORMS[g]
    if g_text is not None:
        members.append('"g":' + g_text.format(v=p * PER + offset))
    h_text = {**H_FORMS, **{f"plain_{n}": v for n, v in H_PLAIN.items()}}[h]
    if h_text is not None:
        members.append('"h":' + h_text.format(p=p))
    return "{" + ",".join(members[k] for k in order if k < len(members)) + "}"


def change(g_forms: list[str], h_forms: list[str], kinds: list[str]) -> Any:
    return st.tuples(
        st.just("change"),
        st.sampled_from(["as_output", "no_before", "spaced", "reordered"]),
        st.sampled_from(g_forms),
        st.sampled_from(h_forms),
        st.sampled_from(kinds),
        st.one_of(st.just("null"), string),
        st.one_of(st.just("null"), number),
        st.permutations(range(6)),
        st.sampled_from([KEY] * 4 + ['[ {p} , "k{k}" ]', '[{p}.0,"k{k}"]']),
        st.integers(0, 30),  # the time, within reach of the markers: some are duplicates
    )


def items(headers: bool) -> Any:
    """A partition's records: mostly changes the walk takes, some odd, markers, bad values."""
    h_all = sorted(H_FORMS) if headers else [f"plain_{n}" for n in H_PLAIN]
    h_taken = list(H_TAKEN) if headers else h_all
    plain = change(list(G_TAKEN), h_taken, ["upsert", "delete"])
    odd = change(sorted(G_FORMS), h_all, ["upsert", "delete", "delete_without_before"])
    marker = st.builds(lambda n: ("marker", n), st.integers(0, 30))
    bad = st.just(("bad",))
    record = st.integers(0, 99).flatmap(
        lambda k: plain if k < 75 else odd if k < 90 else marker if k < 96 else bad
    )
    return st.lists(record, min_size=1, max_size=25)


def source_records(partitions: list[list[Any]]) -> list[tuple[Any, ...]]:
    records = []
    for p, drawn in enumerate(partitions):
        for offset, item in enumerate(drawn):
            key: bytes | None = f'[{p},"k{offset}"]'.encode()
            if item[0] == "marker":
                key, value = None, json.dumps({"resolved": f"{WALL + item[1]}.0000000000"})
            elif item[0] == "bad":
                value = '{"after":{"g":1},"updated":"'
            else:
                _, layout, g, h, kind, s, d, order, key_form, n = item
                new = image(p, offset, g, h, s=s, d=d, order=list(order))
                after, before = (new, "null") if kind == "upsert" else ("null", new)
                if kind == "delete_without_before":
                    before = "null"
                t = f"{WALL + n}.0000000000"
                value = LAYOUTS[layout].format(a=after, b=before, t=t, short=WALL + n)
                key = key_form.format(p=p, k=offset).encode()
            records.append((key, value.encode(), SRC, p, offset, None))
    return records


def plan(dlq: str | None, floor: int, options: EncoderConfig, confluent: bool) -> BatchPlan:
    return BatchPlan(
        thresholds={(SRC, 0): Hlc(WALL + floor)},
        tables={SRC: "keyed"},
        formats={SRC: "native"},
        routes={SRC: "out.keyed"},
        encoders={SRC: avro_encoder(TABLE, options, confluent=confluent)},
        dlq_topic=dlq,
        new_partition_floor=Hlc(WALL + 3),
        headers_column=options.headers_json_column_name,
    )


def key_record(key: bytes, options: EncoderConfig) -> dict[str, Any]:
    schema = parse_schema(OutputSchemas.of(TABLE, options).key)
    header = 5 if key[0] == 0 else 10  # Confluent's framing, or a single object's
    return schemaless_reader(io.BytesIO(key[header:]), schema, None)  # type: ignore[return-value]


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    data=st.data(),
    headers=st.booleans(),
    floor=st.integers(0, 10),
    dlq=st.sampled_from(["dlq", None]),  # bad records dead-lettered, or where a partition stops
    base=st.sampled_from(OPTIONS),
    confluent=st.booleans(),
)
def test_the_avro_walk_keys_and_heads_records_as_the_python_loop_does(  # noqa: PLR0917
    spark: Any,
    data: Any,
    headers: bool,
    floor: int,
    dlq: str | None,
    base: EncoderConfig,
    confluent: bool,
) -> None:
    options = keyed(base, "g", "h" if headers else None)
    the_plan = plan(dlq, floor, options, confluent)
    assert walk_plan(the_plan) is not None
    partitions = data.draw(st.lists(items(headers), min_size=1, max_size=3))
    records = source_records(partitions)

    partition_of = avro_key_partition(TABLE, "g", PER, options)
    same_as_the_python_loop(frame(spark, records, len(partitions)), the_plan, partition_of)


def test_the_avro_walk_writes_the_columns_key_and_headers_itself(spark: Any) -> None:
    """Clean changes: the walk takes every one, keyed by the column, its headers the object's.

    The key record is the column's value (a delete's from its old version), the value's
    ``key`` is still the primary key's, the headers' column is in neither version.
    """
    drawn = [
        clean("plain", "object", "upsert", s='"é"', d="1.5", n=5),
        ("change", "spaced", "plain", "empty", "upsert", "null", "-0.0", range(6), KEY, 6),
        clean("plain", "missing", "delete", s='"x"', d="null", n=7),
        ("change", "reordered", "plain", "object", "delete", '"y"', "2", range(5, -1, -1), KEY, 8),
        clean("plain", "null", "upsert", s='"z"', d="3", n=9),
    ]
    batch = frame(spark, source_records([drawn]), 1)
    options = keyed(OPTIONS[1], "g", "h")
    for confluent in (True, False):
        the_plan = plan(None, 0, options, confluent)
        records, walked = Walked.rows(batch, walk_plan(the_plan) or "", 0)
        rows = records.collect()
        result, rests = walked.result()
        assert (rests, result.emitted) == ([], 5)  # the walk took every record
        expected_rows, _ = python_loop(batch, the_plan)
        assert [(r["key"], r["value"], r["headers"]) for r in rows] == [
            (r["key"], r["value"], r["headers"]) for r in expected_rows
        ]
    assert [key_record(bytes(r["key"]), options) for r in rows] == [{"g": n} for n in range(5)]
    heads = [[(h["key"], bytes(h["value"])) for h in r["headers"] or []] for r in rows]
    object_headers = [("a", b"x0"), ("n", b"12.50"), ("o", b'{"q":[1,2.0e1]}')]
    assert heads == [object_headers, [], [], object_headers, []]
    value_schema = parse_schema(OutputSchemas.of(TABLE, options).value)
    values = [
        schemaless_reader(io.BytesIO(bytes(r["value"])[10:]), value_schema, None) for r in rows
    ]
    assert [v["key"] for v in values] == [{"p": 0, "k": f"k{n}"} for n in range(5)]  # type: ignore[index]
    assert values[0]["after"] == {"p": 0, "k": "k0", "g": 0, "s": "é", "d": 1.5}  # type: ignore[index]
    assert values[3]["before"]["g"] == 3  # type: ignore[index]


def test_a_nullable_key_column_holding_null_keys_the_record_by_null(spark: Any) -> None:
    """key_column ``s`` ([null, string]): null is a value the key record holds.

    A missing one is the loop's (a bad record, dead-lettered), and so is the rest from there.
    """
    values = ['"s\\u00e9"', "null", None, '"after"']
    drawn = [
        clean("plain", "plain_null", "upsert", s=s, d="1", n=5 + n) for n, s in enumerate(values)
    ]
    batch = frame(spark, source_records([drawn]), 1)
    options = keyed(OPTIONS[0], "s")
    the_plan = plan("dlq", 0, options, confluent=True)
    records_out, walked = Walked.rows(batch, walk_plan(the_plan) or "", 0)
    assert len(records_out.collect()) == 2  # the first two, then the missing one stops it
    _, rests = walked.result()
    assert [(r.start, r.stop) for r in rests] == [(2, 4)]
    rows, _ = same_as_the_python_loop(batch, the_plan, lambda key: 0)
    assert [r["topic"] for r in rows] == ["out.keyed", "out.keyed", "dlq", "out.keyed"]
    assert [key_record(bytes(r["key"]), options) for r in (rows[0], rows[1], rows[3])] == [
        {"s": "sé"},
        {"s": None},
        {"s": "after"},
    ]


def test_each_odd_column_value_is_left_to_the_python_loop(spark: Any) -> None:
    """A partition per odd value, after a change the walk takes: the walk stops at the odd one.

    The loop writes it, or names the bad record; the output is the loop's.
    """
    odd = [("h", form) for form in sorted(set(H_FORMS) - set(H_TAKEN))]
    odd += [("g", form) for form in sorted(set(G_FORMS) - set(G_TAKEN))]
    partitions = [
        [
            clean("plain", "object", "upsert", s='"s"', d="1", n=5),
            clean(
                form if column == "g" else "plain",
                form if column == "h" else "null",
                "upsert",
                s='"s"',
                d="2",
                n=6,
            ),
        ]
        for column, form in odd
    ]
    partitions.append(
        [
            clean("plain", "object", "upsert", s=None, d="1", n=5),
            clean("plain", "object", "delete_without_before", s=None, d="1", n=6),
        ]
    )
    options = keyed(OPTIONS[1], "g", "h")
    the_plan = plan("dlq", 0, options, confluent=True)
    batch = frame(spark, source_records(partitions), len(partitions))
    records, walked = Walked.rows(batch, walk_plan(the_plan) or "", 0)
    assert len(records.collect()) == len(partitions)  # each partition's first change
    _, rests = walked.result()
    assert sorted((r.partition.partition, r.start) for r in rests) == [
        (p, 1) for p in range(len(partitions))
    ]
    same_as_the_python_loop(batch, the_plan, avro_key_partition(TABLE, "g", PER, options))
