"""``key_column`` in the JVM walk against the Python loop, on a local SparkSession.

Each change keyed by one column's value (``KeyColumn.java``; the loop's
``encoders.base.key_column_value``): the walk and the rests it leaves write the bytes the
Python loop alone writes, per source partition in order, with the same summaries, whatever
the column holds (numbers of every form, text with escapes or not, objects, a member named
twice or missing, a delete with or without its old version).
"""

import json
import re
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from encoders.json import JsonEncoder
from pipeline.config import EncoderConfig
from pipeline.core.batch.contract import BatchPlan
from pipeline.core.batch.walk import Walked, walk_plan
from schemas.hlc import Hlc
from tests.support.json_text import LAYOUTS
from tests.support.walk import SCHEMA, frame, same_as_the_python_loop

SRC = "src.orders"
WALL = 1700000000000000000

# The column's value as sources write it; every form names its source partition by its first
# digit (q: the partition + 1), so the output can be grouped by its key.
COLUMN_FORMS = {
    "integer": "{q}{k:04d}",
    "negative": "-{q}{k:04d}",
    "big": "{q}{k:04d}12345678901234567890",  # beyond a compact key's 18 digits
    "fraction": "{q}{k:04d}.50",
    "exponent": "{q}{k:04d}e2",
    "text": '"{q}x{k}"',
    "unicode": '"{q}\u00e9{k}"',
    "escaped": '"{q}a\\"b{k}"',
    "escaped_unicode": '"{q}\\u00e9{k}"',
    "object": '{{ "n" : {q}{k:04d} }}',
    "twice": '{q}{k:04d},"c":{q}9999',  # the Python loop's parse keeps the last
    "missing": None,
}
TAKEN = ("integer", "negative", "text", "unicode")  # the forms the walk keys itself


def image(form: str, p: int, k: int) -> str:
    pattern = COLUMN_FORMS[form]
    if pattern is None:
        return f'{{"other":{k}}}'
    return '{"x":1,"c":' + pattern.format(q=p + 1, k=k) + ',"y":"z"}'


def changes(forms: list[str], kinds: list[str]) -> Any:
    return st.tuples(
        st.sampled_from(["as_output", "no_before", "spaced"]),
        st.sampled_from(forms),
        st.sampled_from(kinds),
        st.integers(0, 30),  # the time, within reach of the markers: some are duplicates
    )


# mostly changes the walk keys itself, so that it has runs to take before an odd one
plain = changes(list(TAKEN), ["upsert", "delete"])
odd = changes(sorted(COLUMN_FORMS), ["upsert", "delete", "delete_without_before"])
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
                layout, form, kind, n = item
                new = image(form, p, offset)
                after, before = (new, "null") if kind == "upsert" else ("null", new)
                if kind == "delete_without_before":
                    before = "null"
                t = f"{WALL + n}.0000000000"
                value = LAYOUTS[layout].format(a=after, b=before, t=t, short=WALL + n)
                key = f"[{p},{offset}]".encode()
            records.append((key, value.encode(), SRC, p, offset, None))
    return records


def plan(dlq: str | None, floor: int, diff: bool) -> BatchPlan:
    options = EncoderConfig(updated=True, diff=diff, key_column="c", unordered=True)
    return BatchPlan(
        thresholds={(SRC, 0): Hlc(WALL + floor)},
        tables={SRC: "orders"},
        formats={SRC: "native"},
        routes={SRC: "out.orders"},
        encoders={SRC: JsonEncoder(options)},
        dlq_topic=dlq,
        new_partition_floor=Hlc(WALL + 3),
    )


def column_partition(key: bytes) -> int:
    """The source partition a key of the column names: its first digit, less one."""
    found = re.search(rb"[0-9]", key)
    assert found is not None, key
    return int(found[0]) - 1


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    partitions=st.lists(partition_records, min_size=1, max_size=3),
    floor=st.integers(0, 10),
    dlq=st.sampled_from(["dlq", None]),  # bad records dead-lettered, or where a partition stops
    diff=st.booleans(),
)
def test_the_walk_keys_by_the_column_as_the_python_loop_does(
    spark, dlq: str | None, partitions: list[list[Any]], floor: int, diff: bool
) -> None:
    the_plan = plan(dlq, floor, diff)
    assert walk_plan(the_plan) is not None
    records = source_records(partitions)
    same_as_the_python_loop(frame(spark, records, len(partitions)), the_plan, column_partition)


