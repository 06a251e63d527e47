"""The Iceberg applier's parts: the schema mapping, the values, the cut, on a local catalog.

Every column kind a changefeed writes maps to the Iceberg type that holds it exactly (or is
refused by name); a value its column cannot hold is refused, never rounded. The cut logic is
checked pure (histories in, a cut out) and, with hand-made windows, on each catalog kind the
applier is tested on (``iceberg_catalog``: the embedded SQLite one in tmp_path, and Apache
Iceberg's own REST catalog server, whose variants are integration tests): updates, deletes, a
key changed, empty windows, a crash between two tables' commits and the resume after it; a
window applied twice is what the exactly-once check finds (its negative control).
"""

from __future__ import annotations

import datetime
import json
import re
from decimal import Decimal
from typing import Any

import pytest
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
    TimestamptzType,
    TimeType,
)

from highwater_consumer.decoding import JsonDecoder
from highwater_consumer.iceberg import (
    Cut,
    CutError,
    IcebergApplier,
    NoIcebergType,
    UnwritableRecord,
    complete,
    cut,
    iceberg_schema,
    load,
    writes,
)
from highwater_consumer.iceberg.catalog import default_group
from highwater_consumer.iceberg.columns import Unwritable, columns
from highwater_consumer.iceberg.compaction import sizes
from highwater_consumer.windows import Row, Window
from schemas.hlc import Hlc
from schemas.jsontext import Number, loads_exact
from schemas.tables import TableSchema
from tests.support.iceberg import exactly_once_problems

UTC = datetime.timezone.utc


def decimal(precision: int, scale: int) -> dict[str, Any]:
    return {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}


WIDE = TableSchema.of(
    {
        "type": "record",
        "name": "wide",
        "fields": [
            {"name": "region", "type": "string"},
            {"name": "id", "type": "long"},
            {"name": "small", "type": ["null", "int"]},
            {"name": "amount", "type": ["null", decimal(38, 18)]},
            {"name": "price", "type": ["null", decimal(10, 2)]},
            {"name": "ratio", "type": ["null", "double"]},
            {"name": "single", "type": ["null", "float"]},
            {"name": "note", "type": ["null", "string"]},
            {"name": "flag", "type": ["null", "boolean"]},
            {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}]},
            {"name": "at", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
            {
                "name": "at_ms",
                "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}],
            },
            {
                "name": "local",
                "type": ["null", {"type": "long", "logicalType": "local-timestamp-micros"}],
            },
            {"name": "clock", "type": ["null", {"type": "long", "logicalType": "time-micros"}]},
            {"name": "meta", "type": ["null", "string"]},
            {"name": "nested", "type": ["null", {"type": "map", "values": "long"}]},
            {"name": "raw", "type": ["null", "bytes"]},
        ],
    },
    ["region", "id"],
)


def test_every_column_kind_maps_to_the_iceberg_type_that_holds_it() -> None:
    schema = iceberg_schema(WIDE)
    kinds = {f.name: f.field_type for f in schema.fields}
    assert kinds == {
        "region": StringType(),
        "id": LongType(),
        "small": IntegerType(),
        "amount": DecimalType(38, 18),
        "price": DecimalType(10, 2),
        "ratio": DoubleType(),
        "single": FloatType(),
        "note": StringType(),
        "flag": BooleanType(),
        "day": DateType(),
        "at": TimestamptzType(),
        "at_ms": TimestamptzType(),
        "local": TimestampType(),
        "clock": TimeType(),
        "meta": StringType(),
        "nested": StringType(),
        "raw": BinaryType(),
    }
    assert schema.identifier_field_names() == {"region", "id"}
    required = {f.name for f in schema.fields if f.required}
    assert required == {"region", "id"}  # the key; every other column may be null


