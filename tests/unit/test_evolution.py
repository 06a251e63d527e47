"""Schema changes under ``schema_change_policy``: Connect types as Avro, and the driver's part.

The driver reads the row's source record again (here: handed over), takes the new columns'
types from its Debezium schema and registers the grown schema (here: a publisher that
records what it was given); the batch's rest then runs with the new encoder. Refusals name
why: a source without types, a column no Avro type holds exactly, a row that still does not
fit.
"""

from __future__ import annotations

import base64
import io
import json
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from fastavro import parse_schema, schemaless_reader

from encoders.avro import Framing
from pipeline.config import ChangefeedConfig, parse_config
from pipeline.core.batch.contract import BatchPlan, BatchResult, Deferred, PartitionSeen
from pipeline.core.batch.loop import process as run_task
from pipeline.core.evolution.evolution import SchemaEvolution
from pipeline.core.evolution.rescan import Rescan, rescan_backfill
from pipeline.core.evolution.start import declared_mismatch
from pipeline.core.ledger.backfill import Backfill
from pipeline.core.ledger.frontier import Frontier, Progress, SourcePartition
from pipeline.core.sources.base import SourceShape
from schemas.avro import OutputSchemas
from schemas.connect import NoAvroType, avro_type, column_fields, derived_table
from schemas.errors import ConfigError, RecordRef, SchemaChangeError
from schemas.hlc import ZERO, Hlc
from schemas.tables import TableSchema
from tests.unit.test_sources_debezium import column

pytestmark = pytest.mark.unit

SRC = "dbz.public.orders"
START = {
    "type": "record",
    "name": "orders",
    "fields": [{"name": "id", "type": "int"}, {"name": "note", "type": ["null", "string"]}],
}
DECIMAL = "org.apache.kafka.connect.data.Decimal"


def test_connect_columns_map_to_the_avro_types_that_hold_their_values_exactly() -> None:
    precise = column("amount", "bytes", DECIMAL, scale="4", **{"connect.decimal.precision": "24"})
    cases = {
        "int16": "int",
        "int32": "int",
        "int64": "long",
        "float64": "double",
        "boolean": "boolean",
        "string": "string",
    }
    for kind, expected in cases.items():
        assert avro_type(column("c", kind)) == expected
    assert avro_type(precise) == {
        "type": "bytes",
        "logicalType": "decimal",
        "precision": 24,
        "scale": 4,
    }
    assert avro_type(column("d", "int32", "io.debezium.time.Date")) == {
        "type": "int",
        "logicalType": "date",
    }
    assert avro_type(column("t", "int64", "io.debezium.time.MicroTimestamp")) == {
        "type": "long",
        "logicalType": "timestamp-micros",
    }
    assert avro_type(column("z", "string", "io.debezium.time.ZonedTimestamp")) == "string"
    assert avro_type(column("j", "string", "io.debezium.data.Json")) == "string"


@pytest.mark.parametrize(
    ("col", "why"),
    [
        (column("n", "bytes", DECIMAL, scale="2"), "a decimal without a declared precision"),
        (column("r", "struct", "io.debezium.data.VariableScaleDecimal"), "VariableScaleDecimal"),
        (column("t", "int64", "io.debezium.time.NanoTimestamp"), "NanoTimestamp"),
        (column("m", "int64", "io.debezium.time.MicroTime"), "MicroTime"),
        (column("b", "bytes"), "bytes"),
    ],
)
def test_a_column_no_avro_type_holds_exactly_is_refused_by_name(
    col: dict[str, Any], why: str
) -> None:
    with pytest.raises(NoAvroType, match=f"column '{col['field']}'.*{why}"):
        avro_type(col)


def test_new_columns_come_in_the_source_s_order_and_every_named_one_must_be_described() -> None:
    columns = {c["field"]: c for c in (column("b", "int64"), column("a", "string"))}
    assert column_fields(columns, ["a", "b"]) == [
        {"name": "b", "type": "long"},
        {"name": "a", "type": "string"},
    ]
    with pytest.raises(NoAvroType, match="does not describe column"):
        column_fields(columns, ["a", "zz"])


def test_a_table_schema_grows_by_columns_and_never_takes_one_twice() -> None:
    table = TableSchema.of(START, ["id"])
    grown = table.with_columns([{"name": "vip", "type": "boolean"}])
    assert grown.columns == ("id", "note", "vip")
    assert grown.primary_key == ("id",)
    assert table.columns == ("id", "note")  # the old one unchanged
    with pytest.raises(ValueError, match="note already in table 'orders'"):
        table.with_columns([{"name": "note", "type": "string"}])


