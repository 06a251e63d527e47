"""Schema changes into Iceberg tables, on each catalog kind (``iceberg_catalog``).

Rows are Avro records in Confluent's wire format, each read by its own writer schema (as the
consumer reads a changefeed's registry Avro): a second writer schema version adds a column
(``schema_change_policy: evolve`` upstream) or retypes one. Under ``evolve`` the applier adds
the column in the window's own commit (one snapshot marked R, one metadata commit), field ids
kept, old rows read back null; a promotion Iceberg allows is made; under ``stop``, and for a
retyped column, the applier stops naming the table, the column and the record, and commits
nothing of the window. JSON output has no types: a new column stops, unless the changefeed
declares it. Negative controls: a schema committed apart from the window's rows is what the
one-commit check finds; field ids renumbered are what the field-id check finds.
"""

from __future__ import annotations

import io
import struct
from decimal import Decimal
from typing import Any

import fastavro
import pytest
from pyiceberg.types import BooleanType, DecimalType, LongType

from highwater_consumer.decoding import AvroDecoder
from highwater_consumer.iceberg import IcebergApplier, cut, load
from highwater_consumer.iceberg.evolution import Evolution, SchemaChange, holds, promotable
from highwater_consumer.windows import Row, Window
from schemas.hlc import Hlc
from schemas.tables import TableSchema
from tests.support.iceberg import exactly_once_problems
from tests.unit.test_iceberg import change as json_change
from tests.unit.test_iceberg import decimal


def record(*extra: dict[str, Any], amount: Any = None) -> dict[str, Any]:
    """The table ``orders`` as a writer schema's row record: ``extra`` columns after."""
    return {
        "type": "record",
        "name": "orders",
        "fields": [
            {"name": "region", "type": "string"},
            {"name": "id", "type": "long"},
            {"name": "amount", "type": ["null", amount or decimal(10, 2)], "default": None},
            {"name": "note", "type": ["null", "string"], "default": None},
            *extra,
        ],
    }


VIP = {"name": "vip", "type": ["null", "boolean"], "default": None}
DECLARED = TableSchema.of(record(), ["region", "id"])
KEY = {
    "type": "record",
    "name": "orders_key",
    "fields": [{"name": "region", "type": "string"}, {"name": "id", "type": "long"}],
}


def envelope(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "record",
        "name": "orders_envelope",
        "fields": [
            {"name": "after", "type": ["null", row], "default": None},
            {"name": "updated", "type": ["null", "string"], "default": None},
        ],
    }


class Registry:
    """Writer schemas by id, and records written with them (Confluent's wire format)."""

    def __init__(self) -> None:
        self.schemas: dict[int, dict[str, Any]] = {1: KEY}
        self.decoder = AvroDecoder(self.lookup)

    def lookup(self, header: bytes) -> dict[str, Any] | None:
        return self.schemas.get(struct.unpack(">I", header[1:5])[0])

    def encode(self, schema_id: int, datum: dict[str, Any]) -> bytes:
        out = io.BytesIO()
        out.write(b"\x00" + struct.pack(">I", schema_id))
        fastavro.schemaless_writer(out, fastavro.parse_schema(self.schemas[schema_id]), datum)
        return out.getvalue()

    def row(
        self, schema_id: int, time: int, id_: int, after: dict[str, Any] | None, at: int
    ) -> Row:
        key = self.encode(1, {"region": "eu", "id": id_})
        full = None if after is None else {"region": "eu", "id": id_, **after}
        value = self.encode(schema_id, {"after": full, "updated": f"{time}.0000000000"})
        reader = self.decoder.change
        return Row.of(Hlc(time), "orders", key, value, ("out", 0), at, reader)


def registry(**versions: dict[str, Any]) -> Registry:
    """A registry holding the first row record (id 2) and ``versions`` (ids 3, 4, …)."""
    found = Registry()
    found.schemas[2] = envelope(record())
    for number, row in enumerate(versions.values(), start=3):
        found.schemas[number] = envelope(row)
    return found


