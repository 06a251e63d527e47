"""One table's window as one Iceberg commit: copy-on-write, one snapshot, R in its summary.

The rows of keys a window touched (its upserts and deletes) leave the data files that hold
them: each such file is read, the file rewritten without them (or dropped when nothing is
left), and the window's rows are written as new files, all in **one snapshot** (``overwrite``
when a file was replaced, else ``append``; an empty window is an empty ``append``). No
equality or position deletes are written: any Iceberg reader reads the table as it is.
Which files can hold a touched key is found from the files' column bounds (a scan filtered
by the keys' values, column by column: a superset), which row is touched by the whole key.

pyiceberg's public API writes a filtered delete and an append as two snapshots, the first a
state no reader should see; this writes one, with pyiceberg's own file writer
(``_dataframe_to_data_files``, as its ``Transaction.delete`` does; pinned to 0.10).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Collection, Hashable, Mapping, Sequence
from datetime import date
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, In
from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files, schema_to_pyarrow

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import FileScanTask, Table, Transaction
    from pyiceberg.table.metadata import TableMetadata

Key = tuple[Hashable, ...]
_PRUNABLE = (str, int, Decimal, date)  # key values pyiceberg's literals take for bounds


def arrow_schema(table: Table) -> pa.Schema:
    """The Arrow schema pyiceberg writes the table's current schema with."""
    return schema_to_pyarrow(table.schema())


def commit(
    table: Table,
    key: Sequence[str],
    touched: Collection[Key],
    rows: Sequence[Mapping[str, Any]],
    summary: Mapping[str, str],
) -> None:
    """Replace the rows of the ``touched`` keys by ``rows``, one snapshot marked ``summary``.

    ``key``: the key's columns (empty: an append-only table, nothing replaced).
    Raises pyiceberg's ``CommitFailedException`` when another writer committed meanwhile.
    """
    data = pa.Table.from_pylist(list(rows), schema=arrow_schema(table))
    with table.transaction() as transaction:
        metadata = transaction.table_metadata
        commit_uuid, counter = uuid.uuid4(), itertools.count(0)
        replaced = []
        if key and touched and table.current_snapshot() is not None:
            for task in _candidates(table, key, touched):
                rewritten = _without(task, metadata, table, key, touched)
                if rewritten is None:
                    continue  # none of the file's rows is touched
                files = written(metadata, table, rewritten, commit_uuid, counter)
                replaced.append((task.file, files))
        _snapshot(transaction, table, dict(summary), replaced, data, (commit_uuid, counter))


def _snapshot(  # noqa: PLR0917 - one commit's parts
    transaction: Transaction,
    table: Table,
    summary: dict[str, str],
    replaced: list[tuple[DataFile, list[DataFile]]],
    data: pa.Table,
    naming: tuple[uuid.UUID, itertools.count[int]],
) -> None:
    """The one snapshot: files replaced (an overwrite) or none (an append), then new rows."""
    commit_uuid, counter = naming  # the new files' names: one commit's, numbered
    update = transaction.update_snapshot(snapshot_properties=summary)
    producer = update.overwrite(commit_uuid) if replaced else update.fast_append()
    with producer as snapshot:
        snapshot.commit_uuid = commit_uuid
        for original, files in replaced:
            snapshot.delete_data_file(original)
            for file in files:
                snapshot.append_data_file(file)
        if data.num_rows:
            metadata = transaction.table_metadata
            for file in written(metadata, table, data, commit_uuid, counter):
                snapshot.append_data_file(file)


def _candidates(table: Table, key: Sequence[str], touched: Collection[Key]) -> list[FileScanTask]:
    """The data files whose column bounds may hold a touched key."""
    bound: BooleanExpression = AlwaysTrue()  # type: ignore[no-untyped-call]
    for position, column in enumerate(key):
        values: set[Any] = {k[position] for k in touched}
        if all(isinstance(v, _PRUNABLE) and not isinstance(v, bool) for v in values):
            bound = And(bound, In(column, values))
    return list(table.scan(row_filter=bound).plan_files())


def _without(
    task: FileScanTask,
    metadata: TableMetadata,
    table: Table,
    key: Sequence[str],
    touched: Collection[Key],
) -> pa.Table | None:
    """The file's rows but those of the touched keys; None when it holds none of them."""
    everything = AlwaysTrue()  # type: ignore[no-untyped-call]
    rows = ArrowScan(metadata, table.io, metadata.schema(), everything).to_table([task])
    keys = zip(*(rows.column(c).to_pylist() for c in key), strict=True)
    keep = [k not in touched for k in keys]
    if all(keep):
        return None
    return rows.filter(pa.array(keep, pa.bool_()))


def written(
    metadata: TableMetadata,
    table: Table,
    rows: pa.Table,
    commit_uuid: uuid.UUID,
    counter: itertools.count[int],
) -> list[DataFile]:
    """``rows`` as new data files (none for no rows)."""
    if not rows.num_rows:
        return []
    return list(_dataframe_to_data_files(metadata, rows, table.io, commit_uuid, counter))