@pytest.mark.parametrize(
    ("avro", "reason"),
    [
        (decimal(39, 2), "wider than Iceberg's decimal(38, s)"),
        (["null", "long", "string"], "has no one Iceberg type"),
        ("null", "no Iceberg type for Avro type 'null'"),
    ],
)
def test_a_column_no_iceberg_type_holds_is_refused_by_name(avro: Any, reason: str) -> None:
    table = TableSchema.of(
        {
            "type": "record",
            "name": "t",
            "fields": [{"name": "id", "type": "long"}, {"name": "odd", "type": avro}],
        },
        ["id"],
    )
    with pytest.raises(NoIcebergType, match=f"column 'odd': .*{re.escape(reason)}"):
        columns(table)


def convert(column: str, value: Any) -> Any:
    found = {c.name: c.convert for c in columns(WIDE)}
    return found[column](value)


def exact(text: str) -> Any:
    """A JSON value as the consumer reads it (numbers exact)."""
    return loads_exact(text.encode())


@pytest.mark.parametrize(
    ("column", "given", "held"),
    [
        ("id", 9_223_372_036_854_775_807, 9_223_372_036_854_775_807),
        ("id", Number("-0"), 0),
        ("small", -2_147_483_648, -2_147_483_648),
        ("amount", exact("12345678901234567.89"), Decimal("12345678901234567.890000000000000000")),
        ("amount", exact("1E+2"), Decimal(100)),
        ("amount", exact("-2.50e-3"), Decimal("-0.0025")),
        ("amount", exact("18446744073709551617"), Decimal(18446744073709551617)),
        ("amount", "0.000000000000000001", Decimal("1E-18")),
        ("price", exact("1.10"), Decimal("1.10")),
        ("price", 1.5, Decimal("1.50")),
        ("ratio", exact("3.14159265358979323846"), 3.141592653589793),
        ("ratio", 7, 7.0),
        ("note", 'tab\there "quoted" \\ 😀 東京 \u0000', 'tab\there "quoted" \\ 😀 東京 \u0000'),
        ("note", "", ""),
        ("flag", False, False),
        ("day", "2024-02-29", datetime.date(2024, 2, 29)),
        ("day", 19_782, datetime.date(2024, 2, 29)),
        ("day", datetime.date(2024, 2, 29), datetime.date(2024, 2, 29)),
        (
            "at",
            "2024-02-29T23:59:59.123456+05:30",
            datetime.datetime(2024, 2, 29, 18, 29, 59, 123456, tzinfo=UTC),
        ),
        ("at", "2024-01-01T00:00:00Z", datetime.datetime(2024, 1, 1, tzinfo=UTC)),
        ("at", 1_000_001, datetime.datetime(1970, 1, 1, 0, 0, 1, 1, tzinfo=UTC)),
        ("at_ms", 1_001, datetime.datetime(1970, 1, 1, 0, 0, 1, 1000, tzinfo=UTC)),
        (
            "at",
            datetime.datetime(2024, 1, 1, 2, tzinfo=datetime.timezone(datetime.timedelta(hours=2))),
            datetime.datetime(2024, 1, 1, tzinfo=UTC),
        ),
        ("local", "2024-01-01T08:00:00", datetime.datetime(2024, 1, 1, 8)),  # noqa: DTZ001
        ("clock", 3_723_000_004, datetime.time(1, 2, 3, 4)),
        ("meta", exact('{"tags":["a",1.10],"deep":{"x":null,"y":[[1E+2]]}}'), None),
        (
            "nested",
            {"b": 1, "a": Number("18446744073709551617")},
            '{"b":1,"a":18446744073709551617}',
        ),
        ("raw", b"\x00\xff", b"\x00\xff"),
    ],
)
def test_a_value_becomes_what_its_column_holds_exactly(column: str, given: Any, held: Any) -> None:
    if held is None:  # JSON as text: its text as written, numbers and all
        held = '{"tags":["a",1.10],"deep":{"x":null,"y":[[1E+2]]}}'
    found = convert(column, given)
    assert found == held
    assert type(found) is type(held)
    if isinstance(held, datetime.datetime) and held.tzinfo is not None:
        assert found.utcoffset() == datetime.timedelta(0)


