"""The golden vectors the JVM walk's JUnit tests read: what the Python loop writes.

``tests/golden/walk.json`` holds source records (key and value text) and the bytes the
Python loop (``process``, as the executors run it) writes for them; the JUnit tests of
``pipeline/jvm/walk`` (``GoldenTest``) assert the Java encodings write the very same bytes
for the same plan spec (``walk``, asserted here to be what the Python encoders give the JVM).
So the two sides are held to one file: if either changes what it writes, its test fails.

``python -m tests.unit.test_walk_golden`` writes the file again from the Python side (then
run the JUnit tests: ``highwater dev jvm-test``).
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from encoders.avro import AvroEncoder, Framing
from encoders.base import Encoder
from encoders.json import JsonEncoder
from pipeline.config import EncoderConfig
from pipeline.core.sources import Marker
from pipeline.core.sources.base import Change
from pipeline.core.sources.debezium import DebeziumAdapter
from schemas.avro import OutputSchemas
from schemas.hlc import Hlc
from schemas.tables import TableSchema
from tests.support.debezium_json import column, envelope_schema
from tests.support.tables import CANAL_TABLE, WIDE, primitive_table

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "walk.json"
T = "1700000000000000001.0000000000"
TABLE = WIDE


def avro_encoders() -> dict[str, AvroEncoder]:
    """Every envelope member the walk writes, in both framings."""
    every = EncoderConfig(
        format="avro",
        updated=True,
        diff=True,
        mvcc_timestamp=True,
        key_in_value=True,
        topic_in_value=True,
    )
    key_only = EncoderConfig(format="avro", envelope="key_only")
    plain = EncoderConfig(format="avro")
    schemas = OutputSchemas.of(TABLE, key_only)
    return {
        "every_member_confluent": AvroEncoder(
            OutputSchemas.of(TABLE, every), Framing.confluent(1, 2, 3), every, "wide"
        ),
        "after_only_confluent": AvroEncoder(
            OutputSchemas.of(TABLE, plain), Framing.confluent(7, 8, 9), plain, "wide"
        ),
        "key_only_single_object": AvroEncoder(
            schemas, Framing.single_object(schemas), key_only, "wide"
        ),
    }


def verbatim_encoder() -> JsonEncoder:
    return JsonEncoder(EncoderConfig(diff=True, updated=True))


def _value(after: str, before: str = "null", updated: str = T) -> str:
    return f'{{"after":{after},"before":{before},"updated":"{updated}"}}'


# Source records the walk takes: (key, value) text. Each goes through the Python loop alone.
AVRO_RECORDS = [
    ('[1,"a"]', _value('{"p":1,"k":"a","s":"plain","l":42,"i":-7,"d":1.5,"f":2.5,"b":true}')),
    # every JSON escape the walk reads (surrogates, escaped, it leaves to the Python loop)
    ('[2,"b"]', _value(r'{"s":"q\"b\\s\/ \b\f\n\r\t"}')),
    ('[3,"c"]', _value(r'{"s":"\u0000\u001f\u007f\u00e9\u00E9\u0800\uffff\u2028\u2029\u20ac"}')),
    # UTF-8 as it came: two, three and four bytes (a surrogate pair's character), U+2028/9
    ('[4,"d"]', _value('{"s":"é€😀\u2028\u2029 raw"}')),
    # numbers of every form, into every numeric type
    ('[5,"e"]', _value('{"l":0,"i":0,"d":0,"f":0}')),
    ('[6,"f"]', _value('{"l":-0,"i":-0,"d":-0,"f":-0}')),
    ('[7,"g"]', _value('{"l":999999999999999999,"i":2147483647,"d":-0.0,"f":-0.0}')),
    ('[8,"h"]', _value('{"l":-999999999999999999,"i":-2147483648,"d":0.1,"f":0.1}')),
    ('[9,"i"]', _value('{"d":1e-7,"f":1E+2}')),
    ('[10,"j"]', _value('{"d":5e-324,"f":1.4e-45}')),
    ('[11,"k"]', _value('{"d":1.7976931348623157e308,"f":3.4028234e38}')),
    ('[12,"l"]', _value('{"d":123456789012345678901234567890,"f":16777217}')),
    ('[13,"m"]', _value('{"d":3.141592653589793238462643383279502884197,"f":2.718281828459045}')),
    ('[14,"n"]', _value('{"d":1e309,"f":-1e400}')),  # infinite, as Python's float(text)
    ('[15,"o"]', _value('{"d":999999999999999999,"f":123456789}')),
    ('[16,"p"]', _value('{"b":false,"s":null,"l":null}')),
    # a delete, missing columns, other members ignored, members in any order and spacing
    ('[17,"q"]', _value("null", '{"p":17,"k":"q","s":"gone"}')),
    ('[18,"r"]', '{ "source" : {"x":[1,2.5e3,"y"]}, "updated" : "' + T + '", "after" : {} }'),
    ('[ 19 , "s" ]', _value('{"i":1,"l":2}')),
    # keys: escaped strings, a negative number
    ('[-20,"k\\"\\u00e9\\\\"]', _value('{"p":-20}')),
    # times as the changefeed writes them, small and large
    ('[21,"t"]', _value("{}", updated="0.0000000001")),
    ('[22,"u"]', _value("{}", updated="8999999999999999999.9999999999")),
]

# Values the walk passes on as they came (wrapped, after/before/updated): the Python loop
# must write exactly these bytes too.
VERBATIM_RECORDS = [
    ('[1,"a",true,false,null,0,-5,123456789012345678]', _value('{"a":1}')),
    ("[2]", _value(r'{"s":"q\"b\\s\/\b\f\n\r\t\u0000\u00e9\u2028\u2029"}', '{"x":null}')),
    ("[3]", _value('{"s":"é€😀\u2028 raw","t":[true,false,null,{}]}')),
    ("[4]", _value('{"n":[0,-0,1.0,-1.5e-3,1E+400,123456789012345678901234567890,0.1e1]}')),
    ("[5]", '{ "after" : null ,\n "before" : {"a":1} , "updated" : "' + T + '" }'),
    ('["k"]', _value('{"deep":[[[[{"a":[{"b":{}}]}]]]]}', updated="1.0000000042")),
]

# Debezium PostgreSQL events (JsonConverter) the walk writes again as the JSON encoder's
# envelope: every semantic type, escapes, numbers of every form, snapshot reads, deletes,
# with and without schemas. (key, value) text.
_DBZ_COLUMNS = [
    ("id", "int32", None, None),
    ("s", "string", None, None),
    ("n", "double", None, None),
    ("dec", "bytes", "org.apache.kafka.connect.data.Decimal", {"scale": "4"}),
    ("big", "bytes", "org.apache.kafka.connect.data.Decimal", {"scale": "0"}),
    ("neg", "bytes", "org.apache.kafka.connect.data.Decimal", {"scale": "-2"}),
    ("v", "struct", "io.debezium.data.VariableScaleDecimal", None),
    ("day", "int32", "io.debezium.time.Date", None),
    ("ms", "int64", "io.debezium.time.Timestamp", None),
    ("us", "int64", "io.debezium.time.MicroTimestamp", None),
    ("ns", "int64", "io.debezium.time.NanoTimestamp", None),
    ("t", "int64", "io.debezium.time.MicroTime", None),
    ("z", "string", "io.debezium.time.ZonedTimestamp", None),
    ("j", "string", "io.debezium.data.Json", None),
    ("g", "struct", "io.debezium.data.geometry.Point", None),
]


def _dbz_schema() -> str:
    row = []
    for name, kind, semantic, parameters in _DBZ_COLUMNS:
        row.append(column(name, kind, semantic, **(parameters or {})) | {"optional": name != "id"})
    return json.dumps(envelope_schema(row, "pg.public.t.Envelope"))


_NULLS = {name: "null" for name, *_ in _DBZ_COLUMNS}
_LSNS = itertools.count(24023984, 7)  # each event's place: rising, as a connector sends them


def _dbz_row(**values: str) -> str:
    return "{" + ",".join(f'"{k}":{v}' for k, v in {**_NULLS, **values}.items()) + "}"


def _dbz(
    key: int,
    after: str | None,
    before: str | None = None,
    *,
    op: str = "c",
    lsn: int | None = None,
    last: str = '\\"24023900\\"',
    clock: str = '"ts_ms":1700000000123,"ts_us":1700000000123456',
    tx: str = '{"id":"771:24023984","total_order":1,"data_collection_order":1}',
    snapshot: str = '"false"',
    schema: bool = True,
) -> tuple[str, str]:
    lsn = next(_LSNS) if lsn is None else lsn
    source = (
        f'{{"version":"2.7.3.Final","connector":"postgresql","name":"pg",{clock},'
        f'"snapshot":{snapshot},"db":"shop","sequence":"[{last},\\"{lsn}\\"]",'
        f'"schema":"public","table":"t","txId":771,"lsn":{lsn},"xmin":null}}'
    )
    payload = (
        f'{{"before":{before or "null"},"after":{after or "null"},"source":{source},'
        f'"transaction":{tx},"op":"{op}","ts_ms":1700000000200}}'
    )
    key_payload = f'{{"id":{key}}}'
    if not schema:
        return key_payload, payload
    key_schema = '{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}]}'
    return (
        f'{{"schema":{key_schema},"payload":{key_payload}}}',
        f'{{"schema":{_dbz_schema()},"payload":{payload}}}',
    )


DEBEZIUM_RECORDS = [
    # nanoseconds; no last commit yet (the stream's first transaction, below its commit
    # 24023900 that the events after it name: placed above, they would be re-sends)
    _dbz(17, _dbz_row(id="17"), clock='"ts_ns":1700000000123456789', last="null", lsn=24023884),
    _dbz(
        1, _dbz_row(id="1", s='"plain"', n="1.5", dec='"AeJA"', day="19675", us="1700000000123456")
    ),
    # every JSON escape, spelled as Jackson and others spell them, and raw UTF-8
    _dbz(
        2, _dbz_row(id="2", s=r'"q\"b\\s\/ \b\f\n\r\t\u0000\u001F\u007f\u00E9"', z='"é€😀\u2028"')
    ),
    # numbers of every form pass as they came
    _dbz(
        3,
        _dbz_row(id="3", n="-0"),
    ),
    _dbz(
        4,
        _dbz_row(id="4", n="1E+400"),
    ),
    _dbz(
        5,
        _dbz_row(id="5", n="123456789012345678901234567890.50"),
    ),
    # decimals: negative, zero, many digits, scales 0 and negative, variable scale
    _dbz(
        6,
        _dbz_row(id="6", dec='"/w=="', big='"AA=="', neg='"Bw=="', v='{"scale":3,"value":"/zs="}'),
    ),
    _dbz(7, _dbz_row(id="7", big='"f////////////////////w=="', v='{"scale":0,"value":"AQ=="}')),
    # dates and times before the epoch, at its edges, with and without fractions
    _dbz(8, _dbz_row(id="8", day="-719162", ms="-1", us="0", ns="1700000000123456789", t="0")),
    _dbz(9, _dbz_row(id="9", day="2932896", ms="253402300799999", t="86399999999")),
    _dbz(10, _dbz_row(id="10", us="-62135596800000000", ns="5", t="3600000001")),
    # JSON text, a struct column (PostGIS point), nested values
    _dbz(
        11,
        _dbz_row(
            id="11", j='"{\\"a\\": [1, 2.50]}"', g='{"x":1.0,"y":-2.5e3,"wkb":"AQE=","srid":null}'
        ),
    ),
    # an update with its before image, a delete, a snapshot read, a snapshot flag
    _dbz(12, _dbz_row(id="12", s='"new"'), _dbz_row(id="12", s='"old"'), op="u"),
    _dbz(13, None, _dbz_row(id="13"), op="d"),
    _dbz(14, _dbz_row(id="14"), op="r", snapshot='"true"', tx="null"),
    _dbz(15, _dbz_row(id="15"), snapshot='"last"', tx="null"),
    # the clock in milliseconds
    _dbz(16, _dbz_row(id="16"), clock='"ts_ms":1700000000999,"ts_us":null'),
    # without schemas: the payload as it came, spacing dropped
    _dbz(19, '{ "id" : 19, "dec" : "AeJA", "s" : "\\u00e9" }', schema=False),
    _dbz(20, '{"id":20,"n":[1,{"a":null}]}', op="u", schema=False),
    # the last commit's LSN as a number (above every other here: so, last)
    _dbz(18, _dbz_row(id="18"), last="24024500", tx="null"),
]

# TiCDC Canal-JSON events the walk writes again, a record per row: several rows, updates with
# their old values (some columns, others), deletes, numbers of every form as TiCDC's text,
# types by the word they start with, escapes; a watermark and a DDL event (no rows).
_CANAL_TYPES = {
    "id": "bigint",
    "amount": "decimal(30,10)",
    "u": "BIGINT(20) UNSIGNED",
    "f": "double",
    "b": "bit(1)",
    "note": "text",
    "word": "intx",
    "at": "datetime(6)",
}


def _canal(kind: str, commit: int, data: str, old: str = "null", pk: str = '["id"]') -> str:
    return (
        f'{{"id":0,"database":"shop","table":"t","pkNames":{pk},"isDdl":false,"type":"{kind}",'
        f'"es":1700000000000,"ts":1700000000002,"sql":"","sqlType":{{"id":-5}},'
        f'"mysqlType":{json.dumps(_CANAL_TYPES)},"data":{data},"old":{old},'
        f'"_tidb":{{"commitTs":{commit}}}}}'
    )


_TSO = 1700000000000 << 18
CANAL_RECORDS = [
    _canal("INSERT", _TSO + 1, '[{"id":"1","amount":"12.3400000000","note":"a"}]'),
    _canal(
        "INSERT",
        _TSO + 2,
        '[{"id":"2","u":"18446744073709551615","f":"-0"},{"id":"3","f":"1E+400","b":"1"}]',
    ),
    _canal(
        "UPDATE",
        _TSO + 3,
        '[{"id":"1","amount":"1e-7","note":"q\\"b\\\\ \\u00e9é😀"},{"id":"2","word":"5"}]',
        '[{"amount":"12.3400000000"},{"word":"4","extra":null}]',
    ),
    _canal("DELETE", _TSO + 4, '[{"id":"3","at":"2025-11-24 16:00:00.123456","note":null}]'),
    _canal("INSERT", _TSO + 5, '[{"id":"4","note":"k"}]', pk='["id","note"]'),
    f'{{"type":"TIDB_WATERMARK","_tidb":{{"watermarkTs":{_TSO + 5}}}}}',
    '{"type":"CREATE","isDdl":true,"_tidb":{"commitTs":1}}',
]

# Debezium's and Canal-JSON's changes to Avro output: the tables (primitive columns, so the
# walk writes them), the encoders (every member, after only, key only; both framings), and
# more Canal events: several rows of text with any characters and NULLs, a delete of several.
DEBEZIUM_TABLE = primitive_table(
    "t",
    ["id"],
    {
        "s": "string",
        "n": "double",
        "dec": "double",
        "big": "long",  # 2**127 - 1 (event 7): a misfit
        "neg": "double",
        "v": "double",
        **dict.fromkeys(("day", "ms", "us", "ns", "t", "z", "j", "g"), "string"),  # g: a misfit
    },
)
CANAL_AVRO_RECORDS = [
    *CANAL_RECORDS,
    _canal(
        "INSERT",
        _TSO + 6,
        '[{"id":"5","note":"\\u0000 \\" é€😀\\t\\n","f":"-1.5e-3"},'
        '{"id":"6","note":null,"amount":null,"u":"9223372036854775807","b":"1"},'
        '{"id":"7","note":"","at":"0000-00-00 00:00:00","b":"0"}]',
    ),
    _canal("DELETE", _TSO + 7, '[{"id":"5","note":"x"},{"id":"6","note":null}]'),
]


def avro_out_encoders(table: TableSchema) -> dict[str, AvroEncoder]:
    """Avro output of ``table`` with every member, after only and key only, both framings."""
    every = EncoderConfig(
        format="avro",
        updated=True,
        diff=True,
        mvcc_timestamp=True,
        key_in_value=True,
        topic_in_value=True,
    )
    plain = EncoderConfig(format="avro")
    key_only = EncoderConfig(format="avro", envelope="key_only")
    single = OutputSchemas.of(table, plain)
    return {
        "every_member_confluent": AvroEncoder(
            OutputSchemas.of(table, every), Framing.confluent(1, 2, 3), every, "t"
        ),
        "after_only_single_object": AvroEncoder(single, Framing.single_object(single), plain, "t"),
        "key_only_confluent": AvroEncoder(
            OutputSchemas.of(table, key_only), Framing.confluent(4, 5, 6), key_only, "t"
        ),
    }


def _hex(rows: list[Any]) -> list[list[str | None]]:
    return [[r["key"].hex(), None if r["value"] is None else r["value"].hex()] for r in rows]


def debezium_avro_golden() -> list[dict[str, Any]]:
    """Debezium's events to Avro: each one's records (alone through the loop), or not taken.

    ``loop_only``: the walk leaves it to the Python loop (a snapshot's read, which the loop
    times; a value that does not fit the table: the loop names it).
    """
    adapter = DebeziumAdapter()
    out = []
    for name, encoder in avro_out_encoders(DEBEZIUM_TABLE).items():
        records = []
        for key, value in DEBEZIUM_RECORDS:
            rows = through_python_loop(encoder, [(key, value)], "debezium")
            snapshot = adapter.decode(key.encode(), value.encode()).point is not None
            records.append(
                {"key": key, "value": value, "rows": _hex(rows), "loop_only": snapshot or not rows}
            )
        out.append({"name": name, "topic": "out", "walk": encoder.walk, "records": records})
    return out


def canal_avro_golden() -> list[dict[str, Any]]:
    """Canal-JSON's events to Avro: each one's rows, or not taken (``loop_only``).

    The walk takes an event whole or not at all: an event of which the loop does not write
    every row (a misfit, a schema change) is the loop's.
    """
    from pipeline.core.sources.canal import CanalJsonAdapter  # noqa: PLC0415

    out = []
    for name, encoder in avro_out_encoders(CANAL_TABLE).items():
        records = []
        for value in CANAL_AVRO_RECORDS:
            rows = through_python_loop(encoder, [("", value)], "canal-json")
            item = CanalJsonAdapter().decode(None, value.encode())
            changes = 0 if item is None or isinstance(item, Marker) else len(item)
            changes = 1 if isinstance(item, Change) else changes  # one row's event
            records.append(
                {
                    "value": value,
                    "rows": _hex(rows),
                    "marker": str(item.resolved) if isinstance(item, Marker) else None,
                    "loop_only": len(rows) != changes,
                }
            )
        out.append({"name": name, "topic": "out", "walk": encoder.walk, "records": records})
    return out


# HLC texts as the changefeed writes them: wall and logical.
HLC_TEXTS = [
    "0.0000000000",
    "1.0000000000",
    "1700000000000000001.0000000042",
    "8999999999999999999.9999999999",
    "1699999999999999999.0000000001",
]


def through_python_loop(
    encoder: Encoder, records: list[tuple[str, str]], fmt: str = "native"
) -> list[Any]:
    """What ``process`` writes for ``records`` (one source partition of ``fmt``, in order)."""
    from pipeline.core.batch.contract import BatchPlan  # noqa: PLC0415
    from pipeline.core.batch.loop import process  # noqa: PLC0415

    n = len(records)
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([k.encode() for k, _ in records], pa.binary()),
            pa.array([v.encode() for _, v in records], pa.binary()),
            pa.array(["src"] * n, pa.string()),
            pa.array([0] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
        ],
        names=["key", "value", "topic", "partition", "offset"],
    )
    plan = BatchPlan({}, {"src": "wide"}, {"src": fmt}, {"src": "out"}, {"src": encoder}, None)
    out = pa.Table.from_batches(list(process(plan, iter([batch])))).to_pylist()
    return [r for r in out if r["summary"] is None]


def python_golden() -> dict[str, Any]:
    """The golden file's content, from the Python side."""
    avro = []
    for name, encoder in avro_encoders().items():
        rows = through_python_loop(encoder, AVRO_RECORDS)
        assert [r["topic"] for r in rows] == ["out"] * len(AVRO_RECORDS), name
        avro.append(
            {
                "name": name,
                "topic": "out",
                "walk": encoder.walk,
                "records": [
                    {
                        "key": key,
                        "value": value,
                        "out_key": row["key"].hex(),
                        "out_value": None if row["value"] is None else row["value"].hex(),
                    }
                    for (key, value), row in zip(AVRO_RECORDS, rows, strict=True)
                ],
            }
        )
    hlc = [
        {"text": t, "wall": Hlc.parse(t).wall, "logical": Hlc.parse(t).logical} for t in HLC_TEXTS
    ]
    return {
        "about": "Written by tests/unit/test_walk_golden.py from the Python loop; read by the "
        "JUnit tests of pipeline/jvm/walk (GoldenTest) and by that module's pytest tests.",
        "hlc": hlc,
        "verbatim": {
            "walk": verbatim_encoder().walk,
            "records": [{"key": k, "value": v} for k, v in VERBATIM_RECORDS],
        },
        "avro": avro,
        "debezium": debezium_golden(),
        "canal": canal_golden(),
        "debezium_avro": debezium_avro_golden(),
        "canal_avro": canal_avro_golden(),
    }