def applier(catalog: dict[str, str], **options: Any) -> IcebergApplier:
    made = IcebergApplier(catalog, "cf", namespace="ns", schemas={"orders": DECLARED}, **options)
    made.start(["orders"])
    return made


def first_window(avro: Registry) -> Window:
    return Window(
        Hlc(10),
        (
            avro.row(2, 5, 1, {"amount": Decimal("1.10"), "note": "one"}, 0),
            avro.row(2, 6, 2, {"amount": Decimal("2.00"), "note": "two"}, 1),
        ),
    )


def rows_at(catalog: Any, wall: int, *columns: str) -> dict[int, tuple[Any, ...]]:
    found = cut(catalog, "ns", "cf", Hlc(wall))
    rows = found.scan(catalog, "orders").to_arrow().to_pylist()
    return {r["id"]: tuple(r.get(c) for c in columns) for r in rows}


def commits_of(table: Any) -> int:
    """The table's metadata commits (each writes a metadata file; its log lists the older)."""
    return len(table.metadata.metadata_log) + 1


def field_ids(table: Any) -> dict[str, int]:
    return {f.name: f.field_id for f in table.schema().fields}


def test_a_column_added_upstream_is_added_in_the_windows_own_commit_field_ids_kept(
    iceberg_catalog: dict[str, str],
) -> None:
    avro = registry(vip=record(VIP))
    made = applier(iceberg_catalog)
    made.apply(first_window(avro))
    catalog = load(iceberg_catalog)
    before = catalog.load_table("ns.orders")
    ids, commits = field_ids(before), commits_of(before)
    second = Window(
        Hlc(20),
        (
            avro.row(3, 11, 3, {"amount": Decimal("3.00"), "note": "three", "vip": True}, 2),
            avro.row(2, 12, 2, {"amount": Decimal("2.50"), "note": "old writer"}, 3),
            avro.row(3, 13, 4, {"note": "four", "vip": False}, 4),
        ),
    )
    assert made.apply(second)
    table = catalog.load_table("ns.orders")
    assert {k: v for k, v in field_ids(table).items() if k != "vip"} == ids  # ids kept
    vip = table.schema().find_field("vip")
    assert (vip.field_type, vip.required, vip.field_id) == (
        BooleanType(),
        False,
        max(ids.values()) + 1,
    )
    assert commits_of(table) == commits + 1  # the schema and the window's snapshot: one commit
    marked = [
        s
        for s in table.snapshots()
        if s.summary and s.summary["highwater.resolved"] == str(Hlc(20))
    ]
    assert len(marked) == 1  # one snapshot marked R
    assert marked[0].schema_id == table.schema().schema_id  # written in the new schema
    assert rows_at(catalog, 20, "note", "vip") == {
        1: ("one", None),  # a row from before the column: null
        2: ("old writer", None),
        3: ("three", True),
        4: ("four", False),
    }
    assert rows_at(catalog, 10, "note") == {1: ("one",), 2: ("two",)}  # the cut before: as it was
    assert exactly_once_problems(catalog, "ns", "cf") == []


def test_a_schema_committed_apart_from_the_windows_rows_is_what_the_one_commit_check_finds(
    iceberg_catalog: dict[str, str],
) -> None:
    """The negative control of the one-commit check: the column added in a commit of its own."""
    avro = registry(vip=record(VIP))
    made = applier(iceberg_catalog)
    made.apply(first_window(avro))
    catalog = load(iceberg_catalog)
    table = catalog.load_table("ns.orders")
    commits = commits_of(table)
    with table.update_schema() as update:  # the broken variant: the schema first, alone
        update.add_column("vip", BooleanType())
    made.targets["orders"].table = catalog.load_table("ns.orders")
    made.apply(Window(Hlc(20), (avro.row(3, 11, 3, {"vip": True}, 2),)))
    assert commits_of(catalog.load_table("ns.orders")) == commits + 2  # what the check finds


