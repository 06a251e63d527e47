"""The records Highwater writes to Kafka (and reads back), each declared once.

* :class:`CheckpointRecord`: checkpoint topic, key ``<changefeed id>`` (``checkpoint.py``);
* :class:`SpecRecord`: jobs topic, key ``spec/<changefeed id>`` (``lifecycle.py``);
* :class:`StatusRecord`: jobs topic, key ``<changefeed id>`` (``status.py``);
* :class:`SafepointRecord`: safepoint topic, key ``<service id>`` (``safepoints.py``);
* :class:`GcRecord`: safepoint topic, key ``__gc_safe_point__:<cluster>`` (``safepoints.py``).

Parts travel inside them: the initial scan's :class:`BackfillRecord` and each Debezium
transaction topic's :class:`TransactionLogRecord` in the checkpoint; the scan's
:class:`ScanProgressRecord`, the changefeed's safepoint (:class:`SafepointFields`) and each
table's :class:`TableSchemaStatus` in the status. They are versioned by the record around
them. That nesting across owners is why the records live in one module rather than beside
their owners: a record reads whole here. The owners keep their domain types (what the
coordinator works with) and convert to and from these.

**Versions.** Every record carries ``format_version``. The checkpoint always did (1); the
spec, status, safepoint and GC records were written without one before this module, and
such a record is version 1. A reader refuses a version it does not read by name
(:class:`~schemas.errors.UnknownRecordVersion`), before it looks at any other field: a new
field, a field removed or retyped is a new version, and unknown fields are refused, so no
release half-reads a newer record. A field that was optional on read stays optional (it
was read with a default). Fields are in the order the encoders wrote them before, so the
bytes are the same but for the new ``format_version``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    ValidationError,
    ValidationInfo,
    field_serializer,
    model_validator,
)

from schemas.errors import RecordError, RecordRef, UnknownRecordVersion
from schemas.hlc import Hlc


def _hlc(value: object) -> Hlc:
    if isinstance(value, Hlc):
        return value
    if not isinstance(value, str):
        raise ValueError(f"not an HLC timestamp string: {type(value).__name__}")
    return Hlc.parse(value)


def _ref(value: object) -> RecordRef:
    if isinstance(value, RecordRef):
        return value
    if not isinstance(value, str):
        raise ValueError(f"not a topic/partition@offset string: {type(value).__name__}")
    return RecordRef.parse(value)


# An HLC on the wire: "<wall nanos>.<10-digit logical>" (contract §2)
HlcText = Annotated[Hlc, PlainValidator(_hlc), PlainSerializer(str, return_type=str)]
# A source record: "topic/partition@offset"
RecordRefText = Annotated[RecordRef, PlainValidator(_ref), PlainSerializer(str, return_type=str)]


def _none(value: object) -> bool:
    return value is None


class _Part(BaseModel):
    """A part of a record: frozen, no field it does not declare."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, validate_by_name=True, serialize_by_alias=True
    )


class Record(_Part):
    """A record on its own in a topic: it carries its format version."""

    kind: ClassVar[str]  # how errors name it
    versions: ClassVar[tuple[int, ...]] = (1,)  # the format versions this release reads
    # the version of a record written without ``format_version`` (None: it must say)
    unversioned: ClassVar[int | None] = 1

    format_version: Literal[1] = 1

    @model_validator(mode="before")
    @classmethod
    def _known_version(cls, data: Any, info: ValidationInfo) -> Any:
        """Refuse a version this release does not read, before anything else is looked at."""
        if isinstance(data, Mapping):
            version = data.get("format_version", cls.unversioned)
            known = not isinstance(version, bool) and version in cls.versions
            if version is not None and not known:
                where = (info.context or {}).get("where")
                raise UnknownRecordVersion(cls.kind, version, cls.versions, where=where)
        return data

    def encode(self) -> bytes:
        """The record's bytes (compact JSON, UTF-8)."""
        return self.model_dump_json().encode()


