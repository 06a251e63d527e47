"""Schema changes: a column added upstream becomes an Iceberg column; a retyped one is refused.

A changefeed under ``schema_change_policy: evolve`` writes a row with a new column under a
new writer schema (a registry version, or a schema in its schema topic), and the consumer
reads each record by its own writer schema, so the row's ``after`` has the column. The
applier checks each writer schema once per table (the record's header names it), column by
column, against the table's Iceberg schema:

* a column the table lacks is **added** (optional; its Iceberg type from the writer schema's
  Avro type, :func:`.columns.column_type`), the other columns' field ids kept;
* a column whose new type Iceberg promotes (``int`` to ``long``, ``float`` to ``double``, a
  decimal's precision widened at its scale) is **promoted**;
* a column whose table type holds every value of the new one exactly (a ``long`` column,
  an ``int`` written; ``decimal(12,4)``, ``decimal(10,2)`` written) is written as it is;
* any other **retyped column** (``string`` to ``long``, a decimal's scale changed) is refused
  by name: the table, the column, both types, the record.

The changes are staged and made **in the window's commit**: one transaction holds the schema
update and the window's snapshot (pyiceberg applies a transaction's staged schema to its
metadata before writing the data files, and the catalog takes both in one commit), so no
reader sees the column before the window that brought it, and a window refused (a bad
value) leaves the table's schema as it was. A change made in a catch-up commit
(:class:`.applier.IcebergApplier`) lands with the first commit of the table after the row
was read: at most the catch-up R before it, with nulls.

``schema_changes="stop"`` (``--schema-changes stop``) stops the applier at the first record
that would change a table, naming the table, the column and the record: add the column
yourself (say with Spark's ``ALTER TABLE … ADD COLUMN``) and start it again, or start it with
``evolve``. JSON output carries no types: a column the table lacks takes its type from the
changefeed's declared schema (``sources[].table_schema``, as its job status publishes it when
the applier starts), else it stops, saying it needs Avro output or a declared schema.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyiceberg.types import DecimalType, DoubleType, FloatType, IcebergType, IntegerType, LongType

from schemas.errors import RecordRef
from schemas.tables import TableSchema

from ..decoding import ApplyError, AvroDecoder, avro_header
from ..windows import Row
from .columns import Convert, NoIcebergType, column_type, converter

if TYPE_CHECKING:
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table, Transaction
    from pyiceberg.table.metadata import TableMetadata

EVOLVE, STOP = "evolve", "stop"
SCHEMA_CHANGES = (EVOLVE, STOP)  # the applier's ``schema_changes`` option (EVOLVE: default)
_PROMOTIONS = "Iceberg promotes int to long, float to double and a decimal's precision"


class SchemaChange(ApplyError):
    """A record whose columns its table does not have as they are: which, where, and why."""

    remedy = (
        "Alter the table yourself (`ALTER TABLE ... ADD COLUMN`) or restart with "
        "`--schema-changes evolve`; a retyped column needs a table made anew."
    )

    def __init__(self, record: RecordRef, table: str, reason: str) -> None:
        self.record = record
        self.table = table
        self.reason = reason
        super().__init__(f"{record}: Iceberg table {table}: {reason}")


@dataclass(frozen=True)
class Alteration:
    """A column to add (``added``) or whose type to promote, in the next commit."""

    column: str
    kind: IcebergType
    added: bool


def promotable(old: IcebergType, new: IcebergType) -> bool:
    """Whether Iceberg promotes a column of type ``old`` to ``new`` (the spec's promotions)."""
    if isinstance(old, IntegerType):
        return isinstance(new, LongType)
    if isinstance(old, FloatType):
        return isinstance(new, DoubleType)
    if isinstance(old, DecimalType) and isinstance(new, DecimalType):
        return old.scale == new.scale and new.precision > old.precision
    return False


def holds(old: IcebergType, new: IcebergType) -> bool:
    """Whether a column of type ``old`` holds every value of type ``new`` exactly."""
    if old == new or promotable(new, old):
        return True
    if isinstance(old, DecimalType) and isinstance(new, DecimalType):
        whole = old.precision - old.scale >= new.precision - new.scale
        return whole and old.scale >= new.scale
    return False


@dataclass
class Evolution:
    """One table's schema changes asked for by the records read, staged for its next commit.

    ``policy``: :data:`EVOLVE` or :data:`STOP`; ``declared``: the changefeed's declared
    schema of the table (the types of JSON output's new columns), or None.
    """

    policy: str
    declared: TableSchema | None
    staged: dict[str, Alteration] = field(default_factory=dict)
    checked: set[bytes] = field(default_factory=set)  # the writer schemas' headers checked

    def see(
        self, row: Row, after: Mapping[str, Any], table: Table, convert: dict[str, Convert]
    ) -> None:
        """Check a row's columns against its table's schema and what is staged.

        A change is staged (``convert`` gains the column's converter) or refused
        (:class:`SchemaChange`). A writer schema checked before and columns the table has
        cost a header's slice and a set look-up: every row comes here.
        """
        value = row.value
        header = None if value is None else avro_header(value)
        if header is not None and header not in self.checked:
            decoder = getattr(row.reader, "__self__", None)
            if isinstance(decoder, AvroDecoder) and value is not None:
                schema, name = table.schema(), ".".join(table.name())
                written = _columns(decoder.writer(value))
                for column, avro in written.items():
                    self._compare(row, column, avro, "the record's writer schema", schema, name)
                self._converters(written, schema, convert)
            self.checked.add(header)
        if after.keys() <= convert.keys():
            return
        schema, name = table.schema(), ".".join(table.name())
        for column in after:
            if column not in convert:
                self._declared(row, column, schema, name)
        self._converters(after, schema, convert)

    def _declared(self, row: Row, column: str, schema: Schema, table: str) -> None:
        """A column of a record without types: as the changefeed declares it, or refused."""
        types = {} if self.declared is None else _fields(self.declared.record)
        if column not in types:
            raise SchemaChange(
                _place(row),
                table,
                f"column {column!r} is not in the table and the record does not say its type "
                f"(JSON output): a column added needs the changefeed's Avro output (its writer "
                f"schema) or its declared table_schema",
            )
        self._compare(row, column, types[column], "the changefeed's declared schema", schema, table)

    def _compare(  # noqa: PLR0917 - one column of one record against one table
        self, row: Row, column: str, avro: Any, source: str, schema: Schema, table: str
    ) -> None:
        try:
            new = column_type(avro, column)
        except NoIcebergType as exc:
            raise SchemaChange(_place(row), table, f"{exc} ({source})") from exc
        old = self._type(column, schema)
        if old is not None and holds(old, new):
            return
        if old is not None and not promotable(old, new):
            raise SchemaChange(
                _place(row),
                table,
                f"column {column!r} is {old} in the table and {new} in {source}: a retyped "
                f"column Iceberg cannot change ({_PROMOTIONS} at its scale)",
            )
        what = f"column {column!r} ({new}, from {source}) is not in the table"
        if old is not None:
            what = f"column {column!r} is {old} in the table and {new} in {source}"
        if self.policy == STOP:
            raise SchemaChange(
                _place(row),
                table,
                f"{what}: schema changes stop the applier (schema_changes='stop'); alter "
                f"the table, or apply with --schema-changes evolve",
            )
        self.staged[column] = Alteration(column, new, added=old is None)

    def _type(self, column: str, schema: Schema) -> IcebergType | None:
        staged = self.staged.get(column)
        if staged is not None:
            return staged.kind
        found = next((f for f in schema.fields if f.name == column), None)
        return None if found is None else found.field_type

    def _converters(
        self, columns: Iterable[str], schema: Schema, convert: dict[str, Convert]
    ) -> None:
        """Into ``convert``: the columns staged, and those the table has (if made meanwhile)."""
        for column in columns:
            kind = self._type(column, schema)
            if kind is not None and (column in self.staged or column not in convert):
                convert[column] = converter(kind, column)

    def alter(self, transaction: Transaction) -> None:
        """Stage what is staged here in ``transaction`` (the parts the table lacks still)."""
        if not self.staged:
            return
        present = {f.name: f.field_type for f in transaction.table_metadata.schema().fields}
        changes = [a for a in self.staged.values() if present.get(a.column) != a.kind]
        if not changes:
            return
        with transaction.update_schema() as update:
            for change in changes:
                if change.column in present:
                    update.update_column(change.column, field_type=change.kind)
                else:
                    update.add_column(change.column, change.kind, required=False)

    def metadata(self, table: Table) -> TableMetadata:
        """The table's metadata with the staged changes made (not committed): what to write."""
        transaction = table.transaction()
        self.alter(transaction)
        return transaction.table_metadata

    def committed(self) -> None:
        """The staged changes are the table's now."""
        self.staged.clear()

    def forget(self) -> None:
        """Drop the staged changes (a window not committed); writer schemas checked again."""
        self.staged.clear()
        self.checked.clear()


def _place(row: Row) -> RecordRef:
    return RecordRef(row.partition[0], row.partition[1], row.offset)


def _fields(record: Mapping[str, Any]) -> dict[str, Any]:
    return {f["name"]: f["type"] for f in record.get("fields", ())}


def _columns(writer: Mapping[str, Any] | None) -> dict[str, Any]:
    """The columns of a row envelope's ``after`` record in its writer schema (name -> type)."""
    if writer is None:
        return {}
    after = _fields(writer).get("after")
    for branch in after if isinstance(after, list) else [after]:
        if isinstance(branch, Mapping) and branch.get("type") == "record":
            return _fields(branch)
    return {}  # a marker's schema, or an envelope without ``after``
