"""The key a chunk's walk is at: its values, parsed once, and the versions it keeps of it.

A chunk's records come grouped by key, each key's in offset order (commit order). Of the key
being walked, :class:`KeyVersions` keeps its latest version at or below the statement time
(the snapshot's) and its versions after it (the changes the scan hands over in commit
order, up to ``end_time``), counting a version whose time is not above the one kept before
it as a duplicate; when the scan emits a table again at a schema change (``again``), a
version after the time means the stream wrote the key already, and nothing of it is
emitted. When the key changes, the walk takes what to emit (:meth:`KeyVersions.take`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from schemas.hlc import Hlc

from ..batch import PartitionSeen, bad_reason
from ..sources import Change

if TYPE_CHECKING:
    import pyarrow as pa


class Version(NamedTuple):
    """A version kept while its key is walked: its time, the change, where it came from."""

    ts: Hlc
    change: Change | None  # None: undecodable (reported already), its time read from the tail
    keep: bool  # the CDC query's where clause holds (True without one)
    offset: int
    run: pa.RecordBatch  # the slice it is in, and its place there (for the dead-letter topic)
    position: int


class KeyVersions:
    """The key being walked and what is kept of it (see the module)."""

    def __init__(
        self, statement_time: Hlc, end_time: Hlc | None, *, changes: bool, again: bool
    ) -> None:
        self.statement_time = statement_time
        self.end_time = end_time
        self.changes = changes  # also the versions after the statement time
        self.again = again  # a table emitted again: a key with a version after it is left out
        self.key: bytes | None = None
        self.values: list[Any] | None = None
        self.error: str | None = None
        self.best: Version | None = None
        self.later: list[Version] = []
        self.written = False  # (``again``) the key has a version after the time

    def start(self, key: bytes | None, parse: Callable[[bytes], list[Any]]) -> None:
        """A new key: parsed once for all of its versions."""
        self.key = key
        self.values = self.error = None
        if key is not None:
            try:
                self.values = parse(key)
            except Exception as exc:  # reported with each of the key's versions
                self.error = bad_reason(exc)

    def keep(self, version: Version, state: PartitionSeen) -> None:
        """Keep the version if it is the latest at or below T, or a change after it."""
        ts, end_time = version.ts, self.end_time
        if ts <= self.statement_time:
            if self.best is None or ts > self.best.ts:
                self.best = version
            else:
                state.duplicates += 1
        elif self.again:
            self.written = True  # a later version of the key is out already
        elif self.changes and (end_time is None or ts <= end_time):
            if self.later and ts <= self.later[-1].ts:
                state.duplicates += 1
            else:
                self.later.append(version)

    def take(self) -> tuple[Version | None, list[Version]] | None:
        """What to emit of the key just walked (None: nothing), and start afresh."""
        best, later, written = self.best, self.later, self.written
        self.best, self.later, self.written = None, [], False
        if (best is None and not later) or written:
            return None
        return best, later
