"""Values pass through unchanged (contract §5.6): every number keeps its text, in any form."""

import decimal
from fractions import Fraction

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from encoders.base import ChangeRow, Context
from encoders.json import JsonEncoder
from pipeline.config import EncoderConfig
from pipeline.core.sources import BadRecord, NativeAdapter
from schemas.hlc import Hlc
from schemas.tables import TableSchema
from tests.support.json_text import LAYOUTS, exact, number, row

pytestmark = pytest.mark.unit
T = "1700000000000000001.0000000000"


@settings(max_examples=400, deadline=None)
@given(row, st.one_of(st.none(), row), st.lists(number, min_size=1, max_size=3))
def test_after_before_and_key_keep_every_number_text(
    after: str, before: str | None, key: list[str]
) -> None:
    source_key = ("[" + ",".join(key) + "]").encode()
    value = f'{{"after":{after},"before":{before or "null"},"updated":"{T}"}}'.encode()
    adapter = NativeAdapter()
    # as the executors read it: which records need the exact reader, for the batch at once
    (flag,) = adapter.exact(pa.array([source_key], pa.binary()), pa.array([value], pa.binary()))
    encoder = JsonEncoder(EncoderConfig(diff=True, updated=True))
    outputs = []
    # as the executors read it (flagged for the batch at once), and as a driver-side reader
    for change in (adapter.decode(source_key, value, flag), adapter.decode(source_key, value)):
        assert not isinstance(change, BadRecord)
        row_ = ChangeRow("t", change.key, change.after, change.before, Hlc.parse(T), Hlc.parse(T))
        out = encoder.value(row_, Context("out"))
        assert out is not None
        assert exact(out) == {
            "after": exact(after),
            "before": exact(before or "null"),
            "updated": T,
        }
        assert exact(encoder.key(row_, Context("out"))) == exact(source_key)
        outputs.append(out)
    assert outputs[0] == outputs[1]


def test_the_issue_s_example_comes_out_as_it_went_in() -> None:
    after = '{"price":12345678901234567.89,"ratio":1.10,"n":18446744073709551617,"e":1E+2}'
    value = f'{{"after":{after},"updated":"{T}"}}'.encode()
    change = NativeAdapter().decode(b"[1]", value)
    row_ = ChangeRow("t", change.key, change.after, None, Hlc.parse(T), Hlc.parse(T))
    out = JsonEncoder(EncoderConfig()).value(row_, Context("out"))
    assert out == f'{{"after":{after}}}'.encode()


@pytest.mark.parametrize(
    "number",
    [
        "123456789012.34567",  # 17 significant digits: a double cannot keep them
        "1234567890123456.7",
        "9007199254740993",
        "0.1000000000000000055511151231257827",
        "1.10",
        "100.00",
        "-0",
        "-0.0",
        "1e5",
        "2.50E-3",
        "18446744073709551616",
        "-9223372036854775809",  # below what orjson keeps as an integer
        "-9999999999999999999",
    ],
)
def test_numbers_a_double_cannot_keep_are_flagged_for_the_exact_reader(number: str) -> None:
    value = f'{{"after":{{"x":{number},"y":[{number}]}},"updated":"{T}"}}'.encode()
    adapter = NativeAdapter()
    (flag,) = adapter.exact(pa.array([b"[1]"], pa.binary()), pa.array([value], pa.binary()))
    change = adapter.decode(b"[1]", value, flag)
    row_ = ChangeRow("t", change.key, change.after, None, Hlc.parse(T), Hlc.parse(T))
    out = JsonEncoder(EncoderConfig()).value(row_, Context("out"))
    assert out == f'{{"after":{{"x":{number},"y":[{number}]}}}}'.encode()


@pytest.mark.parametrize(
    "number",
    [
        "1764000000009221500",  # Debezium's ts_ns: 19 digits, every event
        "-1764000000009221500",
        "9999999999999999999",
        "-8999999999999999999",
        "123456789012345678",
    ],
)
def test_integers_orjson_keeps_exactly_are_read_by_orjson(number: str) -> None:
    value = f'{{"after":{{"x":{number},"y":[{number}]}},"updated":"{T}"}}'.encode()
    adapter = NativeAdapter()
    (flag,) = adapter.exact(pa.array([b"[1]"], pa.binary()), pa.array([value], pa.binary()))
    assert flag is False  # the fast reader: a 19-digit time does not send events to the slow one
    change = adapter.decode(b"[1]", value, flag)
    row_ = ChangeRow("t", change.key, change.after, None, Hlc.parse(T), Hlc.parse(T))
    out = JsonEncoder(EncoderConfig()).value(row_, Context("out"))
    assert out == f'{{"after":{{"x":{number},"y":[{number}]}}}}'.encode()