R = TypeVar("R", bound=Record)
P = TypeVar("P", bound=_Part)


def decode(model: type[R], data: bytes | str, *, where: str | None = None) -> R:
    """Read a ``model`` record; a :class:`~schemas.errors.RecordError` names what is wrong.

    ``where``: where it was read (topic and key, or partition and offset), for the error.
    """
    try:
        return model.model_validate_json(data, context={"where": where})
    except ValidationError as exc:
        raise record_error(model.kind, exc, where=where) from exc


def read_part(model: type[P], data: Any, kind: str) -> P:
    """Read a part of a record from its JSON form (``kind`` names it for the error)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise record_error(kind, exc) from exc


def record_error(kind: str, exc: ValidationError, *, where: str | None = None) -> RecordError:
    """The error that names each field at fault, and why (no field values: they may be big)."""
    problems, fields = [], []
    for error in exc.errors(include_url=False, include_input=False, include_context=False):
        path = ".".join(str(part) for part in error["loc"])
        if error["type"] == "json_invalid":
            problems.append(f"not JSON ({error['msg']})")
        elif not path:
            problems.append(f"not a JSON object ({error['msg']})")
        else:
            fields.append(path)
            problems.append(f"field {path!r}: {error['msg'].removeprefix('Value error, ')}")
    return RecordError(kind, "; ".join(problems), where=where, fields=fields)


# -- the checkpoint (checkpoint.py) -------------------------------------------------------------


class TopicProgress(_Part):
    """One source topic's partitions in the checkpoint, each list indexed by partition."""

    offsets: tuple[int | None, ...] = ()  # the next offset to read (None: from the start)
    # the highest source position read before the offset (Debezium), where known
    positions: tuple[tuple[int, ...] | None, ...] | None = Field(None, exclude_if=_none)
    resolved: tuple[HlcText | None, ...] | None = Field(None, exclude_if=_none)  # level full


class Leading(_Part):
    """Level ``leading``: the partitions above the high-water mark, at the lowest of them."""

    resolved: HlcText
    partitions: dict[str, str]  # topic -> partition ranges, "0-2,5"


class BackfillTopic(_Part):
    """One source topic's chunks of an unfinished initial scan, indexed by partition."""

    starts: tuple[int, ...] = Field(alias="from")
    ends: tuple[int, ...] = Field(alias="to")
    done: str  # the partitions done, as ranges "0-3,7"


class BackfillRecord(_Part):
    """An unfinished initial scan (``backfill.py``)."""

    partitions: dict[str, BackfillTopic]
    rows: int = 0
    time: HlcText | None = None  # the snapshot's time, when not the statement time
    # the schema change a table is emitted again at: [topic, partition, offset]
    change: tuple[str, int, int] | None = Field(None, exclude_if=_none)


class TransactionLogRecord(_Part):
    """What a Debezium transaction topic's log needs to resume (``transactions.py``)."""

    offset: int | None = None  # where to read the transaction topic again
    resolved: HlcText
    # transaction id -> [places as ranges, lowest time, highest time]
    seen: dict[str, tuple[str, HlcText | None, HlcText | None]] = Field(default_factory=dict)
    horizon: dict[str, int] | None = None  # "topic/partition" -> end offset
    started: bool = False
    # BEGINs without their END: id -> [times read, commit time, first offset, last offset]
    open: dict[str, tuple[int, HlcText, int, int]] = Field(default_factory=dict)
    passed: dict[str, HlcText] = Field(default_factory=dict)  # id -> END time, in order passed
    # a whole database's tables an END named before the changefeed read them (created since
    # it started): their topics are read from their start when added (``start.py``)
    appeared: list[str] = Field(default_factory=list)