def test_field_ids_renumbered_are_what_the_field_id_check_finds(
    iceberg_catalog: dict[str, str],
) -> None:
    """The negative control of the field-id check: a column dropped and added again."""
    applier(iceberg_catalog)
    catalog = load(iceberg_catalog)
    ids = field_ids(catalog.load_table("ns.orders"))
    table = catalog.load_table("ns.orders")
    with table.update_schema() as update:
        update.delete_column("note")
    with table.update_schema() as update:
        update.add_column("note", LongType())
    renumbered = field_ids(catalog.load_table("ns.orders"))
    with pytest.raises(AssertionError):
        assert renumbered == ids
    assert renumbered["note"] != ids["note"]


def test_schema_changes_stop_names_the_table_the_column_and_the_record(
    iceberg_catalog: dict[str, str],
) -> None:
    avro = registry(vip=record(VIP))
    made = applier(iceberg_catalog, schema_changes="stop")
    made.apply(first_window(avro))
    catalog = load(iceberg_catalog)
    ids = field_ids(catalog.load_table("ns.orders"))
    with pytest.raises(SchemaChange) as stopped:
        made.apply(
            Window(Hlc(20), (avro.row(2, 11, 3, {}, 7), avro.row(3, 12, 4, {"vip": True}, 8)))
        )
    assert str(stopped.value) == (
        "out/0@8: Iceberg table ns.orders: column 'vip' (boolean, from the record's writer "
        "schema) is not in the table: schema changes stop the applier "
        "(schema_changes='stop'); alter the table, or apply with --schema-changes evolve"
    )
    table = catalog.load_table("ns.orders")
    assert field_ids(table) == ids  # the table as it was
    assert cut(catalog, "ns", "cf").resolved == Hlc(10)  # nothing of the window committed
    # the control: the same window under evolve goes through
    again = applier(iceberg_catalog)
    assert again.apply(
        Window(Hlc(20), (avro.row(2, 11, 3, {}, 7), avro.row(3, 12, 4, {"vip": True}, 8)))
    )
    assert rows_at(catalog, 20, "vip")[4] == (True,)


@pytest.mark.parametrize(
    ("amount", "said"),
    [
        ("string", "column 'amount' is decimal(10, 2) in the table and string in the record's"),
        (decimal(12, 4), "column 'amount' is decimal(10, 2) in the table and decimal(12, 4) in"),
    ],
)
def test_a_retyped_column_is_refused_by_name_with_both_types(
    iceberg_catalog: dict[str, str], amount: Any, said: str
) -> None:
    avro = registry(retyped=record(amount=amount))
    made = applier(iceberg_catalog)
    made.apply(first_window(avro))
    value = "12.5" if amount == "string" else Decimal("12.5000")
    with pytest.raises(SchemaChange) as refused:
        made.apply(Window(Hlc(20), (avro.row(3, 11, 1, {"amount": value}, 5),)))
    message = str(refused.value)
    assert message.startswith("out/0@5: Iceberg table ns.orders: "), message
    assert said in message, message
    assert "a retyped column Iceberg cannot change" in message
    catalog = load(iceberg_catalog)
    assert cut(catalog, "ns", "cf").resolved == Hlc(10)
    table = catalog.load_table("ns.orders")
    assert table.schema().find_field("amount").field_type == DecimalType(10, 2)


def test_a_promotion_iceberg_allows_is_made_and_a_narrower_type_written_as_it_is(
    iceberg_catalog: dict[str, str],
) -> None:
    avro = registry(wider=record(amount=decimal(14, 2)), narrower=record(amount=decimal(6, 1)))
    made = applier(iceberg_catalog)
    made.apply(first_window(avro))
    wide = Decimal("123456789012.34")  # does not fit decimal(10, 2)
    made.apply(Window(Hlc(20), (avro.row(3, 11, 1, {"amount": wide}, 5),)))
    catalog = load(iceberg_catalog)
    table = catalog.load_table("ns.orders")
    assert table.schema().find_field("amount").field_type == DecimalType(14, 2)
    made.apply(Window(Hlc(30), (avro.row(4, 21, 2, {"amount": Decimal("7.5")}, 6),)))
    assert catalog.load_table("ns.orders").schema().find_field("amount").field_type == DecimalType(
        14, 2
    )
    assert rows_at(catalog, 30, "amount") == {1: (wide,), 2: (Decimal("7.50"),)}