def canal_golden() -> dict[str, Any]:
    """Canal-JSON events and what the Python loop writes of them: rows, or a marker."""
    from pipeline.core.sources.canal import CanalJsonAdapter  # noqa: PLC0415

    encoder = verbatim_encoder()
    records = []
    for value in CANAL_RECORDS:
        rows = through_python_loop(encoder, [("", value)], "canal-json")
        item = CanalJsonAdapter().decode(None, value.encode())
        records.append(
            {
                "value": value,
                "rows": [[r["key"].decode(), r["value"].decode()] for r in rows],
                "marker": str(item.resolved) if isinstance(item, Marker) else None,
            }
        )
    return {"walk": encoder.walk, "records": records}


def debezium_golden() -> dict[str, Any]:
    """Debezium's events and what the Python loop writes of them (key, value, time)."""
    encoder = verbatim_encoder()
    rows = through_python_loop(encoder, DEBEZIUM_RECORDS, "debezium")
    assert [r["topic"] for r in rows] == ["out"] * len(DEBEZIUM_RECORDS)
    adapter = DebeziumAdapter()
    return {
        "walk": encoder.walk,
        "records": [
            {
                "key": key,
                "value": value,
                "out_key": row["key"].decode(),
                "out_value": row["value"].decode(),
                # a snapshot's read, which the Python loop times (debezium.py's snapshot_read)
                "loop_only": adapter.decode(key.encode(), value.encode()).point is not None,
            }
            for (key, value), row in zip(DEBEZIUM_RECORDS, rows, strict=True)
        ],
    }


