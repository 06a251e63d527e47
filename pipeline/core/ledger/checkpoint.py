"""The checkpoint record: what a changefeed needs to resume from Kafka alone.

One JSON record per changefeed in a compacted topic, keyed by changefeed id (contract §6):

    {"format_version": 1, "changefeed_id": "orders", "high_water": "<hlc>",
     "partitions": {"src.orders": {"offsets": [120, 98, null], "resolved": ["<hlc>", …]}},
     "leading": {"resolved": "<hlc>", "partitions": {"src.orders": "0-1,5"}},
     "last_marker": "<hlc>", "marker_sent": "<hlc>", "statement_time": null, "backfill": null,
     "config_fingerprint": "…", "topics": ["src.orders"], "fallback": null,
     "written_at": "<RFC 3339>"}

``offsets`` are the next offsets to read per partition number (``null``: from the start);
``positions`` (Debezium sources) the highest source position read before them, kept with the
offsets at every level that keeps offsets, so a change an upstream sends again after the
resume point is still known as a re-send.
``topics`` are the source topics the record covers, so a table added to the config is known
as one (it gets its own scan) at every level. Beside the record, under the key
``shape/<id>``, the store keeps what the output depends on of the config
(``ChangefeedConfig.shape``: clusters, sources, encoder, topic naming), written when it
changes: a resume checks the config it runs with against it (``update.py``).
``config_fingerprint`` is its hash, for logs. A Debezium changefeed adds ``transactions``:
per transaction topic, what its log needs to resume (``transactions.py``). A whole
database's tables created while it ran are named by their topics in ``appeared`` until a run
reads them (from their start, at the record's high-water mark: ``coordinator/start.py``);
``listed`` names each whole database whose tables the run listed, as configured, so that one
created after the run's last record (a kill before it named it) is known as created too.
``last_marker`` is the marker the record covers: it is broadcast only once the record is
durable, and ``marker_sent`` is the last one known to have reached every output partition,
so a resume re-sends a marker the last run checkpointed but may not have sent.
The record must fit ``frontier_checkpoint_max_bytes``; when it does not, detail is given up
in steps that are each safe, because on resume a partition's resolved time is only ever
*lowered* (more re-emission, never a lost or misplaced row):

1. ``full``: per-partition offsets and resolved times;
2. ``leading``: per-partition offsets, and the leading partitions with their lowest time;
3. ``offsets``: per-partition offsets, every partition resumes at the high-water mark;
4. ``high_water``: no offsets: every partition is read from the start, and rows at or below
   the high-water mark are dropped, which is exactly a replay from the high-water mark.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from schemas.errors import CheckpointError, RecordError
from schemas.hlc import Hlc
from sinks.compacted import CompactedTopic

from . import records
from .frontier import Frontier, Progress, SourcePartition
from .records import (
    BackfillRecord,
    CheckpointRecord,
    Leading,
    TopicProgress,
    TransactionLogRecord,
    read_part,
)

FORMAT_VERSION = 1
SHAPE_PREFIX = "shape/"  # the key of a changefeed's config shape, beside its record
LEVELS = ("full", "leading", "offsets", "high_water")


@dataclass(frozen=True)
class Checkpoint:
    """A changefeed's durable progress."""

    changefeed_id: str
    high_water: Hlc
    offsets: Mapping[SourcePartition, int | None]
    resolved: Mapping[SourcePartition, Hlc] = field(default_factory=dict)
    last_marker: Hlc | None = None  # the marker this record covers (sent after it is durable)
    statement_time: Hlc | None = None
    backfill: Mapping[str, Any] | None = None
    config_fingerprint: str = ""
    level: str = "full"
    marker_sent: Hlc | None = None  # the last marker known to have reached every partition
    topics: tuple[str, ...] | None = None  # the source topics covered (None: an older record)
    # Debezium: each transaction topic's log state (``transactions.py``)
    transactions: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # the highest source position read before each partition's offset, where known
    positions: Mapping[SourcePartition, tuple[int, ...]] = field(default_factory=dict)
    # the topics of a whole database's tables created while it ran, not read yet: the next
    # run reads them from their start (``coordinator/start.py``)
    appeared: tuple[str, ...] = ()
    # each whole database the run listed the tables of, as it was configured: one of its topics
    # the record does not cover was created since (``coordinator/start.py``)
    listed: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        changefeed_id: str,
        frontier: Frontier,
        *,
        last_marker: Hlc | None = None,
        statement_time: Hlc | None = None,
        backfill: Mapping[str, Any] | None = None,
        config_fingerprint: str = "",
        marker_sent: Hlc | None = None,
        topics: tuple[str, ...] | None = None,
        transactions: Mapping[str, Mapping[str, Any]] | None = None,
        appeared: Iterable[str] = (),
        listed: Iterable[str] = (),
    ) -> Checkpoint:
        """The checkpoint of a frontier as it stands."""
        progress = frontier.progress()
        return cls(
            changefeed_id=changefeed_id,
            high_water=frontier.high_water(),
            offsets={sp: p.offset for sp, p in progress.items()},
            resolved=frontier.leading(),
            last_marker=last_marker,
            statement_time=statement_time,
            backfill=backfill,
            config_fingerprint=config_fingerprint,
            marker_sent=marker_sent,
            topics=topics,
            transactions=transactions or {},
            positions={sp: p.position for sp, p in progress.items() if p.position is not None},
            appeared=tuple(sorted(appeared)),
            listed=tuple(sorted(listed)),
        )

    def progress(self, partitions: Iterable[SourcePartition]) -> dict[SourcePartition, Progress]:
        """Where each of ``partitions`` resumes: its offset and the time below which rows drop.

        A partition the checkpoint does not know (new, or dropped by the byte budget) starts
        from the beginning at the high-water mark.
        """
        return {
            sp: Progress(
                self.offsets.get(sp),
                max(self.high_water, self.resolved.get(sp, self.high_water)),
                self.positions.get(sp) if self.offsets.get(sp) is not None else None,
            )
            for sp in partitions
        }

    def encode(self, max_bytes: int) -> bytes:
        """The record's bytes, at the most detailed level that fits ``max_bytes``."""
        for level in LEVELS[LEVELS.index(self.level) :]:
            data = to_record(self, level).encode()
            if len(data) <= max_bytes:
                return data
        raise CheckpointError(
            f"checkpoint of {self.changefeed_id!r} does not fit {max_bytes} bytes even without "
            "offsets; raise frontier_checkpoint_max_bytes"
        )


