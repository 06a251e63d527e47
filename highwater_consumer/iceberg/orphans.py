"""Orphan files: under a table's location, reachable from none of its snapshots or metadata.

Reachable: the current metadata file and those its log lists; each snapshot's manifest
list, its manifests and their live entries' files (data and delete files); statistics
files. Only the file kinds an Iceberg table is made of are ever judged (Parquet, Avro,
ORC, Puffin, ``.metadata.json``): another file under the location is left alone.

The files are listed **before** the table is read: a commit that lands in between (the
applier's) is in what is read, so its files are reachable. A commit still in flight when
the table is read is not: its files are spared only by being younger than ``before``
(:mod:`.maintenance` says how old).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timezone
from typing import TYPE_CHECKING

from pyarrow.fs import FileSelector, FileType
from pyiceberg.io.pyarrow import PyArrowFileIO

from ..decoding import ApplyError

if TYPE_CHECKING:
    from pyiceberg.table import Table

_KINDS = (".parquet", ".avro", ".orc", ".puffin", ".metadata.json")


def _path(location: str) -> str:
    """A location as its file system's path (``file:/x``, ``file:///x``, ``/x`` alike)."""
    return PyArrowFileIO.parse_location(location)[2]


def listed(table: Table) -> dict[str, float]:
    """The files of the kinds a table is made of under its location: path -> modified (s)."""
    io = table.io
    if not isinstance(io, PyArrowFileIO):
        raise ApplyError(
            f"{'.'.join(table.name())}: orphan files are listed through pyarrow's file systems, "
            f"and the table's FileIO is {type(io).__name__} (py-io-impl=…PyArrowFileIO)"
        )
    scheme, netloc, path = PyArrowFileIO.parse_location(table.location())
    system = io.fs_by_scheme(scheme, netloc)
    found = {}
    for info in system.get_file_info(FileSelector(path, recursive=True, allow_not_found=True)):
        if info.type != FileType.File or not info.path.endswith(_KINDS):
            continue
        modified = info.mtime
        if modified.tzinfo is None:
            modified = modified.replace(tzinfo=timezone.utc)
        found[info.path] = modified.timestamp()
    return found


def reachable(table: Table) -> set[str]:
    """The paths the table's metadata reaches (module doc)."""
    metadata = table.metadata
    out = {_path(table.metadata_location)}
    out |= {_path(entry.metadata_file) for entry in metadata.metadata_log}
    out |= {_path(s.statistics_path) for s in metadata.statistics}
    out |= {_path(s.statistics_path) for s in metadata.partition_statistics}
    manifests = {}
    for snapshot in table.snapshots():
        out.add(_path(snapshot.manifest_list))
        for manifest in snapshot.manifests(table.io):
            manifests[manifest.manifest_path] = manifest
    for path, manifest in manifests.items():
        out.add(_path(path))
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            out.add(_path(entry.data_file.file_path))
    return out


def orphans(table: Table, read: Callable[[], Table], before: float) -> list[str]:
    """The table's orphan files modified before ``before`` (seconds since the epoch).

    ``read``: the table as the catalog has it now, called after the files are listed.
    """
    files = listed(table)
    known = reachable(read())
    return sorted(p for p, modified in files.items() if p not in known and modified < before)


def remove(table: Table, paths: list[str]) -> None:
    """Delete ``paths`` (already gone: fine, another run removed it)."""
    scheme, netloc, _ = PyArrowFileIO.parse_location(table.location())
    system = table.io.fs_by_scheme(scheme, netloc)  # type: ignore[attr-defined]
    for path in paths:
        try:
            system.delete_file(path)
        except FileNotFoundError:
            continue