DECIMAL_TABLE = TableSchema.of(
    {
        "type": "record",
        "name": "t",
        "fields": [
            {"name": "id", "type": "long"},
            {
                "name": "d",
                "type": [
                    "null",
                    {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 3},
                ],
            },
            {
                "name": "nested",
                "type": {
                    "type": "record",
                    "name": "n",
                    "fields": [
                        {
                            "name": "xs",
                            "type": {
                                "type": "map",
                                "values": {
                                    "type": "array",
                                    "items": {
                                        "type": "bytes",
                                        "logicalType": "decimal",
                                        "precision": 9,
                                        "scale": 3,
                                    },
                                },
                            },
                        }
                    ],
                },
            },
        ],
    },
    ["id"],
)


def fits_decimal_9_3(text: str) -> bool:
    """The oracle: the value survives decimal(9,3) with no rounding (independent arithmetic)."""
    value = Fraction(decimal.Decimal(text))
    scaled = value * 1000
    return scaled.denominator == 1 and abs(scaled) < 10**9


@settings(max_examples=500, deadline=None)
@given(number)
def test_a_declared_decimal_fits_exactly_when_no_rounding_is_needed(number: str) -> None:
    if number == "1e400":
        number = "1e4"
    expected = fits_decimal_9_3(number)
    for doc in (f'{{"id":1,"d":{number}}}', f'{{"id":1,"nested":{{"xs":{{"k":[0,{number}]}}}}}}'):
        value = NativeAdapter().change([1], f'{{"after":{doc},"updated":"{T}"}}'.encode()).after
        reason = DECIMAL_TABLE.misfit(value)
        assert (reason is None) == expected, (doc, reason)
        if reason is not None:
            assert number in reason


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(sorted(LAYOUTS)), row, st.one_of(st.none(), row), number),
        min_size=1,
        max_size=6,
    )
)
def test_the_task_loop_keeps_every_number_text_passed_on_or_written_again(
    records: list[tuple[str, str, str | None, str]],
) -> None:
    """What the output topic gets, through ``process`` as the executors run it.

    A source value that already is the output (wrapped, ``diff``, ``updated``) goes out as the
    very bytes that came; any other is written again, its numbers read exactly, whichever
    layout came first in the stretch (the exact reader's flags are found lazily).
    """
    from pipeline.core.batch.contract import BatchPlan  # noqa: PLC0415
    from pipeline.core.batch.loop import process  # noqa: PLC0415

    wall = 1700000000000000000
    keys, values, sources = [], [], []
    for i, (layout, after, before, key) in enumerate(records):
        t = f"{wall + i}.0000000000"
        value = LAYOUTS[layout].format(a=after, b=before or "null", t=t, short=wall + i)
        keys.append((f"[ {key} ]" if i % 2 else f"[{key}]").encode())  # spaced or not
        values.append(value.encode())
        sources.append((layout, after, before, t))
    n = len(records)
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array(["src"] * n, pa.string()),
            pa.array([0] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
        ],
        names=["key", "value", "topic", "partition", "offset"],
    )
    encoder = JsonEncoder(EncoderConfig(diff=True, updated=True))
    plan = BatchPlan({}, {"src": "t"}, {"src": "native"}, {"src": "out"}, {"src": encoder}, None)
    out = pa.Table.from_batches(list(process(plan, iter([batch])))).to_pylist()
    rows = [r for r in out if r["summary"] is None]
    assert len(rows) == n
    for got, key, value, source in zip(rows, keys, values, sources, strict=True):
        layout, after, before, t = source
        if layout == "as_output":
            assert got["value"] == value
        # one text per key, whatever the source's spacing: partitions and compaction use it
        assert got["key"] == key.replace(b" ", b"")
        assert exact(got["key"]) == exact(key)
        assert exact(got["value"]) == {
            "after": exact(after),
            "before": None if layout == "no_before" else exact(before or "null"),
            "updated": t,
        }