class CheckpointStore:
    """One changefeed's record in the compacted checkpoint topic."""

    def __init__(self, topic: CompactedTopic, changefeed_id: str, max_bytes: int) -> None:
        self.topic = topic
        self.changefeed_id = changefeed_id
        self.max_bytes = max_bytes
        # the shape as the topic held it when load() read it (one read of the topic for both)
        self._shape: tuple[bytes | None] | None = None

    def load(self) -> Checkpoint | None:
        """The changefeed's checkpoint record, or None for a new changefeed."""
        records = self.topic.read_all()
        self._shape = (records.get(SHAPE_PREFIX + self.changefeed_id),)
        data = records.get(self.changefeed_id)
        if data is None:
            return None
        try:
            checkpoint = decode(data)
        except CheckpointError as exc:
            raise CheckpointError(
                f"topic {self.topic.topic}, key {self.changefeed_id!r}: {exc}; the changefeed "
                "cannot know where it stands (restore the record, or start anew under another id)"
            ) from exc
        if checkpoint.changefeed_id != self.changefeed_id:
            raise CheckpointError(
                f"checkpoint keyed {self.changefeed_id!r} names {checkpoint.changefeed_id!r}"
            )
        return checkpoint

    def load_shape(self) -> dict[str, Any] | None:
        """The config shape kept beside the record (None: none yet, or an older release)."""
        if self._shape is not None:
            data = self._shape[0]
        else:
            data = self.topic.get(SHAPE_PREFIX + self.changefeed_id)
        if data is None:
            return None
        try:
            shape = json.loads(data)
        except ValueError as exc:
            raise CheckpointError(f"unreadable config shape of {self.changefeed_id!r}") from exc
        if not isinstance(shape, dict):
            raise CheckpointError(f"unreadable config shape of {self.changefeed_id!r}")
        return shape

    def write_shape(self, shape: Mapping[str, Any]) -> None:
        """Keep ``shape`` beside the record (durable on return)."""
        data = _dump(dict(shape))
        self.topic.put(SHAPE_PREFIX + self.changefeed_id, data)
        self._shape = (data,)

    def write(self, checkpoint: Checkpoint) -> int:
        """Write ``checkpoint`` (at the level that fits the budget); durable on return.

        Returns the record's size in bytes.
        """
        data = checkpoint.encode(self.max_bytes)
        self.topic.put(self.changefeed_id, data)
        return len(data)


def decode(data: bytes) -> Checkpoint:
    """Parse a checkpoint record; raise CheckpointError for one we cannot use."""
    try:
        record = records.decode(CheckpointRecord, data)
    except RecordError as exc:
        raise CheckpointError(str(exc)) from exc
    try:
        return from_record(record)
    except ValueError as exc:
        raise CheckpointError(f"unreadable checkpoint record: {exc}") from exc