# -- the driver's part ------------------------------------------------------------------------


def config(
    fmt: str = "debezium", policy: str | None = "evolve", *, declared: bool = True
) -> ChangefeedConfig:
    source: dict[str, Any] = {"topic": SRC, "table": "orders", "format": fmt}
    if declared:
        source.update({"table_schema": START, "primary_key": ["id"]})
    return parse_config(
        {
            "changefeed_id": "cf",
            "kafka": {"bootstrap_servers": "localhost:1"},
            "sources": [source],
            "initial_scan": "no",
            "encoder": {"format": "avro", "updated": True},
            "schema_change_policy": policy,
        },
        env={},
    )


class Published:
    """A schema topic in memory: each schema's framing is its number among those given."""

    def __init__(self) -> None:
        self.given: list[tuple[str, OutputSchemas, bool]] = []

    def framing(self, topic: str, schemas: OutputSchemas, *, evolved: bool = False) -> Framing:
        self.given.append((topic, schemas, evolved))
        n = len(self.given).to_bytes(2, "big")
        return Framing(b"K" + n, b"V" + n, b"R" + n)

    def version(self, topic: str, framing: Framing) -> str:
        return f"{topic} v{int.from_bytes(framing.value[1:], 'big')}"

    def marker(self, topic: str, schema: dict[str, Any]) -> bytes:
        self.markers = [*getattr(self, "markers", []), schema]
        return b"M00"


def debezium(id_: int, *extra: tuple[dict[str, Any], Any]) -> tuple[bytes, bytes]:
    columns = [column("id", "int32"), column("note", "string"), *(c for c, _ in extra)]
    after = {"id": id_, "note": f"n{id_}", **{c["field"]: v for c, v in extra}}
    schema = {
        "type": "struct",
        "fields": [
            {"field": "before", "type": "struct", "optional": True, "fields": columns},
            {"field": "after", "type": "struct", "optional": True, "fields": columns},
        ],
    }
    lsn = 100 + id_
    source = {
        "connector": "postgresql",
        "ts_us": 1_700_000_000_000_000 + id_,
        "lsn": lsn,
        "sequence": json.dumps(["100", str(lsn)]),
    }
    payload = {"before": None, "after": after, "op": "c", "source": source}
    key = {"schema": {"type": "struct", "fields": [column("id", "int32")]}, "payload": {"id": id_}}
    value = {"schema": schema, "payload": payload}
    return json.dumps(key).encode(), json.dumps(value).encode()


def arrow(records: list[tuple[bytes, bytes]]) -> pa.RecordBatch:
    n = len(records)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([k for k, _ in records], pa.binary()),
            pa.array([v for _, v in records], pa.binary()),
            pa.array([SRC] * n, pa.string()),
            pa.array([0] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
        ],
        names=["key", "value", "topic", "partition", "offset"],
    )


def evolution(
    cfg: ChangefeedConfig, records: list[tuple[bytes, bytes]]
) -> tuple[SchemaEvolution, Published]:
    published = Published()
    read = lambda sp, offset: records[offset]  # noqa: E731 - the source record, by offset
    tables = {s.topic: s.declared_schema for s in cfg.sources}
    return SchemaEvolution(cfg, published, tables, {}, read), published  # type: ignore[arg-type]


def run(plan: BatchPlan, batch: pa.RecordBatch) -> tuple[list[dict[str, Any]], BatchResult]:
    out = pa.Table.from_batches(list(run_task(plan, iter([batch])))).to_pylist()
    summaries = [PartitionSeen.from_json(r["summary"]) for r in out if r["summary"] is not None]
    return [r for r in out if r["summary"] is None], BatchResult.of(summaries)


def vip() -> dict[str, Any]:
    return column("vip", "boolean")


def amount() -> dict[str, Any]:
    return column("amount", "bytes", DECIMAL, scale="2", **{"connect.decimal.precision": "10"})


