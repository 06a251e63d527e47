"""Small data files rewritten into fewer: the same rows at the same R, one snapshot.

Every window the applier commits writes at least one file, so a table fed 5 s windows
gains 720 files an hour, each a few rows to a few MB; readers pay per file. Compaction
takes the current snapshot's files smaller than 3/4 of the target size, packs them (in the
order the scan plans them) into groups of at most the target size, and writes each group as
one file sorted by the key (so the files' column bounds prune copy-on-write and reads).

**The compaction snapshot carries the R of the snapshot it compacted** (and
``highwater.changefeed``, and ``highwater.compacted``): it holds exactly the same rows,
that is exactly the changes at or below R. So the table's last R (the applier's resume
point, ``applier._last``) does not move, :func:`.cuts.history` maps R to the compacted
snapshot (the latest marked R), and the snapshot it replaced is one an expiry may remove
while cut R is kept. Were it unmarked, the cut at R would keep pointing to the many small
files and the table's newest snapshot would hold no R at all.

**Against a live applier**: the commit asserts the table's current snapshot is the one
compacted (pyiceberg's check on the branch); when the applier committed first, the table is
read again and the compaction **rebased**, not redone: a group whose files are all still in
the new snapshot keeps the file written for it (its rows are still exactly those files'
rows), a group that lost a file to the applier's copy-on-write is dropped (its written file
deleted) and the small files not in a kept group are grouped and written again; the
snapshot carries the new snapshot's R. The applier's own commit refused by
a compaction is re-read and retried by the applier (:mod:`.applier`): neither is lost.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.table import TableProperties

from .cuts import CHANGEFEED, COMPACTED, RESOLVED
from .writes import written

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import FileScanTask, Table

_SMALL = 0.75  # a file below this share of the target size is compacted (Iceberg's own)


@dataclass(frozen=True)
class Group:
    """Small files rewritten as one: their paths, and the file holding their rows."""

    originals: tuple[DataFile, ...]
    compacted: tuple[DataFile, ...]


def groups_of(tasks: list[FileScanTask], target: int) -> list[list[FileScanTask]]:
    """The small files packed into groups of at most ``target`` bytes (two files at least)."""
    small = [t for t in tasks if t.file.file_size_in_bytes < target * _SMALL]
    packed: list[list[FileScanTask]] = [[]]
    for task in small:
        size = sum(t.file.file_size_in_bytes for t in packed[-1])
        if packed[-1] and size + task.file.file_size_in_bytes > target:
            packed.append([])
        packed[-1].append(task)
    return [group for group in packed if len(group) > 1]


def rewrite(
    table: Table, key: tuple[str, ...], target: int, done: Iterable[Group] = ()
) -> list[Group]:
    """Each group of the current snapshot's small files written as one file, sorted by key.

    ``done``: groups written already (rebased): their files are not grouped again.
    Nothing is committed: :func:`commit` does, or the written files are orphans.
    """
    if table.current_snapshot() is None:
        return []
    metadata = table.metadata
    out = []
    commit_uuid, counter = uuid.uuid4(), itertools.count(0)
    everything = AlwaysTrue()  # type: ignore[no-untyped-call]
    skip = {f.file_path for group in done for f in group.originals}
    tasks = [t for t in table.scan().plan_files() if t.file.file_path not in skip]
    for group in groups_of(tasks, target):
        rows = ArrowScan(metadata, table.io, metadata.schema(), everything).to_table(group)
        if key:
            rows = rows.sort_by([(column, "ascending") for column in key])
        one_file = metadata.model_copy(  # the group is at most the target: one file
            update={
                "properties": {
                    **metadata.properties,
                    TableProperties.WRITE_TARGET_FILE_SIZE_BYTES: str(rows.nbytes + 1),
                }
            }
        )
        files = written(one_file, table, rows, commit_uuid, counter)
        out.append(Group(tuple(t.file for t in group), tuple(files)))
    return out


def rebased(table: Table, groups: list[Group]) -> tuple[list[Group], list[Group]]:
    """The groups whose files are all in the table's current snapshot, and the others."""
    live = {t.file.file_path for t in table.scan().plan_files()}
    kept: list[Group] = []
    lost: list[Group] = []
    for group in groups:
        whole = all(f.file_path in live for f in group.originals)
        (kept if whole else lost).append(group)
    return kept, lost


def commit(table: Table, groups: list[Group]) -> None:
    """One snapshot replacing each group's files by its compacted file, marked as the current.

    Raises pyiceberg's ``CommitFailedException`` when another writer committed meanwhile.
    """
    current = table.current_snapshot()
    held = {} if current is None or current.summary is None else current.summary
    summary = {k: held[k] for k in (CHANGEFEED, RESOLVED) if k in held}
    summary[COMPACTED] = "true"
    with table.transaction() as transaction:
        update = transaction.update_snapshot(snapshot_properties=summary)
        with update.overwrite() as snapshot:
            for group in groups:
                for original in group.originals:
                    snapshot.delete_data_file(original)
                for file in group.compacted:
                    snapshot.append_data_file(file)


def sizes(table: Table) -> tuple[int, int]:
    """The current snapshot's data files: how many, and their bytes."""
    tasks = list(table.scan().plan_files())
    return len(tasks), sum(t.file.file_size_in_bytes for t in tasks)


def drop(table: Table, groups: list[Group]) -> None:
    """Delete the compacted files of groups never committed (best effort: else orphans)."""
    for group in groups:
        for file in group.compacted:
            try:
                table.io.delete(file.file_path)
            except OSError:
                continue
