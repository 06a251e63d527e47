"""What crosses to our Java (``pipeline/jvm/walk``), declared once: plans, progress rows, options.

The facade (``jvm.py``) says which Java is called; this module says what the calls carry, as
frozen models with the one method that writes each as the Java side reads it:

* :class:`WalkPlan`: a micro-batch's walk (``Walk.java`` reads it; :func:`.walk.walk_plan`
  builds it);
* :class:`ScanWalkPlan`: an initial scan's chunk walked (``Scan.java``;
  ``scan_walk.scan_walk_plan``);
* :class:`DeliveryOptions`: exactly once's writer options (``Delivery.java``;
  ``progress.Claim.options``), their keys declared here only;
* :func:`extra_headers_settings`: the producer settings naming our interceptor of fixed
  headers (``ExtraHeaders.java``);
* :class:`PieceBegin`, :class:`PieceEnd`, :class:`PieceAbandon`: the progress rows a task
  writes around each source partition's stretch under exactly once (``Sink.java``'s
  ``PieceRows`` reads them; the Python loop and the Python scan write them).

``tests/golden/boundary.json`` holds examples of each as these models write them, and the
fields they carry; ``tests/unit/test_boundary_golden.py`` holds the models to it, and the
JUnit tests of ``pipeline/jvm/walk`` (``BoundaryTest``) read every example with the Java side's
own readers. A key renamed on either side fails one of them. The progress *records* (the
progress topic's values) are :class:`~pipeline.core.ledger.ProgressRecord`, in the same file.

Times cross as ``[wall, logical]`` pairs of Java longs (HLC text in options and progress rows).
Pure Python: no Spark.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from schemas.hlc import Hlc

from ..sources import LogPosition
from . import jvm

# The walk keeps times as two Java longs, and reads only times whose wall fits one: a time
# above this (a marker near the year 2262) is the same to it as this.
CEILING: Final = Hlc(2**63 - 1, 9_999_999_999)


def _pair(ts: Hlc) -> list[int]:
    """A time as the walk reads it: ``[wall, logical]``, at most :data:`CEILING`."""
    return list(min(ts, CEILING))


@dataclass(frozen=True)
class WalkRoute:
    """Where a source topic's changes go, and how the walk writes them."""

    topic: str  # the output topic
    encoding: Mapping[str, Any]  # the encoder's walk spec (``Encoder.walk``)
    format: str  # the source format: native, debezium, canal-json
    registry: Mapping[str, str] | None = None  # Debezium's Avro: its writer schemas' registry
    counted: bool = False  # its transactions' places kept in the summary

    def to_dict(self) -> dict[str, Any]:
        """The route as :meth:`WalkPlan.to_json` writes it."""
        return {
            "topic": self.topic,
            "encoding": self.encoding,
            "format": self.format,
            "registry": self.registry,
            "counted": self.counted,
        }


@dataclass(frozen=True)
class WalkPlan:
    """A micro-batch's walk: routes, each source partition's floor and position, the room."""

    routes: Mapping[str, WalkRoute]  # source topic -> its route
    thresholds: Mapping[tuple[str, int], Hlc]  # (topic, partition) -> its floor
    new_partition_floor: Hlc  # for a source partition not in ``thresholds``
    positions: Mapping[tuple[str, int], LogPosition]  # the highest source position read (Debezium)
    commits: Mapping[str, Mapping[str, Hlc]]  # Debezium binlogs: each transaction's END's time
    room: int  # the largest key and value an output record may have

    def to_json(self) -> str:
        """The plan's text, as ``Walk.java`` reads it (times at most :data:`CEILING`)."""
        return json.dumps(
            {
                "routes": {source: route.to_dict() for source, route in self.routes.items()},
                "thresholds": [[t, p, *_pair(ts)] for (t, p), ts in self.thresholds.items()],
                "new_partition_floor": _pair(self.new_partition_floor),
                "positions": [
                    [t, p, list(position)] for (t, p), position in self.positions.items()
                ],
                "commits": {
                    topic: {tx: _pair(end) for tx, end in ends.items()}
                    for topic, ends in self.commits.items()
                },
                "room": self.room,
            }
        )