def from_record(record: CheckpointRecord) -> Checkpoint:
    """The checkpoint a record keeps (a ``leading`` record's partitions at its floor)."""
    offsets: dict[SourcePartition, int | None] = {}
    resolved: dict[SourcePartition, Hlc] = {}
    positions: dict[SourcePartition, tuple[int, ...]] = {}
    for topic, parts in record.partitions.items():
        for p, offset in enumerate(parts.offsets):
            offsets[SourcePartition(topic, p)] = offset
        for p, position in enumerate(parts.positions or ()):
            if position is not None:
                positions[SourcePartition(topic, p)] = position
        for p, ts in enumerate(parts.resolved or ()):
            if ts is not None:
                resolved[SourcePartition(topic, p)] = ts
    if record.leading:
        for topic, ranges in record.leading.partitions.items():
            for p in ranges_to_numbers(ranges):
                resolved.setdefault(SourcePartition(topic, p), record.leading.resolved)
    backfill = record.backfill
    return Checkpoint(
        changefeed_id=record.changefeed_id,
        high_water=record.high_water,
        offsets=offsets,
        resolved=resolved,
        last_marker=record.last_marker,
        statement_time=record.statement_time,
        backfill=None if backfill is None else backfill.model_dump(mode="json"),
        config_fingerprint=record.config_fingerprint,
        level=record.fallback or "full",
        marker_sent=record.marker_sent,
        topics=record.topics,
        transactions={
            t: log.model_dump(mode="json", exclude_unset=True)
            for t, log in (record.transactions or {}).items()
        },
        positions=positions,
        appeared=record.appeared,
        listed=record.listed,
    )


def to_record(cp: Checkpoint, level: str) -> CheckpointRecord:
    """The record of ``cp`` at ``level`` (see the module's docstring)."""
    partitions: dict[str, dict[str, Any]] = {}
    if level != "high_water":
        for topic, numbered in _by_topic(cp.offsets).items():
            partitions[topic] = {"offsets": _dense(numbered)}
        for topic, numbered in _by_topic(cp.positions).items():
            partitions.setdefault(topic, {"offsets": []})["positions"] = _dense(numbered)
    if level == "full":
        for topic, numbered in _by_topic(cp.resolved).items():
            partitions.setdefault(topic, {"offsets": []})["resolved"] = _dense(numbered)
    leading = None
    if level == "leading" and cp.resolved:
        leading = Leading(
            resolved=min(cp.resolved.values()),
            partitions={t: numbers_to_ranges(sorted(n)) for t, n in _by_topic(cp.resolved).items()},
        )
    # without offsets the data topics are read from their start: counting starts over
    logs = {
        t: read_part(TransactionLogRecord, state, "checkpoint's transaction log")
        for t, state in cp.transactions.items()
    }
    if level == "high_water":
        logs = {t: log.model_copy(update={"seen": {}}) for t, log in logs.items()}
    return CheckpointRecord(
        format_version=FORMAT_VERSION,
        changefeed_id=cp.changefeed_id,
        high_water=cp.high_water,
        partitions={t: TopicProgress.model_validate(p) for t, p in partitions.items()},
        leading=leading,
        last_marker=cp.last_marker,
        marker_sent=cp.marker_sent,
        statement_time=cp.statement_time,
        backfill=None
        if cp.backfill is None
        else read_part(BackfillRecord, cp.backfill, "checkpoint's backfill"),
        config_fingerprint=cp.config_fingerprint,
        topics=cp.topics,
        transactions=logs or None,
        appeared=cp.appeared,
        listed=cp.listed,
        fallback=None if level == "full" else level,
        written_at=datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
    )


def _dump(shape: dict[str, Any]) -> bytes:
    return json.dumps(shape, separators=(",", ":")).encode()


def _by_topic(values: Mapping[SourcePartition, Any]) -> dict[str, dict[int, Any]]:
    out: dict[str, dict[int, Any]] = {}
    for sp, value in values.items():
        out.setdefault(sp.topic, {})[sp.partition] = value
    return out


def _dense(numbered: Mapping[int, Any]) -> list[Any]:
    size = max(numbered) + 1 if numbered else 0
    return [numbered.get(p) for p in range(size)]


def numbers_to_ranges(numbers: list[int]) -> str:
    """``[0, 1, 2, 5]`` → ``"0-2,5"``: adjacent partitions merged, as the seed merges spans."""
    parts: list[str] = []
    start = prev = None
    for n in numbers:
        if start is None:
            start = prev = n
        elif n == prev + 1:  # type: ignore[operator]
            prev = n
        else:
            parts.append(f"{start}-{prev}" if start != prev else f"{start}")
            start = prev = n
    if start is not None:
        parts.append(f"{start}-{prev}" if start != prev else f"{start}")
    return ",".join(parts)


def ranges_to_numbers(text: str) -> list[int]:
    """``"0-2,5"`` → ``[0, 1, 2, 5]``."""
    out: list[int] = []
    for part in filter(None, text.split(",")):
        low, _, high = part.partition("-")
        out.extend(range(int(low), int(high or low) + 1))
    return out
