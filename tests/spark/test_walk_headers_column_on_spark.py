"""``headers_json_column_name`` in the JVM walk against the Python loop, on a local SparkSession.

A column's JSON object becomes each record's headers and leaves both versions of the row
(``HeadersColumn.java``; the loop's ``encoders.headers.split_headers``): the walk and the
rests it leaves write the bytes and headers the Python loop alone writes, per source
partition in order, with the same summaries, whatever the column and the row hold (any
characters, numbers of every form, nesting, nulls, the object's JSON text, a member named
twice, a source's own spacing, values that are no object), beside ``key_column``.
"""

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from encoders.json import JsonEncoder
from pipeline.config import EncoderConfig
from pipeline.core.batch.contract import RECORD_FRAMING, BatchPlan
from pipeline.core.batch.walk import Walked, walk_plan
from schemas.hlc import Hlc
from tests.support.json_text import LAYOUTS, row
from tests.support.walk import SCHEMA, frame, same_as_the_python_loop

SRC = "src.orders"
WALL = 1700000000000000000

# The column's value as sources write it ({k}: the record's offset)
COLUMN_FORMS = {
    "object": '{{"trace":"t{k}","n":{k},"gone":null,"deep":{{"a":[1,2.50,"é"]}},"yes":true}}',
    "unicode": '{{"t":"\u00e9\u2713{k}","\u00fc":"x"}}',
    "empty": "{{}}",
    "null": "null",
    "missing": None,
    "spaced": '{{ "t" : "x{k}" }}',  # the whole value is written again compact
    "text": '"{{\\"t\\":\\"x{k}\\"}}"',  # the object's JSON text: the loop reads it
    "escaped": '{{"t":"a\\"b{k}"}}',
    "named_twice": '{{"t":1,"t":2}}',
    "number": "7",  # no object: a bad record
}
TAKEN = ("object", "unicode", "empty", "null", "missing")  # the forms the walk takes itself


def image(form: str, k: int, members: str = "{}") -> str:
    """A row whose column h holds ``form``, beside ``members`` (a JSON object's text)."""
    pattern = COLUMN_FORMS[form]
    rest = members[1:-1]
    column = "" if pattern is None else '"h":' + pattern.format(k=k)
    return "{" + ",".join(part for part in ('"id":' + str(k), column, rest) if part) + "}"


def changes(forms: list[str], kinds: list[str], layouts: list[str]) -> Any:
    return st.tuples(
        st.sampled_from(layouts),
        st.sampled_from(forms),
        st.sampled_from(kinds),
        st.integers(0, 30),  # the time, within reach of the markers: some are duplicates
        row,  # the row's other members: any characters, numbers of every form, nesting
    )


plain = changes(list(TAKEN), ["upsert", "delete"], ["as_output", "no_before"])
odd = changes(sorted(COLUMN_FORMS), ["upsert", "delete", "bare_delete"], sorted(LAYOUTS))
marker = st.builds(lambda n: ("marker", n), st.integers(0, 30))
record = st.integers(0, 99).flatmap(lambda k: plain if k < 80 else odd if k < 92 else marker)
partition_records = st.lists(record, min_size=1, max_size=25)


def source_records(partitions: list[list[Any]]) -> list[tuple[Any, ...]]:
    records = []
    for p, items in enumerate(partitions):
        for offset, item in enumerate(items):
            key: bytes | None
            if item[0] == "marker":
                key, value = None, json.dumps({"resolved": f"{WALL + item[1]}.0000000000"})
            else:
                layout, form, kind, n, members = item
                new = image(form, offset, members)
                after, before = (new, "null") if kind == "upsert" else ("null", new)
                if kind == "bare_delete":
                    before = "null"
                t = f"{WALL + n}.0000000000"
                value = LAYOUTS[layout].format(a=after, b=before, t=t, short=WALL + n)
                key = f"[{p},{offset}]".encode()
            records.append((key, value.encode(), SRC, p, offset, None))
    return records


def plan(dlq: str | None, floor: int, diff: bool, key_column: str | None = None) -> BatchPlan:
    options = EncoderConfig(
        updated=True,
        diff=diff,
        headers_json_column_name="h",
        key_column=key_column,
        unordered=True,
    )
    return BatchPlan(
        thresholds={(SRC, 0): Hlc(WALL + floor)},
        tables={SRC: "orders"},
        formats={SRC: "native"},
        routes={SRC: "out.orders"},
        encoders={SRC: JsonEncoder(options)},
        dlq_topic=dlq,
        new_partition_floor=Hlc(WALL + 3),
        headers_column="h",
    )


def source_partition(key: bytes) -> int:
    """The source partition a key names: the source's key [p, offset], or [id] (id 1000p+k)."""
    values = json.loads(key)
    return values[0] if len(values) == 2 else values[0] // 1000


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    partitions=st.lists(partition_records, min_size=1, max_size=3),
    floor=st.integers(0, 10),
    dlq=st.sampled_from(["dlq", None]),  # bad records dead-lettered, or where a partition stops
    diff=st.booleans(),
)
def test_the_walk_takes_the_headers_out_as_the_python_loop_does(
    spark, dlq: str | None, partitions: list[list[Any]], floor: int, diff: bool
) -> None:
    the_plan = plan(dlq, floor, diff)
    assert walk_plan(the_plan) is not None
    records = source_records(partitions)
    same_as_the_python_loop(frame(spark, records, len(partitions)), the_plan, source_partition)


