"""One table's window as one Iceberg commit: copy-on-write, one snapshot, R in its summary.

The rows of keys a window touched (its upserts and deletes) leave the data files that hold
them: each such file is read, the file rewritten without them (or dropped when nothing is
left; a small file's rows left are written with the window's, so small files do not pile
up), and the window's rows are written as new files, all in **one snapshot** (``overwrite``
when a file was replaced, else ``append``; an empty window is an empty ``append``). No
equality or position deletes are written: any Iceberg reader reads the table as it is.
Which files can hold a touched key is found from the files' column bounds (a scan filtered
by the keys' values, column by column: a superset), which row is touched by the whole key.

pyiceberg's public API writes a filtered delete and an append as two snapshots, the first a
state no reader should see; this writes one, with pyiceberg's own file writer
(``_dataframe_to_data_files``, as its ``Transaction.delete`` does; pinned to 0.10).

pyiceberg 0.10's overwrite carries every manifest of the snapshot before it into the new one,
also those left holding nothing but the entries of files deleted earlier: one more a window,
each read by every later commit and scan (over an hour of windows, the commit's time grew
by ~5 ms a window). Iceberg's Java writer drops such a manifest from the snapshot after the
one that deleted its files; so does :func:`_snapshot` (:func:`_live`).
"""

from __future__ import annotations

import bisect
import itertools
import uuid
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.conversions import from_bytes
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files, schema_to_pyarrow
from pyiceberg.types import DecimalType, IntegerType, LongType, PrimitiveType, StringType

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile, ManifestFile
    from pyiceberg.table import FileScanTask, Table, Transaction
    from pyiceberg.table.metadata import TableMetadata

Key = tuple[Hashable, ...]
# A file rewritten smaller than this (compaction's bound: 3/4 of its 128 MiB target) is
# written again together with the window's new rows, not as a file of its own: each window
# leaves one file for its small ones, as compaction would, instead of one more a window.
SMALL_FILE = 96 * 1024 * 1024
_PRUNABLE = (str, int, Decimal)  # key values compared with their columns' bounds as read
_BOUNDED = (IntegerType, LongType, StringType, DecimalType)  # bounds read back as those


def arrow_schema(table: Table) -> pa.Schema:
    """The Arrow schema pyiceberg writes the table's current schema with."""
    return schema_to_pyarrow(table.schema())


def commit(
    table: Table,
    key: Sequence[str],
    touched: Collection[Key],
    rows: Sequence[Mapping[str, Any]],
    summary: Mapping[str, str],
    *,
    alter: Callable[[Transaction], None] | None = None,
    ahead: Callable[[TableMetadata], Sequence[DataFile]] | None = None,
) -> None:
    """Replace the rows of the ``touched`` keys by ``rows``, one snapshot marked ``summary``.

    ``key``: the key's columns (empty: an append-only table, nothing replaced). ``alter``
    stages schema changes in the commit's transaction first (:mod:`.evolution`): the files
    are written in the schema they make. ``ahead``: the data files written ahead for it
    (:mod:`.spill`), given the commit's metadata. Raises pyiceberg's
    ``CommitFailedException`` when another writer committed meanwhile.
    """
    with table.transaction() as transaction:
        if alter is not None:
            alter(transaction)
        metadata = transaction.table_metadata
        data = pa.Table.from_pylist(list(rows), schema=schema_to_pyarrow(metadata.schema()))
        if key and data.num_rows:  # files that each hold a narrow range of keys prune well
            data = data.sort_by([(column, "ascending") for column in key])
        commit_uuid, counter = uuid.uuid4(), itertools.count(0)
        replaced: list[DataFile] = []
        added: list[DataFile] = []
        merged = [data]  # small files' rows, rewritten with the window's own
        if key and touched and table.current_snapshot() is not None:
            for task in _candidates(table, key, touched):
                rewritten = _without(task, metadata, table, key, touched)
                if rewritten is None:
                    continue  # none of the file's rows is touched
                replaced.append(task.file)
                if task.file.file_size_in_bytes < SMALL_FILE:
                    merged.append(rewritten.cast(data.schema))
                else:
                    added += written(metadata, table, rewritten, commit_uuid, counter)
        together = data if len(merged) == 1 else pa.concat_tables(merged)
        if key and len(merged) > 1:
            together = together.sort_by([(column, "ascending") for column in key])
        added += written(metadata, table, together, commit_uuid, counter)
        added += [] if ahead is None else ahead(metadata)
        _snapshot(transaction, dict(summary), replaced, added, commit_uuid)


