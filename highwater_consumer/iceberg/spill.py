"""A big window's rows written ahead as data files, committed with the window's last piece.

The consumer hands a big window over in pieces (the changefeed's initial scan is one window
at its statement time, the whole table); the applier holds a table's rows until the last
piece, when the window is one snapshot. Past ``spill`` rows held for a table, they are
written now as data files (pyiceberg's writer, as :mod:`.writes` does) and **not committed**:
the window's one snapshot at its last piece adds them with the rest, so no reader sees part
of a window, and the rows held never pass the bound.

A key written ahead may change again later in the same window; its later version must win.
The keys written ahead are tracked, not filtered for at the end: each key is kept with the
batch of files holding its version (a key is a few values, a row all of them: the keys of a
table take a fraction of its rows' memory). A key changed again marks its copy in that
batch stale; at the commit, a batch with stale keys is written again without them (the
first files, never committed, deleted). A delete of a key written ahead is the same, and the
key is among the window's touched keys, as every key written ahead is, so copy-on-write
removes its older rows from the table's files.

Files written ahead and never committed, because the applier was killed or the catalog took
another writer's commit and the window was applied by it, are orphans: nothing references
them, the restarted applier writes the window again, and orphan-file removal
(``highwater iceberg maintain``) deletes them. A window refused before its commit was tried
(an unwritable value) deletes its own at once.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files, schema_to_pyarrow
from pyiceberg.table import FileScanTask

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata

log = logging.getLogger(__name__)

Key = tuple[Hashable, ...]


@dataclass
class Batch:
    """Rows written ahead at once: their files, the schema they were written with, the stale."""

    files: list[DataFile]
    schema: Schema  # its field ids are the files'
    stale: set[Key] = field(default_factory=set)  # keys whose later version won


@dataclass
class Spill:
    """One table's rows of one window (or catch-up R) written ahead, not committed."""

    batches: list[Batch] = field(default_factory=list)
    written: dict[Key, int] = field(default_factory=dict)  # key -> its batch (the live copy)
    touched: set[Key] = field(default_factory=set)  # every key written ahead, deletes too
    rows: int = 0  # rows written ahead (an append-only table counts these)
    offered: bool = False  # in a commit tried: its files may be the table's, never deleted

    def supersede(self, key: Key) -> None:
        """``key`` changed again: its copy written ahead is stale."""
        index = self.written.pop(key, None)
        if index is not None:
            self.batches[index].stale.add(key)

    def write(
        self,
        table: Table,
        metadata: TableMetadata,
        pending: Mapping[Key, Mapping[str, Any] | None],
        appended: Sequence[Mapping[str, Any]],
        key: Sequence[str],
    ) -> None:
        """A table's rows held (a key's last version, or None: deleted) as files now.

        Sorted by ``key`` (the table's identifier fields), as :func:`.writes.commit` writes
        a window's rows: files that each hold a narrow range of keys prune well.
        """
        rows = [r for r in pending.values() if r is not None]
        rows += appended
        data = pa.Table.from_pylist(rows, schema=schema_to_pyarrow(metadata.schema()))
        if key and data.num_rows:
            data = data.sort_by([(column, "ascending") for column in key])
        index = len(self.batches)
        self.batches.append(Batch(_files(metadata, table, data), metadata.schema()))
        for values, row in pending.items():
            self.touched.add(values)
            if row is not None:
                self.written[values] = index
        self.rows += len(rows)

    def files(self, table: Table, metadata: TableMetadata, key: Sequence[str]) -> list[DataFile]:
        """The files to commit in ``metadata``'s snapshot (its schema: the commit's).

        A batch with stale keys, or written with field ids the commit's schema gives other
        columns (another writer changed the schema meanwhile), is written again first.
        """
        out = []
        for batch in self.batches:
            if batch.stale or not _same_ids(batch.schema, metadata.schema()):
                again = _rewritten(table, metadata, batch, key)
                if not self.offered:  # never in a commit: nothing references them
                    for file in batch.files:
                        table.io.delete(file.file_path)
                batch.files, batch.schema, batch.stale = again, metadata.schema(), set()
            out += batch.files
        self.offered = True
        return out

    def discard(self, table: Table) -> None:
        """Delete the files written ahead, unless a commit may have taken them."""
        if self.offered:
            return
        for batch in self.batches:
            for file in batch.files:
                try:
                    table.io.delete(file.file_path)
                except OSError as exc:  # an orphan then: maintenance removes it
                    log.warning("%s: not deleted (%s)", file.file_path, exc)
        self.batches.clear()


def _files(metadata: TableMetadata, table: Table, data: pa.Table) -> list[DataFile]:
    if not data.num_rows:
        return []
    files = list(
        _dataframe_to_data_files(metadata, data, table.io, uuid.uuid4(), itertools.count())
    )
    for file in files:
        file.spec_id = metadata.default_spec_id  # pyiceberg sets it when reading a manifest
    return files


def _same_ids(written: Schema, now: Schema) -> bool:
    """Whether every column of ``written`` has its field id in ``now`` still."""
    ids = {f.name: f.field_id for f in now.fields}
    return all(ids.get(f.name) == f.field_id for f in written.fields)


def _rewritten(
    table: Table, metadata: TableMetadata, batch: Batch, key: Sequence[str]
) -> list[DataFile]:
    """A batch's rows but the stale ones, written in ``metadata``'s schema."""
    tasks = [FileScanTask(file) for file in batch.files]
    everything = AlwaysTrue()  # type: ignore[no-untyped-call]
    rows = ArrowScan(metadata, table.io, batch.schema, everything).to_table(tasks)
    if batch.stale:
        keys = zip(*(rows.column(c).to_pylist() for c in key), strict=True)
        rows = rows.filter(pa.array([k not in batch.stale for k in keys], pa.bool_()))
    target = schema_to_pyarrow(metadata.schema())
    names = set(rows.column_names)
    columns = [
        rows.column(f.name).cast(f.type) if f.name in names else pa.nulls(len(rows), f.type)
        for f in target
    ]
    return _files(metadata, table, pa.Table.from_arrays(columns, schema=target))