def test_the_walk_keys_plain_values_and_leaves_the_rest_from_the_first_odd_one(spark) -> None:
    """The walk keys each form it takes, an upsert and a delete.

    From the first value it cannot be sure to key as the Python loop does, the rest is the
    loop's.
    """
    items = [("as_output", form, kind, 5) for form in TAKEN for kind in ("upsert", "delete")]
    odd = [("as_output", form, "upsert", 6) for form in ("twice", "object", "escaped_unicode")]
    records = source_records([[*items, *odd, items[0]]])
    batch = spark.createDataFrame(records, SCHEMA).coalesce(1)
    the_plan = plan(None, 0, diff=True)
    rows, run = Walked.rows(batch, walk_plan(the_plan) or "", 0)
    walked = rows.collect()
    _, rests = run.result()
    assert [(r.start, r.stop) for r in rests] == [(len(items), len(records))]
    expected = [f"[{COLUMN_FORMS[i[1]]}]".format(q=1, k=k).encode() for k, i in enumerate(items)]
    assert [bytes(r["key"]) for r in walked] == expected
    assert [bytes(r["value"]) for r in walked] == [r[1] for r in records[: len(items)]]
    loop, _ = same_as_the_python_loop(batch, the_plan, column_partition)
    n = len(items)  # the odd ones' offsets: n, n + 1, n + 2
    assert [bytes(r["key"]) for r in loop[n : n + 3]] == [
        b"[19999]",  # the last of the two, as the loop's parse keeps it
        f'[{{"n":1{n + 1:04d}}}]'.encode(),
        f'["1\u00e9{n + 2}"]'.encode(),
    ]


def test_key_column_routes_say_so_in_the_walks_plan() -> None:
    the_plan = plan(None, 0, diff=True)
    walked = json.loads(walk_plan(the_plan) or "")
    assert walked["routes"][SRC]["encoding"]["key_column"] == "c"
    for fmt in ("debezium", "canal-json"):  # their readers' envelopes, keyed the same way
        walked = json.loads(walk_plan(replace(the_plan, formats={SRC: fmt})) or "")
        assert walked["routes"][SRC]["encoding"]["key_column"] == "c"


def test_debezium_changes_are_keyed_by_the_column_of_the_readers_envelope(spark) -> None:
    """Debezium's reader writes the envelope; the key comes from its column as for a native one.

    PostgreSQL's events (created, updated, deleted with the old version), keyed by ``s``;
    the one whose ``s`` is no plain key value, and the rest after it, is the loop's.
    """
    from tests.spark import test_walk_debezium_on_spark as dbz  # noqa: PLC0415 - its events

    def changed(op: str, s: str, lsn: int) -> dict[str, Any]:
        row = {**dbz.PLAIN["after"], "s": s}
        after, before = (None, row) if op == "d" else (row, None)
        return {**dbz.PLAIN, "op": op, "after": after or {}, "before": before, "lsn": lsn}

    values = ['"east"', '"west"', '"é"', '"east"', '"a\\"b"', '"north"']
    events = [changed("d" if n == 3 else "c", s, n + 1) for n, s in enumerate(values)]
    records = dbz.source_records([events])
    batch = spark.createDataFrame(records, SCHEMA).coalesce(1)
    the_plan = replace(
        dbz.plan(None, 0, diff=True, position=None),
        encoders={
            dbz.SRC: JsonEncoder(
                EncoderConfig(updated=True, diff=True, key_column="s", unordered=True)
            )
        },
    )
    rows, run = Walked.rows(batch, walk_plan(the_plan) or "", 0)
    walked = rows.collect()
    assert [(r.start, r.stop) for r in run.result()[1]] == [(4, 6)]  # from the escaped one
    assert [bytes(r["key"]) for r in walked] == [f"[{s}]".encode() for s in values[:4]]
    loop, _ = same_as_the_python_loop(batch, the_plan, lambda key: 0)
    assert [bytes(r["key"]) for r in loop[4:]] == [b'["a\\"b"]', b'["north"]']