def test_the_type_rules_are_icebergs_promotions_and_exact_holding() -> None:
    assert promotable(DecimalType(10, 2), DecimalType(12, 2))
    assert not promotable(DecimalType(10, 2), DecimalType(12, 4))
    assert holds(DecimalType(12, 4), DecimalType(10, 2))  # 8 whole digits, 2 of fraction: fit
    assert not holds(DecimalType(12, 4), DecimalType(12, 2))  # 10 whole digits: not
    assert holds(LongType(), LongType())


def test_a_new_column_in_json_output_stops_unless_the_changefeed_declares_it(
    iceberg_catalog: dict[str, str],
) -> None:
    made = applier(iceberg_catalog)
    made.apply(Window(Hlc(10), (json_change(5, "orders", ["eu", 1], {"note": "one"}, 0),)))
    new = json_change(11, "orders", ["eu", 2], {"note": "two", "vip": True}, 3)
    with pytest.raises(SchemaChange) as stopped:
        made.apply(Window(Hlc(20), (new,)))
    assert str(stopped.value) == (
        "out/0@3: Iceberg table ns.orders: column 'vip' is not in the table and the record "
        "does not say its type (JSON output): a column added needs the changefeed's Avro "
        "output (its writer schema) or its declared table_schema"
    )
    declared = TableSchema.of(record(VIP), ["region", "id"])  # the changefeed declares it now
    again = IcebergApplier(iceberg_catalog, "cf", namespace="ns", schemas={"orders": declared})
    again.start(["orders"])
    assert again.apply(Window(Hlc(20), (new,)))
    catalog = load(iceberg_catalog)
    assert rows_at(catalog, 20, "note", "vip") == {1: ("one", None), 2: ("two", True)}


def test_a_window_refused_leaves_no_column_staged(iceberg_catalog: dict[str, str]) -> None:
    """A column staged by a window that is then refused is forgotten with it."""
    made = applier(iceberg_catalog)
    evolution = Evolution("evolve", None)
    avro = registry(vip=record(VIP))
    convert = dict(made.targets["orders"].convert)
    table = made.targets["orders"].table
    evolution.see(avro.row(3, 1, 1, {"vip": True}, 0), {"vip": True}, table, convert)
    assert set(evolution.staged) == {"vip"}
    assert "vip" in convert
    evolution.forget()
    assert evolution.staged == {}
    assert evolution.checked == set()


def test_a_column_added_in_a_window_written_ahead_lands_with_its_values(
    iceberg_catalog: dict[str, str],
) -> None:
    """Rows written ahead before the column came and after it (staged): one commit, all read."""
    avro = registry(vip=record(VIP))
    made = applier(iceberg_catalog, spill=2)
    made.apply(first_window(avro))
    rows = [avro.row(2, 11 + n, 10 + n, {"note": f"old {n}"}, n) for n in range(3)]
    rows += [
        avro.row(3, 20 + n, 20 + n, {"note": f"new {n}", "vip": n % 2 == 0}, 9 + n)
        for n in range(3)
    ]
    rows += [avro.row(3, 30, 10, {"note": "old 0 again", "vip": True}, 20)]  # written ahead before
    for start in range(0, len(rows), 2):
        made.apply(Window(Hlc(40), tuple(rows[start : start + 2]), last=start + 2 >= len(rows)))
    assert made.most_held <= 2
    catalog = load(iceberg_catalog)
    found = rows_at(catalog, 40, "note", "vip")
    assert found == {
        1: ("one", None),
        2: ("two", None),
        10: ("old 0 again", True),
        11: ("old 1", None),
        12: ("old 2", None),
        20: ("new 0", True),
        21: ("new 1", False),
        22: ("new 2", True),
    }
    table = catalog.load_table("ns.orders")
    assert (
        len([s for s in table.snapshots() if s.summary["highwater.resolved"] == str(Hlc(40))]) == 1
    )
