"""A changefeed table's Iceberg table as the applier fills it during a window.

Its rows wait per *stage*: the window's own R (None), or a catch-up R the tables behind are
committed at first (:class:`.applier.IcebergApplier`). A key's last version in the stage is
the one kept; rows past the applier's bound are written ahead (:mod:`.spill`); columns a
record adds wait staged (:mod:`.evolution`). All of it is the table's at the stage's commit,
or forgotten (:meth:`Target.clear`) when the window is not committed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from schemas.hlc import Hlc

from .columns import Convert, Unwritable, converters
from .evolution import Evolution
from .spill import Spill

if TYPE_CHECKING:
    from pyiceberg.table import Table

Stage = Hlc | None  # the R a row is committed at: a catch-up R, or None (the window's own)


@dataclass
class Target:
    """An Iceberg table a changefeed table is applied to, and what it holds.

    Rows wait per stage: the window's own R (None), or a catch-up R (:class:`IcebergApplier`).
    """

    name: str  # the changefeed's table
    table: Table
    key: tuple[str, ...]  # the identifier fields in the changefeed key's order; (): append
    convert: dict[str, Convert]  # the table's columns, and those staged (evolution)
    resolved: Hlc | None  # the last window it holds
    evolution: Evolution
    pending: dict[Stage, dict[Any, dict[str, Any] | None]] = field(default_factory=dict)
    appended: dict[Stage, list[dict[str, Any]]] = field(default_factory=dict)
    spills: dict[Stage, Spill] = field(default_factory=dict)  # rows written ahead

    def change(self, key_values: Any, after: dict[str, Any] | None, stage: Stage) -> None:
        """A row change (converted) into its stage's rows: a key's last one wins."""
        row = None if after is None else self._row(after)
        if not self.key:
            if row is not None:
                self.appended.setdefault(stage, []).append(row)
            return
        key = self._key(key_values)
        if row is not None:
            row.update(zip(self.key, key, strict=True))
        pending = self.pending.setdefault(stage, {})
        pending.pop(key, None)  # in commit order: the last version is the one kept
        pending[key] = row
        spill = self.spills.get(stage)
        if spill is not None:
            spill.supersede(key)  # its version written ahead is stale now

    def held(self) -> int:
        """The rows held (a key's last version, deletes too), every stage's."""
        return sum(map(len, self.pending.values())) + sum(map(len, self.appended.values()))

    def spill(self) -> None:
        """Write every stage's rows held ahead, as data files not committed (:mod:`.spill`)."""
        metadata = self.evolution.metadata(self.table)  # with the columns staged
        for stage in [*self.pending, *(s for s in self.appended if s not in self.pending)]:
            pending, appended = self.pending.pop(stage, {}), self.appended.pop(stage, [])
            spill = self.spills.setdefault(stage, Spill())
            spill.write(self.table, metadata, pending, appended, self.key)

    def rows(self, stage: Stage) -> tuple[set[Any], list[dict[str, Any]]]:
        """A stage's keys touched and rows to write, taken out of the pending ones.

        The keys touched include those written ahead (:attr:`spills`).
        """
        pending, appended = self.pending.pop(stage, {}), self.appended.pop(stage, [])
        touched = set(pending)
        spill = self.spills.get(stage)
        if spill is not None:
            touched |= spill.touched
        return touched, [r for r in pending.values() if r is not None] + appended

    def _row(self, after: Mapping[str, Any]) -> dict[str, Any]:
        if not after.keys() <= self.convert.keys():  # Evolution.see stages or refuses first
            unknown = [c for c in after if c not in self.convert]
            raise Unwritable(f"column {unknown[0]!r} is not in the table (a schema change)")
        row = {}
        for column, convert in self.convert.items():
            value = after.get(column)
            row[column] = None if value is None else _converted(convert, value, column)
        return row

    def _key(self, values: Any) -> tuple[Any, ...]:
        if isinstance(values, Mapping):
            missing = [c for c in self.key if c not in values]
            if missing:
                raise Unwritable(f"the key {values!r} lacks {missing}")
            values = [values[c] for c in self.key]
        if not isinstance(values, list) or len(values) != len(self.key):
            raise Unwritable(f"the key {values!r} is not one of {list(self.key)}")
        out = []
        for column, value in zip(self.key, values, strict=True):
            if value is None:
                raise Unwritable(f"key column {column!r} is null")
            out.append(_converted(self.convert[column], value, column))
        return tuple(out)

    def clear(self) -> None:
        """Forget the rows waiting, those written ahead and the schema changes staged."""
        self.pending.clear()
        self.appended.clear()
        for spill in self.spills.values():
            spill.discard(self.table)
        self.spills.clear()
        self.evolution.forget()
        self.convert = converters(self.table.schema())

    def committed(self, stage: Stage) -> None:
        """A stage's commit is the table's: its schema changes made, its files in it."""
        self.spills.pop(stage, None)
        self.evolution.committed()
        self.convert = converters(self.table.schema())


def _converted(convert: Convert, value: Any, column: str) -> Any:
    try:
        return convert(value)
    except Unwritable as exc:
        raise Unwritable(f"column {column!r}: {exc}") from None