@pytest.mark.parametrize(
    ("column", "given", "reason"),
    [
        ("id", Number("18446744073709551617"), "does not fit a 64-bit integer"),
        ("small", 2_147_483_648, "does not fit a 32-bit integer"),
        ("id", Number("1.5"), "is not an integer"),
        ("id", True, "is not an integer"),
        ("amount", exact("3.14159265358979323846"), "does not fit decimal\\(38,18\\)"),
        ("price", exact("123456789.5"), "does not fit decimal\\(10,2\\)"),
        ("price", "abc", "is not a decimal"),
        ("ratio", "1.5", "is not a number"),
        ("note", 42, "is not text"),
        ("note", "lone \ud800 surrogate", "is not Unicode text"),
        ("flag", 1, "is not a boolean"),
        ("day", "29/02/2024", "is not a date"),
        ("at", "2024-01-01T00:00:00", "an instant without its zone"),
        ("at", "2024-01-01T00:00:00.1234567Z", "finer than a microsecond"),
        ("local", "2024-01-01T00:00:00+01:00", "has a zone"),
        ("raw", "text", "is not bytes"),
    ],
)
def test_a_value_its_column_cannot_hold_is_refused(column: str, given: Any, reason: str) -> None:
    with pytest.raises(Unwritable, match=reason):
        convert(column, given)


# --- the cut, pure ---


def hlc(wall: int) -> Hlc:
    return Hlc(wall)


def test_the_latest_complete_cut_is_the_highest_r_every_table_holds() -> None:
    # b died between two tables' commits of R 30: a holds it, b does not yet
    histories = {"a": {hlc(10): 1, hlc(20): 2, hlc(30): 3}, "b": {hlc(10): 11, hlc(20): 12}}
    assert complete("ns", histories) == Cut("ns", hlc(20), {"a": 2, "b": 12})
    assert complete("ns", histories, hlc(10)) == Cut("ns", hlc(10), {"a": 1, "b": 11})
    with pytest.raises(CutError, match=r"no complete cut at 30\.0000000000: b hold"):
        complete("ns", histories, hlc(30))
    with pytest.raises(CutError, match="a hold no snapshot"):
        complete("ns", {"a": {hlc(20): 2}, "b": {hlc(10): 11, hlc(20): 12}}, hlc(10))


def test_no_cut_before_every_table_holds_one_nor_without_tables() -> None:
    wanted = r"no complete cut yet: last applied: a 10\.0000000000, b no"
    with pytest.raises(CutError, match=wanted):
        complete("ns", {"a": {hlc(10): 1}, "b": {}})
    with pytest.raises(CutError, match="no table of the changefeed"):
        complete("ns", {})


# --- the applier on the embedded catalog ---

ORDERS = TableSchema.of(
    {
        "type": "record",
        "name": "orders",
        "fields": [
            {"name": "region", "type": "string"},
            {"name": "id", "type": "long"},
            {"name": "amount", "type": ["null", decimal(20, 2)]},
            {"name": "note", "type": ["null", "string"]},
        ],
    },
    ["region", "id"],
)
SCHEMAS = {"orders": ORDERS, "customers": ORDERS}
DECODER = JsonDecoder()


def change(time: int, table: str, key: list[Any], after: dict[str, Any] | None, at: int) -> Row:
    value = json.dumps({"after": after, "updated": f"{time}.0000000000"}).encode()
    return Row.of(Hlc(time), table, json.dumps(key).encode(), value, ("out", 0), at, DECODER.change)


def windows() -> list[Window]:
    """R 10: two orders; R 20: one updated, one deleted, a key changed, a customer; R 30: none."""
    return [
        Window(
            Hlc(10),
            (
                change(5, "orders", ["eu", 1], {"amount": "1.10", "note": "first"}, 0),
                change(6, "orders", ["eu", 2], {"amount": 2, "note": "two"}, 1),
                change(7, "orders", ["eu", 1], {"amount": "1.20", "note": "again"}, 2),
            ),
        ),
        Window(
            Hlc(20),
            (
                change(11, "orders", ["eu", 1], {"amount": "3.00", "note": "updated"}, 3),
                change(12, "orders", ["eu", 2], None, 4),
                change(13, "orders", ["us", 9], {"amount": 9, "note": "moved"}, 5),
                change(13, "orders", ["eu", 8], None, 6),  # the old key of the one moved
                change(14, "customers", ["us", 7], {"note": "x\ny"}, 7),
            ),
            last=False,
        ),
        Window(Hlc(20), (change(15, "customers", ["us", 7], {"note": "z"}, 8),)),
        Window(Hlc(30), ()),
    ]