class CheckpointRecord(Record):
    """A changefeed's durable progress (``checkpoint.py`` says what each level gives up)."""

    kind: ClassVar[str] = "checkpoint"
    unversioned: ClassVar[int | None] = None  # it always said

    format_version: Literal[1]
    changefeed_id: str
    high_water: HlcText
    partitions: dict[str, TopicProgress] = Field(default_factory=dict)
    leading: Leading | None = None
    last_marker: HlcText | None = None
    marker_sent: HlcText | None = None
    statement_time: HlcText | None = None
    backfill: BackfillRecord | None = None
    config_fingerprint: str = ""
    topics: tuple[str, ...] | None = None  # None: written before tables could be added
    transactions: dict[str, TransactionLogRecord] | None = Field(None, exclude_if=_none)
    # the topics of a whole database's tables created while it ran, not read yet
    appeared: tuple[str, ...] = Field((), exclude_if=lambda v: not v)
    # each whole database whose tables the run listed (``DatabaseConfig.identity``): a topic of
    # one of them the record does not cover was created since (``start.py``)
    listed: tuple[str, ...] = Field((), exclude_if=lambda v: not v)
    fallback: Literal["leading", "offsets", "high_water"] | None = None  # None: full
    written_at: str | None = None  # RFC 3339

    @field_serializer("transactions")
    def _logs_as_given(self, logs: dict[str, TransactionLogRecord] | None) -> dict[str, Any] | None:
        """Each log with the fields it was given (one read from an older record: as it was)."""
        if logs is None:
            return None
        return {t: log.model_dump(mode="json", exclude_unset=True) for t, log in logs.items()}


# -- the changefeed spec (lifecycle.py) ---------------------------------------------------------


Desired = Literal["running", "paused", "removed"]


class SpecRecord(Record):
    """What operators asked of one changefeed."""

    kind: ClassVar[str] = "changefeed spec"

    changefeed_id: str
    desired: Desired
    config: str = ""  # the YAML text, ${VAR} left as written
    base_dir: str = ""  # where its relative paths start
    reason: str | None = None  # why it was paused
    bad_record: RecordRefText | None = None  # the record it paused at (on_error: pause)
    skip_bad_record: bool = False
    updated_at: str = ""  # RFC 3339


# -- the safepoints (safepoints.py) ------------------------------------------------------------


class SafepointFields(_Part):
    """A service safepoint: its own record, and what the job status shows of it."""

    service_id: str
    safepoint: HlcText
    ttl: float  # seconds
    updated_at: str  # RFC 3339
    expires_at: str | None = None  # RFC 3339: updated_at + ttl (written, never read)
    owner: str  # "user", or "changefeed:<id>"
    cluster: str = ""
    offsets: dict[str, dict[str, int]] = Field(default_factory=dict)  # topic -> partition -> offset


class SafepointRecord(SafepointFields, Record):
    """A service safepoint in the safepoint topic."""

    kind: ClassVar[str] = "safepoint"


class GcRecord(Record):
    """A cluster's GC safe point: no source data at or below it may be relied on."""

    kind: ClassVar[str] = "GC safe point"

    gc_safe_point: HlcText
    updated_at: str | None = None  # RFC 3339


# -- exactly-once delivery (progress/claim.py; written by Pieces.java too) ------------------------


class ProgressRecord(Record):
    """A source partition's committed progress: the last record of each of its transactions.

    ``next_offset`` None: a claim of a partition nothing was committed for yet.
    """

    kind: ClassVar[str] = "progress record"

    topic: str
    partition: int
    next_offset: int | None
    resolved: HlcText | None = None  # the partition's floor at next_offset
    position: tuple[int, ...] | None = None  # the highest source position read (Debezium)
    generation: int
    time: HlcText | None = None  # a scan chunk's (key scan/…): the snapshot's time


class GenerationRecord(Record):
    """The run generation of a changefeed's latest run (one per run, rising)."""

    kind: ClassVar[str] = "run generation"

    generation: int


# -- the job status (status.py) ----------------------------------------------------------------