@dataclass(frozen=True)
class ScanWalkPlan:
    """An initial scan's chunk walked in the JVM: one source partition's range, its envelope."""

    source: str  # the source topic
    partition: int
    span: tuple[int, int]  # the chunk's offsets [first, end)
    topic: str  # the output topic
    members: Sequence[str]  # the JSON encoder's envelope (``Encoder.scan_walk``)
    statement_time: Hlc
    end_time: Hlc | None
    changes: bool  # the versions after the statement time too
    room: int

    def to_json(self) -> str:
        """The plan's text, as ``Scan.java`` reads it."""
        end = self.end_time
        return json.dumps(
            {
                "source": self.source,
                "partition": self.partition,
                "span": list(self.span),
                "topic": self.topic,
                "members": list(self.members),
                "statement_time": [self.statement_time.wall, self.statement_time.logical],
                "end_time": None if end is None else [end.wall, end.logical],
                "changes": self.changes,
                "room": self.room,
            }
        )


# The writer options of exactly once (Spark's option checks never see them: ``Delivery.kafka``
# takes out every option of the prefix before Spark's Kafka writer does).
OPTION_PREFIX: Final = "highwater."
DELIVERY: Final = OPTION_PREFIX + "delivery"
TRANSACTIONAL_ID_PREFIX: Final = OPTION_PREFIX + "transactional.id.prefix"
PROGRESS_TOPIC: Final = OPTION_PREFIX + "progress.topic"
GENERATION: Final = OPTION_PREFIX + "generation"
PIECE_KIND: Final = OPTION_PREFIX + "piece.kind"
SCAN_TIME: Final = OPTION_PREFIX + "scan.time"


# The changefeed's fixed headers (``sink.extra_headers``): a producer interceptor of ours puts
# them on every record the rows' producers send (``ExtraHeaders.java``), whichever way the
# rows are written; the producer setting carries them as a JSON object.
EXTRA_HEADERS_INTERCEPTOR: Final = jvm.EXTRA_HEADERS
EXTRA_HEADERS: Final = OPTION_PREFIX + "extra.headers"


def extra_headers_settings(
    headers: Mapping[str, str], interceptors: str | None = None
) -> dict[str, str]:
    """Producer settings putting ``headers`` on every record, after ``interceptors``' own."""
    if not headers:
        return {}
    named = [c for c in (interceptors or "").split(",") if c.strip()]
    return {
        "interceptor.classes": ",".join([*named, EXTRA_HEADERS_INTERCEPTOR]),
        EXTRA_HEADERS: json.dumps(dict(headers), ensure_ascii=False),
    }


@dataclass(frozen=True)
class DeliveryOptions:
    """Exactly once, as the Java side's writers take it (``Delivery.parse``)."""

    transactional_id_prefix: str  # e.g. ``highwater-<changefeed>``
    progress_topic: str
    generation: int  # the run's
    kind: str = "rows"  # the stream's rows, or ``scan``: an initial scan's chunks
    scan_time: Hlc | None = None  # a scan's: the snapshot's time

    def options(self) -> dict[str, str]:
        """The writer options (the scan time only when there is one)."""
        options = {
            DELIVERY: "exactly_once",
            TRANSACTIONAL_ID_PREFIX: self.transactional_id_prefix,
            PROGRESS_TOPIC: self.progress_topic,
            GENERATION: str(self.generation),
            PIECE_KIND: self.kind,
        }
        if self.scan_time is not None:
            options[SCAN_TIME] = str(self.scan_time)
        return options


@dataclass(frozen=True)
class PieceBegin:
    """A begin row's progress: a source partition's piece starts at offset ``first``."""

    topic: str
    partition: int
    first: int

    def to_json(self) -> str:
        """The row's progress text, as ``ProgressRow.parse`` reads a begin row's."""
        return json.dumps({"topic": self.topic, "partition": self.partition, "first": self.first})


@dataclass(frozen=True)
class PieceEnd:
    """An end row's progress: where the piece's partition resumes once it committed.

    ``resolved``: the floor at ``next_offset`` (None for a scan's chunk); ``position``: the
    highest source position read (Debezium).
    """

    next_offset: int
    resolved: Hlc | None = None
    position: LogPosition | None = None

    def to_json(self) -> str:
        """The row's progress text, as ``ProgressRow.parse`` reads an end row's."""
        position = None if self.position is None else list(self.position)
        resolved = None if self.resolved is None else str(self.resolved)
        return json.dumps(
            {"next_offset": self.next_offset, "resolved": resolved, "position": position}
        )


@dataclass(frozen=True)
class PieceAbandon:
    """An end row's progress: the piece is not done, nothing of it commits (``Pieces.abandon``)."""

    def to_json(self) -> str:
        """The row's progress text (``ProgressRow.parse``: abandoned)."""
        return json.dumps({"abandon": True})


ProgressRow = PieceBegin | PieceEnd | PieceAbandon