STATES = {
    10: {"orders": {("eu", 1): (Decimal("1.20"), "again"), ("eu", 2): (Decimal("2.00"), "two")}},
    20: {
        "orders": {("eu", 1): (Decimal("3.00"), "updated"), ("us", 9): (Decimal("9.00"), "moved")},
        "customers": {("us", 7): (None, "z")},
    },
}
STATES[30] = STATES[20]


def rows_at(catalog: Any, found: Cut, table: str) -> dict[Any, Any]:
    rows = found.scan(catalog, table).to_arrow().to_pylist()
    return {(r["region"], r["id"]): (r["amount"], r["note"]) for r in rows}


def state(catalog: Any, found: Cut) -> dict[str, dict[Any, Any]]:
    return {t: rows for t in found.snapshots if (rows := rows_at(catalog, found, t))}


def applier(catalog: dict[str, str]) -> IcebergApplier:
    return IcebergApplier(catalog, "cf", namespace="ns", schemas=SCHEMAS)


def test_windows_become_cuts_that_hold_the_source_at_each_r(
    iceberg_catalog: dict[str, str],
) -> None:
    made = applier(iceberg_catalog)
    assert made.start(["orders", "customers"]) is None
    for window in windows():
        made.apply(window)
    catalog = load(iceberg_catalog)
    for wall, expected in STATES.items():
        found = cut(catalog, "ns", "cf", Hlc(wall))
        assert state(catalog, found) == expected, wall
    assert cut(catalog, "ns", "cf").resolved == Hlc(30)
    assert exactly_once_problems(catalog, "ns", "cf") == []
    table = catalog.load_table("ns.orders")
    operations = [s.summary.operation.value for s in table.snapshots()]  # type: ignore[union-attr]
    assert operations == ["append", "overwrite", "append"]  # one snapshot a window, no deletes
    summary = table.current_snapshot().summary  # type: ignore[union-attr]
    assert summary["total-equality-deletes"] == summary["total-position-deletes"] == "0"


@pytest.mark.parametrize(
    ("small", "live"),
    [(writes.SMALL_FILE, True), (0, True), (writes.SMALL_FILE, False)],
    ids=["merged", "control-files", "control-manifests"],
)
def test_windows_that_touch_every_file_leave_one_file_not_one_more_each(
    iceberg_catalog: dict[str, str], monkeypatch: pytest.MonkeyPatch, small: int, live: bool
) -> None:
    """Small files a window rewrites are written with its own rows, as compaction would.

    Twelve windows, each updating a key in every earlier window's rows and adding new ones:
    the table keeps one data file and every cut its rows, and its snapshot lists few
    manifests (those of files deleted before are not carried on). The controls: no file
    counted small, each window leaves one file more; every manifest carried (pyiceberg's
    overwrite as it is), each window leaves one manifest more.
    """
    monkeypatch.setattr(writes, "SMALL_FILE", small)
    if not live:
        monkeypatch.setattr(writes, "_live", lambda manifests: manifests)
    made = applier(iceberg_catalog)
    made.start(["orders", "customers"])
    expected: dict[Any, Any] = {}
    for n in range(1, 13):
        rows = []
        for old in range(n - 1):  # one key of each earlier window, updated
            expected[("eu", old * 10)] = (Decimal(n), f"{n}")
            rows.append(
                change(
                    n * 100 + old,
                    "orders",
                    ["eu", old * 10],
                    {"amount": n, "note": f"{n}"},
                    len(rows),
                )
            )
        for new in range(3):
            expected[("eu", (n - 1) * 10 + new)] = (Decimal(n), "new")
            rows.append(
                change(
                    n * 100 + 50 + new,
                    "orders",
                    ["eu", (n - 1) * 10 + new],
                    {"amount": n, "note": "new"},
                    len(rows),
                )
            )
        made.apply(Window(Hlc(n * 100 + 99), tuple(rows)))
    catalog = load(iceberg_catalog)
    found = cut(catalog, "ns", "cf")
    assert rows_at(catalog, found, "orders") == expected
    table = catalog.load_table("ns.orders")
    files = sizes(table)[0]
    assert files == (1 if small else 12)
    manifests = table.current_snapshot().manifests(table.io)  # type: ignore[union-attr]
    if small:  # (files not merged: a manifest for each of the twelve)
        assert len(manifests) <= 2 if live else len(manifests) >= 12, len(manifests)
    assert exactly_once_problems(catalog, "ns", "cf") == []


