"""The encoder contract: a change row in, bytes out, per side.

Following confluent-kafka's serializers, an encoder is a small object with one method per side
of a Kafka record, each given a :class:`Context` naming the output topic; ``None`` for a value
means a tombstone. Encoders are pure Python (no Spark): the changefeed calls them on the
executors, once per row, inside its Arrow loop (``pipeline/core/batch/loop.py``), so they are
written for speed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, Protocol

from schemas.errors import EncodingError
from schemas.hlc import Hlc

Envelope = Literal["wrapped", "bare", "key_only", "row", "enriched"]


class EnvelopeOptions(Protocol):
    """The envelope options an encoder needs (``pipeline.config.EncoderConfig`` has them)."""

    @property
    def envelope(self) -> Envelope:
        """``wrapped``, ``bare``, ``key_only``, ``row`` or ``enriched``."""

    @property
    def enriched_properties(self) -> Sequence[str]:
        """Under ``enriched``: the blocks it adds (``source``)."""

    @property
    def updated(self) -> bool:
        """Include the change's time."""

    @property
    def mvcc_timestamp(self) -> bool:
        """Include the row's own commit time."""

    @property
    def diff(self) -> bool:
        """Include the previous version as ``before``."""

    @property
    def key_in_value(self) -> bool:
        """Repeat the key in the value."""

    @property
    def topic_in_value(self) -> bool:
        """Include the output topic's name."""

    @property
    def key_column(self) -> str | None:
        """Key the records by this column instead of the primary key (None: the primary key)."""

    @property
    def headers_json_column_name(self) -> str | None:
        """The column whose JSON object becomes each record's headers, left out of the value."""


class SourceText(NamedTuple):
    """A change's key and value as the source wrote them (JSON, already validated).

    ``members`` are the value's top-level member names, in order; the source adapter gives a
    text only where its ``updated`` member is written as the encoders write a time. An encoder
    whose output value would be these very members with these values passes the value's bytes
    on instead of writing them again: exact by construction, and the cheapest work there is.
    Keys are always written in one form (partitioning and compaction go by their bytes); the
    source's key text tells whether the key's numbers were read exactly.
    """

    key: bytes
    value: bytes
    members: tuple[str, ...]


class Origin(NamedTuple):
    """Where a change came from, as the ``enriched`` envelope's ``source`` block says it.

    The source record (topic, partition, offset: None for an initial scan's row), the
    database's own position of the change where the source gives one (Debezium's LSNs or
    binlog file, position and row, as the changefeed orders them), its transaction's id, and
    the names of the key's columns (None: not known).
    """

    topic: str | None
    partition: int | None
    offset: int | None
    position: tuple[int, ...] | None = None
    transaction: str | None = None
    key_names: tuple[str, ...] | None = None


class ChangeRow(NamedTuple):
    """One version of one row, as the pipeline hands it to an encoder.

    ``updated`` is the time the changefeed reports (the statement time during an initial
    scan); ``mvcc_timestamp`` is the row's own commit time. ``source``: the source's text of
    this very change (a stream's row whose values the pipeline did not change), or None.
    ``op`` (insert, update, delete, upsert) and ``origin``: what the source said of it, given
    to an encoder that writes them (``envelope: enriched``), else None.
    """

    table: str
    key: list[Any]
    after: dict[str, Any] | None
    before: dict[str, Any] | None
    updated: Hlc
    mvcc_timestamp: Hlc
    source: SourceText | None = None
    op: str | None = None
    origin: Origin | None = None


@dataclass(frozen=True)
class Context:
    """Where the encoded bytes go."""

    topic: str


class Encoder(Protocol):
    """Turns change rows and resolved markers into record bytes."""

    #: The top-level members of a source value (``SourceText.members``) that this encoder
    #: passes on as it came; None: it writes every value itself.
    verbatim: tuple[str, ...] | None

    #: How the changefeed's JVM walk (``pipeline/core/batch/walk.py``) writes this encoder's records
    #: (plain data: ``kind`` and what that kind needs); None: only the Python loop does.
    walk: Mapping[str, Any] | None

    #: How the JVM writes this encoder's initial-scan rows of a native source
    #: (``pipeline/core/scan/scan_walk.py``); None: only the Python scan does.
    scan_walk: Mapping[str, Any] | None

    #: Whether it writes what the source said of a change (``ChangeRow.op`` and ``origin``:
    #: ``envelope: enriched``); the loop and the scan give them only then.
    wants_origin: bool

    def key(self, row: ChangeRow, ctx: Context) -> bytes:
        """The record key."""
        ...

    def value(self, row: ChangeRow, ctx: Context) -> bytes | None:
        """The record value; None is a tombstone."""
        ...

    def resolved(self, ts: Hlc, ctx: Context) -> bytes:
        """The value of a resolved marker (its key is null)."""
        ...


def key_column_value(row: ChangeRow, column: str) -> Any:
    """The value of ``column`` that keys ``row``'s record (``key_column``).

    From the row's new version, or a delete's old one; a change that carries neither (a
    delete whose source wrote no ``before``) cannot be keyed: an :class:`EncodingError`.
    """
    image = row.after if row.after is not None else row.before
    if image is None or column not in image:
        what = "its new version" if row.after is not None else "a delete without its before image"
        raise EncodingError(
            "key",
            f"key_column {column!r}: the change carries no value of it ({what}; a delete needs "
            "the source's before image)",
        )
    return image[column]


def key_names(row: ChangeRow, primary: Sequence[str] | None, form: str) -> tuple[str, ...]:
    """The names of ``row``'s key columns: the source's (its origin), else ``primary``'s.

    ``form`` names the output that needs them; unknown names are an :class:`EncodingError`.
    """
    names: Sequence[str] | None = None if row.origin is None else row.origin.key_names
    names = names or primary
    if names is None or len(names) != len(row.key):
        raise EncodingError(
            "key",
            f"{form} writes the key as its columns by name, and the names of {len(row.key)} "
            f"key value(s) of table {row.table!r} are not known (declare its primary_key with "
            "table_schema)",
        )
    return tuple(names)