def golden() -> dict[str, Any]:
    return dict(json.loads(GOLDEN.read_text(encoding="utf-8")))


def test_the_python_loop_writes_the_golden_avro_bytes() -> None:
    expected = {a["name"]: a for a in golden()["avro"]}
    for name, encoder in avro_encoders().items():
        rows = through_python_loop(encoder, AVRO_RECORDS)
        records = expected[name]["records"]
        assert [(r["key"], r["value"]) for r in records] == AVRO_RECORDS
        for row, record in zip(rows, records, strict=True):
            assert row["topic"] == "out"
            assert row["key"].hex() == record["out_key"], record["key"]
            value = None if row["value"] is None else row["value"].hex()
            assert value == record["out_value"], record["value"]


def test_the_python_loop_writes_the_golden_canal_rows() -> None:
    assert canal_golden() == golden()["canal"]


def test_the_python_loop_writes_the_golden_debezium_envelopes() -> None:
    assert debezium_golden() == golden()["debezium"]


def test_the_python_loop_writes_the_golden_debezium_avro_records() -> None:
    assert debezium_avro_golden() == golden()["debezium_avro"]


def test_the_python_loop_writes_the_golden_canal_avro_rows() -> None:
    assert canal_avro_golden() == golden()["canal_avro"]


def test_the_walk_specs_are_what_the_python_encoders_give_the_jvm() -> None:
    expected = {a["name"]: a["walk"] for a in golden()["avro"]}
    assert expected == {name: e.walk for name, e in avro_encoders().items()}
    assert golden()["verbatim"]["walk"] == verbatim_encoder().walk