def test_the_walk_writes_the_headers_and_leaves_the_rest_from_the_first_odd_column(spark) -> None:
    """The walk's own rows for each form it takes, upserts and deletes; then the loop's."""
    items = [
        ("as_output", form, kind, 5, '{"s":"x"}') for form in TAKEN for kind in ("upsert", "delete")
    ]
    odd = [("as_output", form, "upsert", 6, "{}") for form in ("spaced", "text", "named_twice")]
    records = source_records([[*items, *odd, items[0]]])
    batch = spark.createDataFrame(records, SCHEMA).coalesce(1)
    the_plan = plan(None, 0, diff=True)
    rows, run = Walked.rows(batch, walk_plan(the_plan) or "", 0)
    walked = rows.collect()
    _, rests = run.result()
    assert [(r.start, r.stop) for r in rests] == [(len(items), len(records))]
    n = 0  # the first object's offset
    assert [(h["key"], bytes(h["value"])) for h in walked[n]["headers"]] == [
        ("trace", b"t0"),
        ("n", b"0"),
        ("deep", '{"a":[1,2.50,"é"]}'.encode()),
        ("yes", b"true"),
    ]
    assert bytes(walked[n]["value"]) == (
        b'{"after":{"id":0,"s":"x"},"before":null,"updated":"1700000000000000005.0000000000"}'
    )
    delete = walked[n + 1]  # the old version's column: its headers, out of the value
    assert [h["key"] for h in delete["headers"]] == ["trace", "n", "deep", "yes"]
    assert json.loads(delete["value"])["before"] == {"id": 1, "s": "x"}
    for r in walked[4:]:  # empty, null, missing: no headers, no column
        assert r["headers"] is None
        assert "h" not in (json.loads(r["value"])["after"] or json.loads(r["value"])["before"])
    loop, _ = same_as_the_python_loop(batch, the_plan, source_partition)
    assert [[h["key"] for h in r["headers"]] for r in loop[len(items) : len(items) + 3]] == [
        ["t"],
        ["t"],
        ["t"],  # named twice: the loop's parse keeps the last
    ]


def test_headers_and_key_column_together(spark) -> None:
    """The key from a column of the row once the headers' column left it."""
    items = [("as_output", "object", "upsert", 5, '{"c":"k"}') for _ in range(3)]
    records = source_records([items])
    batch = spark.createDataFrame(records, SCHEMA).coalesce(1)
    the_plan = plan(None, 0, diff=True, key_column="id")
    rows, run = Walked.rows(batch, walk_plan(the_plan) or "", 0)
    walked = rows.collect()
    assert run.result()[1] == []
    assert [bytes(r["key"]) for r in walked] == [b"[0]", b"[1]", b"[2]"]
    assert all(r["headers"] for r in walked)
    same_as_the_python_loop(batch, the_plan, lambda key: 0)


ODD = [
    *((form, "{}") for form in ("spaced", "text", "escaped", "named_twice", "number")),
    ("object", '{"s":1,"s":2}'),  # the row names a member twice
    ("object", '{"o":{"a":1,"a":2}}'),  # so does an object in it
    ("object", '{"o":[{"a":"\\u00e9"}]}'),  # an escape deep in it
    ("object", '{"o":[1, 2]}'),  # a space deep in it
]


@pytest.mark.parametrize(("form", "members"), ODD)
def test_a_change_the_walk_cannot_be_sure_of_is_the_loops(spark, form: str, members: str) -> None:
    """After one change the walk writes, the odd one and the rest go to the Python loop."""
    items = [("as_output", "object", "upsert", 5, "{}"), ("as_output", form, "upsert", 6, members)]
    records = source_records([[*items, items[0]]])
    batch = spark.createDataFrame(records, SCHEMA).coalesce(1)
    the_plan = plan("dlq", 0, diff=True)
    rows, run = Walked.rows(batch, walk_plan(the_plan) or "", 0)
    assert len(rows.collect()) == 1
    assert [(r.start, r.stop) for r in run.result()[1]] == [(1, 3)]
    same_as_the_python_loop(batch, the_plan, source_partition)


def test_headers_count_towards_a_records_size(spark) -> None:
    """A change over the room only with its headers is the loop's (as Kafka counts them)."""
    records = source_records([[("as_output", "object", "upsert", 5, "{}")]])
    batch = spark.createDataFrame(records, SCHEMA).coalesce(1)
    roomy = plan("dlq", 0, diff=True)
    (written,) = Walked.rows(batch, walk_plan(roomy) or "", 0)[0].collect()
    size = len(written["key"]) + len(written["value"])
    headed = sum(len(h["key"].encode()) + len(h["value"]) + 10 for h in written["headers"])
    for extra, walked in ((headed, 1), (headed - 1, 0)):  # just fits, or a byte over
        the_plan = replace(roomy, max_record_bytes=RECORD_FRAMING + size + extra)
        assert len(Walked.rows(batch, walk_plan(the_plan) or "", 0)[0].collect()) == walked
        same_as_the_python_loop(batch, the_plan, source_partition)