def test_a_crash_between_two_tables_leaves_the_cut_before_it_and_a_restart_completes_it(
    iceberg_catalog: dict[str, str],
) -> None:
    made = applier(iceberg_catalog)
    made.start(["orders", "customers"])
    first, *second, last = windows()
    made.apply(first)

    def crash(step: str) -> None:
        if step == "committed customers":  # the first table (in name order) of window 20
            raise KeyboardInterrupt("killed between two tables' commits")

    made.reached = crash
    made.apply(second[0])
    with pytest.raises(KeyboardInterrupt):
        made.apply(second[1])
    catalog = load(iceberg_catalog)
    assert cut(catalog, "ns", "cf").resolved == Hlc(10)  # R 20 incomplete: orders lacks it
    with pytest.raises(CutError, match="orders hold no snapshot"):
        cut(catalog, "ns", "cf", Hlc(20))
    assert state(catalog, cut(catalog, "ns", "cf")) == STATES[10]

    again = applier(iceberg_catalog)
    assert again.start(["orders", "customers"]) == Hlc(10)  # the consumer resumes after 10
    for window in (*second, last):  # handed over again: customers skips what it holds
        again.apply(window)
    assert exactly_once_problems(catalog, "ns", "cf") == []
    for wall, expected in STATES.items():
        assert state(catalog, cut(catalog, "ns", "cf", Hlc(wall))) == expected


def test_after_a_crash_between_tables_the_tables_behind_catch_up_at_exactly_the_torn_r(
    iceberg_catalog: dict[str, str],
) -> None:
    """The tables behind are committed at exactly the torn R first, then the window's.

    The windows after a restart need not end where the torn one did (the consumer reads
    other batches); the rows at or below the torn R wait for it, so every table holds the
    same cuts again.
    """
    made = applier(iceberg_catalog)
    made.start(["orders", "customers"])
    first, second_a, second_b, _ = windows()

    def crash(step: str) -> None:
        if step == "committed customers":
            raise KeyboardInterrupt("killed between two tables' commits")

    made.apply(first)
    made.reached = crash
    made.apply(second_a)
    with pytest.raises(KeyboardInterrupt):
        made.apply(second_b)
    again = applier(iceberg_catalog)
    assert again.start(["orders", "customers"]) == Hlc(10)
    assert again.catching_up == [Hlc(20)]
    rows = (*second_a.rows, *second_b.rows)
    early = tuple(r for r in rows if r.updated <= Hlc(12))
    later = tuple(r for r in rows if r.updated > Hlc(12))
    assert not again.apply(Window(Hlc(12), early))  # below 20: its rows wait
    assert again.holding
    late = change(25, "orders", ["eu", 1], {"amount": "4.00", "note": "late"}, 9)
    assert again.apply(Window(Hlc(30), (*later, late)))  # 20 for orders, then 30 for both
    assert not again.holding
    catalog = load(iceberg_catalog)
    assert exactly_once_problems(catalog, "ns", "cf") == []
    assert state(catalog, cut(catalog, "ns", "cf", Hlc(20))) == STATES[20]
    at_30 = {**STATES[20], "orders": {**STATES[20]["orders"], ("eu", 1): (Decimal("4.00"), "late")}}
    assert state(catalog, cut(catalog, "ns", "cf", Hlc(30))) == at_30