def test_evolve_grows_the_schema_from_the_source_s_types_and_runs_the_rest_with_it() -> None:
    cfg = config()
    cents = base64.b64encode((12345).to_bytes(3, "big", signed=True)).decode()
    records = [
        debezium(1),
        debezium(2, (vip(), True), (amount(), cents)),
        debezium(3, (vip(), False), (amount(), None)),
    ]
    schemas, published = evolution(cfg, records)
    plan = BatchPlan.of(cfg, schemas.encoders, thresholds={})
    first, result = run(plan, arrow(records))
    assert len(first) == 1  # row 1; row 2 has columns the declared schema lacks
    (rest,) = result.rests
    plan, again, _ = schemas.settle(plan, result.rests)
    assert again == [rest]
    assert [g[2] for g in published.given] == [False, True]  # the grown one: evolved
    grown = published.given[1][1]
    after = grown.value["fields"][0]["type"][1]
    assert [f["name"] for f in after["fields"]] == ["id", "note", "vip", "amount"]
    assert after["fields"][2] == {"name": "vip", "type": ["null", "boolean"], "default": None}
    # the rest runs with the new encoder: rows 2 and 3 in the grown schema, values exact
    rows, rerun = run(plan, arrow(records).slice(rest.start))
    reader = parse_schema(grown.value)
    values = [schemaless_reader(_body(r["value"]), reader, None) for r in rows]
    assert [(v["after"]["vip"], v["after"]["amount"]) for v in values] == [
        (True, Decimal("123.45")),
        (False, None),
    ]
    assert result.with_rests(rerun).schema_change is None
    status = schemas.status()["orders"]
    assert status["added"] == ["vip", "amount"]
    assert status["version"] == "orders v2"  # of the output topic
    assert status["changed_at"] == rest.new_shape


def _body(value: bytes) -> io.BytesIO:
    return io.BytesIO(value[3:])  # after the in-memory framing's 3 bytes


@pytest.mark.parametrize(
    ("cfg", "records", "why"),
    [
        (config(policy="stop"), [debezium(1, (vip(), True))], None),
        (
            config(fmt="native"),
            [(b"[1]", b'{"after": {"id": 1, "vip": true}, "updated": "5.0000000000"}')],
            "the source (format native) carries no column types",
        ),
        (
            config(),
            [debezium(1, (column("t", "int64", "io.debezium.time.NanoTimestamp"), 5))],
            "column 't': no Avro type holds io.debezium.time.NanoTimestamp",
        ),
    ],
)
def test_what_cannot_evolve_stops_and_the_pause_says_why(
    cfg: ChangefeedConfig, records: list[tuple[bytes, bytes]], why: str | None
) -> None:
    schemas, published = evolution(cfg, records)
    plan = BatchPlan.of(cfg, schemas.encoders, thresholds={})
    _, result = run(plan, arrow(records))
    assert len(result.rests) == 1
    assert schemas.settle(plan, result.rests)[1] == []
    assert len(published.given) == 1  # nothing registered
    change = result.schema_change
    assert change is not None
    explained = schemas.explain(change)
    if why is None:
        assert explained is change  # stop: nothing tried
    else:
        assert isinstance(explained, SchemaChangeError)
        assert f"not evolved: {why}" in explained.reason


def test_a_row_that_still_does_not_fit_after_evolving_is_not_run_again_forever() -> None:
    cfg = config()
    schemas, _ = evolution(cfg, [debezium(1, (vip(), True))])
    plan = BatchPlan.of(cfg, schemas.encoders, thresholds={})
    rest = Deferred(SourcePartition(SRC, 0), 0, 1, ZERO, new_shape="5.0000000000")
    assert schemas.settle(plan, [rest])[1] == [rest]  # evolved: it runs again
    assert schemas.settle(plan, [rest])[1] == []  # at the same row again: once only
    assert "does not fit the evolved schema either" in schemas.refused[RecordRef(SRC, 0, 0)]


def test_a_table_without_a_declared_schema_takes_debezium_s_whole_from_its_first_row() -> None:
    """An empty topic at the start: markers go out; the first row evolves the schema."""
    cfg = config(policy=None, declared=False)
    records = [debezium(1, (vip(), True)), debezium(2, (vip(), None))]
    schemas, published = evolution(cfg, records)
    assert schemas.policy(SRC) == "evolve"  # derived: it follows its table
    assert schemas.status()["orders"]["columns"] == []
    marker = schemas.encoders[SRC].resolved(ZERO, None)  # type: ignore[arg-type]
    assert marker.startswith(b"M00")  # the marker's schema alone was made known
    plan = BatchPlan.of(cfg, schemas.encoders, thresholds={})
    first, result = run(plan, arrow(records))
    assert first == []
    plan, again, _ = schemas.settle(plan, result.rests)
    assert len(again) == 1
    table = published.given[-1][1]
    assert table.key["fields"] == [{"name": "id", "type": ["null", "int"]}]
    after = table.value["fields"][0]["type"][1]
    assert [f["name"] for f in after["fields"]] == ["id", "note", "vip"]
    rows, _ = run(plan, arrow(records))
    assert len(rows) == 2
    assert schemas.status()["orders"]["added"] == ["id", "note", "vip"]