def test_verbatim_records_come_out_as_they_came() -> None:
    records = [(r["key"], r["value"]) for r in golden()["verbatim"]["records"]]
    assert records == VERBATIM_RECORDS
    rows = through_python_loop(verbatim_encoder(), records)
    assert [(r["key"].decode(), r["value"].decode()) for r in rows] == records


def test_hlc_texts_are_python_times_written_back() -> None:
    for vector in golden()["hlc"]:
        ts = Hlc(vector["wall"], vector["logical"])
        assert Hlc.parse(vector["text"]) == ts
        assert str(ts) == vector["text"]


@pytest.mark.parametrize(
    "logical",
    [
        {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        {"type": "int", "logicalType": "date"},
        {"type": "long", "logicalType": "timestamp-micros"},
        {"type": "long", "logicalType": "timestamp-millis"},
        {"type": "string", "logicalType": "uuid"},
        {"type": "int", "logicalType": "time-millis"},
    ],
    ids=lambda t: t["logicalType"],
)
def test_logical_types_are_left_to_the_python_loop(logical: dict[str, Any]) -> None:
    """The walk writes primitive types only (its JUnit tests: the Java refuses the rest)."""
    record = {**TABLE.record, "fields": [*TABLE.record["fields"], {"name": "x", "type": logical}]}
    options = EncoderConfig(format="avro", updated=True)
    schemas = OutputSchemas.of(TableSchema.of(record, ["p", "k"]), options)
    assert AvroEncoder(schemas, Framing.confluent(1, 2, 3), options, "wide").walk is None


if __name__ == "__main__":
    GOLDEN.parent.mkdir(exist_ok=True)
    text = json.dumps(python_golden(), indent=1, ensure_ascii=False)
    GOLDEN.write_text(text + "\n", encoding="utf-8")
    print(f"wrote {GOLDEN}", file=sys.stderr)