def test_a_commit_whose_answer_was_lost_is_read_back_not_made_again(
    iceberg_catalog: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catalog took a commit, then the connection broke before its answer came back.

    The applier waits, reads the table again, finds R there and goes on: not made twice.
    """
    made = applier(iceberg_catalog)
    made.start(["orders", "customers"])
    real, lost = writes.commit, []

    def answer_lost(table: Any, *args: Any, **options: Any) -> None:
        real(table, *args, **options)
        if not lost:
            lost.append(table.name())
            raise ConnectionResetError("the connection broke before the catalog's answer")

    monkeypatch.setattr(writes, "commit", answer_lost)
    for window in windows():
        made.apply(window)
    assert lost == [("ns", "customers")]
    catalog = load(iceberg_catalog)
    assert exactly_once_problems(catalog, "ns", "cf") == []
    for wall, expected in STATES.items():
        assert state(catalog, cut(catalog, "ns", "cf", Hlc(wall))) == expected


def one_behind(catalog: dict[str, str]) -> IcebergApplier:
    """Two appliers started together; the other applies the first three windows: this one."""
    ahead, behind = applier(catalog), applier(catalog)
    ahead.start(["orders", "customers"])
    behind.start(["orders", "customers"])
    for window in windows()[:3]:
        ahead.apply(window)
    return behind


def test_two_appliers_at_once_never_take_a_table_back(iceberg_catalog: dict[str, str]) -> None:
    """Two appliers of one changefeed started together; one runs ahead of the other.

    The one behind commits on table metadata read before the other's commits: refused, it
    reads the tables again, finds its windows held and leaves them; it commits the next
    window itself. Every table's R only rises, every window once, the cuts are the source's.
    """
    behind = one_behind(iceberg_catalog)
    first, second, third, fourth = windows()
    assert not behind.apply(first)  # held by both tables now: nothing written
    assert not behind.apply(second)
    assert not behind.apply(third)
    assert behind.apply(fourth)  # the next window is the one behind's to write
    catalog = load(iceberg_catalog)
    assert exactly_once_problems(catalog, "ns", "cf") == []
    for wall, expected in STATES.items():
        assert state(catalog, cut(catalog, "ns", "cf", Hlc(wall))) == expected, wall


def test_an_applier_that_does_not_read_the_tables_again_takes_one_back(
    iceberg_catalog: dict[str, str],
) -> None:
    """The negative control: the one behind commits on fresh metadata, its R not read again.

    Its first window lands above the other's later one: the check names the table taken back.
    """
    behind = one_behind(iceberg_catalog)
    first = windows()[0]
    catalog = load(iceberg_catalog)
    for target in behind.targets.values():  # fresh metadata (not refused), a stale R
        target.table = catalog.load_table(target.table.name())
    behind.apply(first)
    problems = exactly_once_problems(load(iceberg_catalog), "ns", "cf")
    assert "orders: window 10.0000000000 after a later one" in problems, problems


def test_a_window_applied_twice_is_what_the_exactly_once_check_finds(
    iceberg_catalog: dict[str, str],
) -> None:
    """The negative control: an applier whose skip is defeated applies window 20 twice."""
    made = applier(iceberg_catalog)
    made.start(["orders", "customers"])
    for window in windows()[:3]:
        made.apply(window)
    for target in made.targets.values():
        target.resolved = Hlc(10)  # as if it had not read what the tables hold
    assert not made.apply(windows()[1])  # a piece: nothing committed before the last
    assert made.apply(windows()[2])
    catalog = load(iceberg_catalog)
    problems = exactly_once_problems(catalog, "ns", "cf")
    print(problems)
    assert problems == [
        "customers: window 20.0000000000 applied twice",
        "customers: window 20.0000000000 after a later one",
        "orders: window 20.0000000000 applied twice",
        "orders: window 20.0000000000 after a later one",
    ]
    # the rows cannot tell: a keyed window applied again leaves the same rows
    assert state(catalog, cut(catalog, "ns", "cf")) == STATES[20]


def test_a_value_its_column_cannot_hold_stops_the_applier_naming_the_record(
    iceberg_catalog: dict[str, str],
) -> None:
    made = applier(iceberg_catalog)
    made.start(["orders", "customers"])
    made.apply(windows()[0])
    bad = change(21, "orders", ["eu", 3], {"amount": 0.001}, 42)
    with pytest.raises(UnwritableRecord) as caught:
        made.apply(Window(Hlc(40), (change(20, "customers", ["us", 1], {}, 41), bad)))
    assert str(caught.value) == (
        "out/0@42: cannot be written to Iceberg table ns.orders: column 'amount': 0.001 does "
        "not fit decimal(20,2) without rounding"
    )
    catalog = load(iceberg_catalog)
    assert cut(catalog, "ns", "cf").resolved == Hlc(10)  # nothing of the window committed
    assert exactly_once_problems(catalog, "ns", "cf") == []


def test_a_table_of_another_changefeed_or_without_a_schema_is_refused(
    iceberg_catalog: dict[str, str],
) -> None:
    applier(iceberg_catalog).start(["orders"])
    other = IcebergApplier(iceberg_catalog, "other", namespace="ns")
    with pytest.raises(Exception, match=r"ns\.orders is applied by changefeed 'cf', not 'other'"):
        other.start(["orders"])
    with pytest.raises(Exception, match="declares no schema for table 'nothing'"):
        other.start(["nothing"])


# --- the command line: --dsn or --catalog, exactly one ---


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ([], "one of the arguments --dsn --catalog is required"),
        (["--dsn", "x", "--catalog", "warehouse=w"], "argument --catalog: not allowed with"),
    ],
)
def test_apply_takes_exactly_one_of_dsn_and_catalog(
    given: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from highwater_consumer.cli import main  # noqa: PLC0415

    with pytest.raises(SystemExit) as stopped:
        main(["apply", "cf", *given])
    assert stopped.value.code == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (["--dsn", "x", "--namespace", "ns"], "--namespace is Iceberg's: give it with --catalog"),
        (["--dsn", "x", "--schema-changes", "stop"], "--schema-changes is Iceberg's: give it"),
        (["--dsn", "x", "--spill", "9"], "--spill is Iceberg's: give it with --catalog"),
        (["--catalog", "warehouse=w", "--spill", "0"], "spill: 0 rows; at least 1"),
        (["--catalog", "warehouse"], "--catalog 'warehouse': a catalog property is KEY=VALUE"),
        (["--dsn", "x", "--on-error", "dlq"], "--on-error dlq is Iceberg's"),
        (["--catalog", "warehouse=w", "--dlq-topic", "d"], "--dlq-topic is only used with"),
    ],
)
def test_apply_names_the_flag_it_refuses(
    given: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from highwater_consumer.cli import main  # noqa: PLC0415

    topics = ["--topic", "out.t=t", "--bootstrap-servers", "127.0.0.1:1"]
    assert main(["apply", "cf", *topics, *given]) == 1
    assert said in capsys.readouterr().err


def test_each_iceberg_target_has_a_consumer_group_of_its_own() -> None:
    # a group's committed offsets are where an applier reads on: a new target sharing one
    # with another (the PostgreSQL applier's, another warehouse or namespace) would start
    # after windows it never had, or split the partitions with it
    lake, other = {"warehouse": "/data/lake"}, {"warehouse": "/data/other"}
    group = default_group("cf", lake, "highwater")
    assert group == default_group("cf", dict(lake), "highwater")  # stable for one target
    assert group.startswith("highwater-apply-iceberg-cf-")
    assert (
        len(
            {
                group,
                default_group("cf", other, "highwater"),
                default_group("cf", lake, "shop"),
                default_group("cf", {"type": "rest", "uri": "http://cat:8181"}, "highwater"),
                default_group("other-cf", lake, "highwater"),
                "highwater-apply-cf",  # the PostgreSQL applier's
            }
        )
        == 6
    )
    secret = default_group("cf", {"type": "rest", "uri": "http://c", "token": "s3cret"}, "ns")
    assert "s3cret" not in secret


def test_a_rotated_credential_keeps_the_targets_group() -> None:
    rest = {"type": "rest", "uri": "http://cat:8181"}
    assert default_group("cf", {**rest, "token": "old"}, "ns") == default_group(
        "cf", {**rest, "token": "new"}, "ns"
    )