def test_a_derived_table_keeps_debezium_s_optionality_and_its_key() -> None:
    columns = {
        "id": {**column("id", "int64"), "optional": False},
        "name": column("name", "string"),
    }
    table = derived_table("customers", columns, ["id"])
    assert table.record["fields"] == [
        {"name": "id", "type": "long"},
        {"name": "name", "type": ["null", "string"]},
    ]
    assert table.primary_key == ("id",)
    with pytest.raises(NoAvroType, match="column 'r'"):
        derived_table(
            "t", {**columns, "r": column("r", "struct", "io.debezium.data.Geometry")}, ["id"]
        )


@pytest.mark.parametrize(
    ("fmt", "policy", "problem"),
    [
        ("native", None, "sources[0].table_schema: is required with encoder.format: avro"),
        ("debezium", "stop", "schema_change_policy: stop needs sources[0].table_schema"),
    ],
)
def test_avro_without_a_declared_schema_needs_a_source_that_types_its_columns(
    fmt: str, policy: str | None, problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        config(fmt, policy, declared=False)


def money(name: str, precision: int, scale: int) -> dict[str, Any]:
    parameters = {"scale": str(scale), "connect.decimal.precision": str(precision)}
    return column(name, "bytes", DECIMAL, **parameters)


def unscaled(value: int) -> str:
    return base64.b64encode(value.to_bytes(8, "big", signed=True)).decode()


@pytest.mark.parametrize("policy", ["stop", "evolve"])
def test_a_numeric_widened_upstream_stops_under_either_policy_naming_both_types(
    policy: str,
) -> None:
    """NUMERIC(10,2) → NUMERIC(12,4): rows that still fit go on; the first that does not stops.

    A decimal's scale is part of its Avro type: no schema holds both, so even ``evolve`` stops,
    saying why. A value that does not fit a type its source did not change is a bad record,
    as ever (``on_error``).
    """
    declared = {
        **START,
        "fields": [
            *START["fields"],
            {
                "name": "amount",
                "type": [
                    "null",
                    {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
                ],
            },
        ],
    }
    source: dict[str, Any] = {
        "topic": SRC,
        "table": "orders",
        "format": "debezium",
        "table_schema": declared,
        "primary_key": ["id"],
    }
    cfg = parse_config(
        {
            "changefeed_id": "cf",
            "kafka": {"bootstrap_servers": "localhost:1"},
            "sources": [source],
            "initial_scan": "no",
            "on_error": "dlq",
            "encoder": {"format": "avro", "updated": True},
            "schema_change_policy": policy,
        },
        env={},
    )
    records = [
        debezium(1, (money("amount", 10, 2), unscaled(12345))),  # 123.45
        debezium(2, (money("amount", 10, 2), unscaled(10**12))),  # 10000000000.00: bad value
        debezium(3, (money("amount", 12, 4), unscaled(12300))),  # 1.2300: still fits
        debezium(4, (money("amount", 12, 4), unscaled(12345))),  # 1.2345: does not
        debezium(5, (money("amount", 12, 4), unscaled(1))),
    ]
    schemas, published = evolution(cfg, records)
    plan = BatchPlan.of(cfg, schemas.encoders, thresholds={})
    rows, result = run(plan, arrow(records))
    assert [r["topic"] for r in rows] == ["orders", cfg.effective_dlq_topic, "orders"]
    change = result.schema_change
    assert change is not None
    assert str(change.record) == f"{SRC}/0@3"
    assert "amount: decimal(12,4) at the source, decimal(10,2) in the output" in change.reason
    assert schemas.settle(plan, result.rests)[1] == []
    assert len(published.given) == 1  # no new schema
    explained = schemas.explain(change).reason
    if policy == "evolve":
        assert "not evolved: a column's type changed" in explained
    else:
        assert explained == change.reason


def test_a_declared_schema_that_differs_from_its_source_s_is_named() -> None:
    declared = TableSchema.of(START, ["id"])
    columns = {c["field"]: c for c in (column("id", "int64"), column("note", "string"), vip())}
    shape = SourceShape(columns, ("id",))
    assert declared_mismatch(2, declared, shape) == (
        "sources[2].table_schema differs from the source's newest schema: column(s) vip not "
        "declared; id: long at the source, int in the output (the declared schema is written; "
        "rows it cannot hold follow schema_change_policy)"
    )
    same = {c["field"]: c for c in (column("id", "int32"), column("note", "string"))}
    assert declared_mismatch(0, declared, SourceShape(same, ("id",))) is None
    assert declared_mismatch(0, declared, None) is None  # an empty topic: nothing to compare


# -- backfill ----------------------------------------------------------------------------------


def test_backfill_evolves_then_names_the_table_to_emit_again_at_the_change() -> None:
    """Once per change, just before its earliest row, with the source's defaults."""
    cfg = config(policy="backfill")
    tier = {**column("tier", "int32"), "default": 5}
    records = [debezium(1), debezium(2, (vip(), True), (tier, 7)), debezium(3, (vip(), None))]
    schemas, _ = evolution(cfg, records)
    assert schemas.policy(SRC) == "backfill"
    plan = BatchPlan.of(cfg, schemas.encoders, thresholds={})
    _, result = run(plan, arrow(records))
    (rest,) = result.rests
    _, again, later = schemas.settle(plan, result.rests)
    assert (again, later) == ([rest], ())  # it evolved, as evolve does
    (rescan,) = schemas.take_rescans()
    assert rescan.change == RecordRef(SRC, 0, 1)
    assert rescan.time.next() == Hlc.parse(rest.new_shape or "")  # just before the row
    assert rescan.defaults == {"tier": 5}  # the column the old rows predate: its default
    assert schemas.take_rescans() == []  # taken once
    # another partition's row of the same change: evolved already, nothing more to emit
    other = Deferred(SourcePartition(SRC, 0), 2, 3, ZERO, new_shape="9.0000000000")
    schemas.settle(plan, [other])
    assert schemas.take_rescans() == []


def test_a_later_change_waits_until_the_rows_before_it_are_written() -> None:
    """Two changes in one batch: the first's scan, then the rows up to the second, then its.

    The table is emitted again at the first with the rests as they stand; the second waits
    for the next round, once the rows between are written.
    """
    cfg = config(policy="backfill")
    tier = {**column("tier", "int32"), "default": 5}
    records = [debezium(1), debezium(2, (tier, 7)), debezium(3, (tier, 8), (vip(), True))]
    schemas, _ = evolution(cfg, records)
    plan = BatchPlan.of(cfg, schemas.encoders, thresholds={})
    first = Deferred(SourcePartition(SRC, 0), 1, 2, ZERO, new_shape="7.0000000000")
    second = Deferred(SourcePartition(SRC, 1), 2, 3, ZERO, new_shape="8.0000000000")
    plan, again, later = schemas.settle(plan, [second, first])
    assert (again, later) == ([first], (second,))
    assert [r.time for r in schemas.take_rescans()] == [Hlc(7, 0).previous()]
    _, again, later = schemas.settle(plan, [second])
    assert (again, later) == ([second], ())
    (rescan,) = schemas.take_rescans()
    assert (rescan.time, rescan.defaults) == (Hlc(8, 0).previous(), {"tier": 5})


def test_a_table_derived_from_nothing_has_no_rows_to_emit_again() -> None:
    cfg = config(policy="backfill", declared=False)
    records = [debezium(1, (vip(), True))]
    schemas, _ = evolution(cfg, records)
    plan = BatchPlan.of(cfg, schemas.encoders, thresholds={})
    _, result = run(plan, arrow(records))
    assert len(schemas.settle(plan, result.rests)[1]) == 1
    assert schemas.take_rescans() == []


def test_a_rescan_left_by_a_killed_run_evolves_a_declared_schema_again_first() -> None:
    cfg = config(policy="backfill")
    tier = {**column("tier", "int32"), "default": 5}
    records = [debezium(1), debezium(2, (tier, 7))]
    schemas, published = evolution(cfg, records)
    rescan = schemas.rescan_at(RecordRef(SRC, 0, 1), Hlc.parse("7.0000000001"))
    assert rescan.defaults == {"tier": 5}
    assert schemas.status()["orders"]["added"] == ["tier"]  # the scan writes the grown schema
    assert len(published.given) == 2


def test_the_rescan_covers_each_partition_of_the_table_up_to_where_the_batch_left_it() -> None:
    """The change's partition to its row, one read to the batch's end, one not to the frontier.

    Another table's partitions are not scanned.
    """
    p0, p1, p2 = (SourcePartition(SRC, p) for p in range(3))
    other = SourcePartition("t2", 0)
    frontier = Frontier.restore(
        {
            p0: Progress(10, ZERO),
            p1: Progress(20, ZERO),
            p2: Progress(30, ZERO),
            other: Progress(5, ZERO),
        }
    )
    stopped = PartitionSeen(p0, 14, None)
    stopped.deferred = [14, 18, str(ZERO), None]
    stopped.schema_change = [14, "new column", "7.0000000001"]
    result = BatchResult.of([stopped, PartitionSeen(p1, 25, None)])
    rescan = Rescan(RecordRef(SRC, 0, 14), Hlc.parse("7.0000000001"), {})
    low = {p0: 0, p1: 3, p2: 0}
    backfill = rescan_backfill(rescan, [p0, p1, p2, other], low, result, frontier)
    assert {sp: (c.start, c.end) for sp, c in backfill.chunks.items()} == {
        p0: (0, 14),
        p1: (3, 25),
        p2: (0, 30),
    }
    assert backfill.time == rescan.time
    # the checkpoint record keeps the change: a killed run finishes the scan first
    record = backfill.to_record()
    assert record["change"] == [SRC, 0, 14]
    assert Backfill.from_record(json.loads(json.dumps(record))) == backfill


def test_backfill_needs_avro_output_and_the_config_says_so() -> None:
    with pytest.raises(ConfigError, match="schema_change_policy: backfill re-emits"):
        parse_config(
            {
                "changefeed_id": "cf",
                "kafka": {"bootstrap_servers": "localhost:1"},
                "sources": [{"topic": SRC, "table": "orders", "format": "debezium"}],
                "initial_scan": "no",
                "schema_change_policy": "backfill",
            },
            env={},
        )


@pytest.mark.parametrize("policy", ["stop", "evolve", "backfill"])
def test_a_first_scan_takes_the_columns_the_source_has_now_under_evolve(policy: str) -> None:
    """The snapshot is the table as it is: its schema grows first, save under ``stop``.

    ``stop``'s scan pauses at the first such row; ``backfill`` gives the scan the defaults.
    """
    cfg = config(policy=policy)
    tier = {**column("tier", "int32"), "default": 5}
    columns = {c["field"]: c for c in (column("id", "int32"), column("note", "string"), tier)}
    published = Published()
    tables = {s.topic: s.declared_schema for s in cfg.sources}
    newest = {SRC: SourceShape(columns, ("id",))}
    schemas = SchemaEvolution(cfg, published, tables, {}, newest=newest)  # type: ignore[arg-type]
    defaults = schemas.before_scan()
    grown = schemas.status()["orders"]["columns"]
    if policy == "stop":
        assert (grown, defaults) == (["id", "note"], {})
    else:
        assert grown == ["id", "note", "tier"]
        assert defaults == ({SRC: {"tier": 5}} if policy == "backfill" else {})


def test_a_key_changed_upstream_cannot_evolve_and_is_named_at_the_start() -> None:
    cfg = config()
    key, value = debezium(1, (vip(), True))
    rekeyed = json.loads(key)
    rekeyed["schema"]["fields"].append(column("note", "string"))
    rekeyed["payload"]["note"] = "n1"
    records = [(json.dumps(rekeyed).encode(), value)]
    schemas, _ = evolution(cfg, records)
    plan = BatchPlan.of(cfg, schemas.encoders, thresholds={})
    _, result = run(plan, arrow(records))
    change = result.schema_change
    assert change is not None  # not a bad record: the table changed
    assert "its key changed (key (id, note) at the source, (id) in the output)" in change.reason
    assert schemas.settle(plan, result.rests)[1] == []
    refused = schemas.refused[RecordRef(SRC, 0, 0)]
    assert "the table's key changed (key (id, note) at the source, (id) in the output)" in refused
    declared = TableSchema.of(START, ["id"])
    columns = {"id": column("id", "int32"), "note": column("note", "string")}
    warning = declared_mismatch(0, declared, SourceShape(columns, ("id", "note")))
    assert warning is not None
    assert "key (id, note) at the source, (id) in the output" in warning