def _snapshot(
    transaction: Transaction,
    summary: dict[str, str],
    replaced: list[DataFile],
    added: list[DataFile],
    commit_uuid: uuid.UUID,
) -> None:
    """The one snapshot: files replaced (an overwrite) or none (an append), and new files."""
    update = transaction.update_snapshot(snapshot_properties=summary)
    producer = update.overwrite(commit_uuid) if replaced else update.fast_append()
    if replaced:  # pyiceberg's overwrite keeps manifests of files deleted before: not carried
        carried = producer._existing_manifests
        producer._existing_manifests = lambda: _live(carried())  # type: ignore[method-assign]
    with producer as snapshot:
        snapshot.commit_uuid = commit_uuid
        for original in replaced:
            snapshot.delete_data_file(original)
        for file in added:
            snapshot.append_data_file(file)


def _live(manifests: list[ManifestFile]) -> list[ManifestFile]:
    """The manifests that still list a file of the table (added or existing).

    A manifest whose entries all say "deleted" records an earlier snapshot's deletes: that
    snapshot keeps it; the new one has no use for it (as pyiceberg's own fast append, and
    Java's writers, leave it out). One without counts (a v1 table's) is kept.
    """
    return [m for m in manifests if m.has_added_files() or m.has_existing_files()]


def _candidates(table: Table, key: Sequence[str], touched: Collection[Key]) -> list[FileScanTask]:
    """The data files whose column bounds may hold a touched key (a superset).

    Pruned here, column by column, by bisecting the touched values sorted against each
    file's bounds: a scan filtered by ``In(column, values)`` builds and binds a literal a
    value, seconds for a window of 25,000 keys, where this costs a bisection a file.
    """
    schema = table.schema()
    columns = []
    for position, column in enumerate(key):
        field = schema.find_field(column)
        values: set[Any] = {k[position] for k in touched}
        if not isinstance(field.field_type, _BOUNDED) or not all(
            isinstance(v, _PRUNABLE) and not isinstance(v, bool) for v in values
        ):
            continue
        try:
            columns.append((field.field_id, field.field_type, sorted(values)))
        except TypeError:  # values of mixed kinds: no pruning on this column
            continue
    tasks = table.scan().plan_files()
    return [t for t in tasks if all(_may_hold(t.file, *column) for column in columns)]


def _may_hold(file: DataFile, field_id: int, kind: PrimitiveType, values: list[Any]) -> bool:
    """Whether a value of ``values`` (sorted) is within the file's bounds of the column."""
    lower, upper = (file.lower_bounds or {}).get(field_id), (file.upper_bounds or {}).get(field_id)
    if lower is None or upper is None:
        return True
    low, high = from_bytes(kind, lower), from_bytes(kind, upper)
    at = bisect.bisect_left(values, low)
    return at < len(values) and values[at] <= high


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
    if len(key) == 1:  # vectorised: a million rows' keys never become Python objects
        column = rows.column(key[0])
        try:
            wanted = pa.array([k[0] for k in touched], type=column.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
            wanted = None
        if wanted is not None:
            hit = pc.is_in(column, value_set=wanted)
            if not pc.any(hit).as_py():
                return None
            return rows.filter(pc.invert(hit))
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