class ScanProgressRecord(_Part):
    """How far the initial scan is (``backfill.ScanProgress``)."""

    chunks_done: int
    chunks_total: int
    records_done: int
    records_total: int
    rows: int
    rows_per_second: float
    eta_seconds: float | None


class TableSchemaStatus(_Part):
    """A table's output schema as the run writes it, and its last change (``evolution.py``)."""

    version: str  # how a reader names it: the registry's id, or the fingerprint
    columns: tuple[str, ...]
    changed_at: str | None  # the commit time of the first row of the last change
    added: tuple[str, ...]  # the columns it added


class PartitionStatus(_Part):
    """A source partition as the job status shows it: its resolved time when published.

    ``offset``: the next offset the changefeed reads in it (None: from its start);
    ``waits_for``: Debezium with a transaction topic, the transaction its markers wait for.
    """

    topic: str
    partition: int
    resolved: HlcText
    offset: int | None = None
    waits_for: str | None = None


class DeclaredTable(_Part):
    """A table's declared schema (``sources[].table_schema`` and ``primary_key``)."""

    record: dict[str, Any]  # the Avro record schema
    primary_key: tuple[str, ...]


class OutputFields(_Part):
    """Where and how a changefeed writes, for its consumers (``highwater_consumer``)."""

    topics: dict[str, str]  # output topic -> the table it carries
    format: Literal["json", "avro", "protobuf"]
    envelope: str
    updated: bool
    registry: str | None = None  # Avro: the registry's URL (its credentials are not written)
    schema_topic: str | None = None  # registry-free Avro: where the schemas are published
    dead_letters: str | None = None  # the dead-letter topic (appliers send theirs there too)
    # the column the records are keyed by, where not the primary key (``key_column``; written
    # only then, so a record of any other output reads as before)
    key_column: str | None = None
    # envelope enriched: its properties (a consumer finds the commit times in ``source``;
    # written only then)
    enriched_properties: list[str] | None = None
    # table -> its declared schema ({record: Avro record, primary_key: [...]}), for appliers
    # that make their tables (written by newer runs only)
    tables: dict[str, DeclaredTable] | None = None


class StatusRecord(Record):
    """What an operator reads about a changefeed without its logs."""

    kind: ClassVar[str] = "job status"

    changefeed_id: str
    state: str
    high_water: HlcText | None = None
    statement_time: HlcText | None = None
    last_marker: HlcText | None = None
    # the scan's numbers as ScanProgressRecord declares them; read as numbers by name, for the
    # status only shows them (a part of them is still a status)
    scan: dict[str, int | float | None] | None = None
    error: str | None = None
    safepoint: SafepointFields | None = None  # the changefeed's own
    warnings: tuple[str, ...] = ()
    updated_at: str = ""  # RFC 3339
    metrics_url: str | None = None
    schemas: dict[str, TableSchemaStatus] | None = None  # Avro: per table
    delivery: Literal["at_least_once", "exactly_once"] | None = None  # None: written before it
    generation: int | None = None  # exactly once: the run's generation (progress/claim.py)
    output: OutputFields | None = None  # None: written before it
    # each source partition's resolved time when published (the console's partitions)
    partitions: tuple[PartitionStatus, ...] | None = None  # None: written before it
    rows: int | None = None  # rows this run wrote so far (the console's rows/s)

    def encode(self) -> bytes:
        """The record's bytes; the fields added since version 1 only where they are set."""
        later = {
            n
            for n in ("delivery", "generation", "output", "partitions", "rows")
            if getattr(self, n) is None
        }
        dumped = self.model_dump(mode="json", exclude=later)
        for partition in dumped.get("partitions") or ():  # a partition's later fields too
            for name in ("offset", "waits_for"):
                if partition[name] is None:
                    del partition[name]
        return json.dumps(dumped, separators=(",", ":"), ensure_ascii=False).encode()
