"""The one error tree of Highwater.

Every error Highwater raises on purpose is a :class:`HighwaterError`. Families sit under it so
a caller can catch what it can handle (a bad config, an undecodable record) and let the rest
stop the job. Structured fields (``topic``, ``partition``, ``offset``, ``key_path``) travel
with the error so logs and dead-letter headers never have to parse a message.

This module lives in ``schemas/`` because it is the lowest layer: ``encoders``, ``sinks`` and
``pipeline`` all import it, and it imports nothing of ours.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar


class HighwaterError(Exception):
    """Root of every error Highwater raises on purpose.

    ``retryable``: whether running the job again may succeed without anyone changing
    anything (Kafka was unreachable); the server restarts such a changefeed with back-off.
    ``remedy``: what a user does about it, in a sentence; every family below says its own
    (the docs' error reference prints it, and refuses a family that leaves it to the root).
    """

    retryable = False
    remedy: ClassVar[str] = (
        "Read the message: it names what stopped and where; where a changefeed stopped, a "
        "new run goes on from its last checkpoint once that is mended."
    )


class ConfigError(HighwaterError):
    """The YAML config (or a CLI argument standing in for it) is not acceptable.

    ``problems`` holds one ``(key_path, reason)`` pair per problem, so that one run of
    ``highwater validate`` reports every mistake at once rather than the first.
    """

    remedy = (
        "Fix each key the message names (every problem is listed at once), then run "
        "`highwater validate --config` again; the config reference gives each option's type "
        "and allowed values."
    )

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        self.problems: tuple[tuple[str, str], ...] = tuple(problems)
        lines = [f"{path}: {reason}" if path else reason for path, reason in self.problems]
        noun = "problem" if len(lines) == 1 else "problems"
        super().__init__(f"invalid config ({len(lines)} {noun}):\n  " + "\n  ".join(lines))


class PlatformError(HighwaterError):
    """The machinery around the job is missing or broken: jars, the broker, the JVM."""

    remedy = (
        "Set up what the message names (`make` installs Java, Maven and the jars on a "
        "development machine), then run the command again."
    )


class JarsError(PlatformError):
    """The JVM jars are missing, incomplete, or of a different version than pyspark."""

    remedy = (
        "Run `highwater fetch-jars` (`highwater dev fetch-jars` in a checkout; it needs a JDK "
        "and Maven), then the command again."
    )


class BrokerError(PlatformError):
    """The embedded Kafka broker failed to format, start, answer or stop."""

    remedy = (
        "Read the broker's log the message names (`.highwater/kafka/NAME/logs/server.log`); "
        "`highwater dev kafka stop` and start it again."
    )


@dataclass(frozen=True, order=True)
class RecordRef:
    """Where a record came from: enough for an operator to find it with the Kafka CLI."""

    topic: str
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.topic}/{self.partition}@{self.offset}"

    @classmethod
    def parse(cls, text: str) -> RecordRef:
        """Read ``topic/partition@offset``, how ``str`` writes it (a topic may hold ``/``)."""
        topic, _, rest = text.rpartition("/")
        partition, _, offset = rest.partition("@")
        if not topic or not partition.isdigit() or not offset.isdigit():
            raise ValueError(f"{text!r} is not topic/partition@offset")
        return cls(topic, int(partition), int(offset))


class SourceError(HighwaterError):
    """A source topic is missing, or data the changefeed needs from it is gone."""

    remedy = (
        "Make the topic, its records or the upstream the message names available again; data "
        "a changefeed needs that is gone cannot come back: create a new changefeed (its "
        "initial scan) or move `cursor` past the gap."
    )


class SourceDecodeError(SourceError):
    """A source record could not be turned into a row; ``record`` says which one."""

    remedy = (
        "Fix the record upstream and run again, or set `on_error: dlq` (or `pause`, then "
        "`highwater changefeed resume --skip-bad-record`) to divert it to the dead-letter "
        "topic."
    )

    def __init__(self, record: RecordRef, reason: str, *, action: str = "stopped") -> None:
        self.record = record
        self.reason = reason
        super().__init__(
            f"undecodable source record at topic={record.topic} partition={record.partition} "
            f"offset={record.offset}: {reason} (on_error: changefeed {action} at this record; "
            "use on_error: dlq to divert such records to a dead-letter topic)"
        )


class EncodingError(HighwaterError):
    """A row could not be encoded; ``side`` is ``"key"`` or ``"value"``."""

    remedy = (
        "Declare the column's type so it holds the value (`sources[].table_schema`) or fix "
        "the value upstream; under `on_error: dlq` the record goes to the dead-letter topic."
    )

    def __init__(self, side: str, reason: str) -> None:
        self.side = side
        self.reason = reason
        super().__init__(f"cannot encode {side}: {reason}")


class OversizedRecord(EncodingError):
    """An output record larger than the sink producer's ``max.request.size`` lets through."""

    remedy = (
        "Set `oversized_rows`: `claim_check` writes such a row to `claim_store` with a "
        "reference in its place, `dlq` diverts it, `fail` stops at it; or raise "
        "`sink.producer`'s `max.request.size` with the topics' `max.message.bytes`."
    )

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        super().__init__(
            "value", f"the output record of {size:,} bytes exceeds max.request.size ({limit:,})"
        )


class SchemaChange(EncodingError):
    """A row its output schema cannot hold: the table changed shape upstream.

    ``extra``: columns the schema lacks; ``retyped``: columns whose type changed at the source
    (each described, ``"amount: decimal(30,6) at the source, decimal(24,4) in the output"``);
    ``rekeyed``: how the table's key changed there.
    Raised per row by an encoder (or the batch, for a changed type); the changefeed follows
    ``schema_change_policy`` (:class:`SchemaChangeError`) rather than drop the columns' values
    or dead-letter every row after the change.
    """

    remedy = (
        "Nothing by hand: the changefeed follows `schema_change_policy` (it pauses under "
        "`stop`; see SchemaChangeError)."
    )

    def __init__(
        self,
        table: str,
        extra: Iterable[str],
        retyped: Iterable[str] = (),
        rekeyed: str | None = None,
    ) -> None:
        self.table = table
        self.extra = tuple(sorted(extra))
        self.retyped = tuple(retyped)
        self.rekeyed = rekeyed  # how its key changed, if it did
        what = []
        if self.extra:
            what.append(f"column(s) {', '.join(self.extra)} not in its output schema")
        if self.retyped:
            what.append(f"a column's type changed ({'; '.join(self.retyped)})")
        if rekeyed is not None:
            what.append(f"its key changed ({rekeyed})")
        super().__init__("value", f"table {table!r} changed shape: {', and '.join(what)}")


class SchemaChangeError(HighwaterError):
    """The changefeed stopped at a schema change: everything before it is written.

    ``record``: the first source record of the new shape; ``time``: its commit time.
    """

    remedy = (
        "Give the table its new `table_schema` (the config file, or `highwater changefeed "
        "update` for a changefeed the server runs) and `highwater changefeed resume`; or use "
        "`schema_change_policy: evolve`. A retyped or rekeyed table needs a new changefeed."
    )

    def __init__(self, record: RecordRef, reason: str, time: str) -> None:
        self.record = record
        self.reason = reason
        self.time = time
        super().__init__(
            f"schema change at {record} (commit time {time}): {reason}. Everything before it is "
            "written and checkpointed, and the changefeed is paused there: give it the table's "
            "new table_schema (its config file; highwater changefeed update where the server "
            "runs it) and resume it (highwater changefeed resume)"
        )


class SchemaError(HighwaterError):
    """An output schema could not be registered (the registry refused it) or published."""

    remedy = (
        "Make the schema change one the subject's compatibility rule accepts (add columns as "
        "optional), or fix the registry the message names, then start again."
    )


class SinkError(HighwaterError):
    """Writing to the output topics failed after retries."""

    remedy = (
        "Nothing to change when Kafka was only unreachable: a new run goes on from the "
        "checkpoint (the server restarts it with back-off). Otherwise fix what the message "
        "names on the sink cluster (a topic's settings, ACLs, `max.message.bytes`)."
    )

    retryable = True


class FencedError(SinkError):
    """Another instance of the changefeed took over its writes; this one must stop."""

    remedy = (
        "Another instance of this changefeed runs and took over: stop one of the two; the one "
        "that was fenced wrote nothing after the fence."
    )

    retryable = False


class CheckpointError(HighwaterError):
    """The checkpoint topic could not be read or written, or holds a record we cannot use."""

    remedy = (
        "Check the checkpoint topic the message names is reachable and writable; a new run "
        "resumes from the last durable checkpoint."
    )

    retryable = True


class RecordError(HighwaterError):
    """One of Highwater's own records (checkpoint, spec, status, safepoint) cannot be read.

    ``kind`` names the record (``"checkpoint"``, ``"changefeed spec"``, …); ``where`` where it
    was read, when the reader knows (``"topic _highwater_checkpoints, key 'orders'"``);
    ``fields`` the paths of the fields at fault (``"partitions.src.offsets.0"``), if any.
    """

    remedy = (
        "The record named (topic and key) was written by something else or damaged: delete "
        "that key from the compacted topic only if you mean to lose that state (for a "
        "checkpoint: start the changefeed anew)."
    )

    def __init__(
        self, kind: str, reason: str, *, where: str | None = None, fields: Sequence[str] = ()
    ) -> None:
        self.kind = kind
        self.reason = reason
        self.where = where
        self.fields: tuple[str, ...] = tuple(fields)
        at = f" ({where})" if where else ""
        super().__init__(f"unreadable {kind} record{at}: {reason}")


class UnknownRecordVersion(RecordError):
    """A record of a format version this release does not read (a newer release wrote it)."""

    remedy = (
        "Run the release of Highwater that wrote the record (or a newer one); an older "
        "release cannot read it."
    )

    def __init__(
        self, kind: str, version: object, known: Sequence[int], *, where: str | None = None
    ) -> None:
        self.version = version
        self.known: tuple[int, ...] = tuple(known)
        reads = ", ".join(str(v) for v in self.known)
        super().__init__(
            kind,
            f"format_version {version!r} is not one this release reads (it reads {reads}): "
            "a newer release of Highwater may have written it",
            where=where,
            fields=("format_version",),
        )


class SafepointError(HighwaterError):
    """A safepoint operation was refused, or data a changefeed needs is gone.

    ``code`` is the kind, as the REST API reports it: ``invalid_argument``, ``forbidden``
    (a changefeed's own safepoint), ``not_found``, ``data_gone``, or ``internal`` (an
    unreadable record).
    """

    remedy = (
        "Adjust the request as the message says (a time at or above the GC safe point, a "
        "positive TTL, not a changefeed's own safepoint); when source data is gone, create "
        "the changefeed anew or start it past the gap."
    )

    def __init__(self, message: str, *, code: str = "data_gone") -> None:
        self.code = code
        super().__init__(message)


class LifecycleError(HighwaterError):
    """An operator's request about a changefeed (create, pause, resume, remove) was refused.

    ``code`` is the kind, as the REST API reports it: ``invalid_argument``, ``not_found`` or
    ``conflict`` (not in a state that allows it).
    """

    remedy = (
        "Ask for what the changefeed's state allows (`highwater changefeed list` shows it): "
        "pause before `update`, a new changefeed id for one removed or for a change its "
        "output cannot follow."
    )

    def __init__(self, message: str, *, code: str = "conflict") -> None:
        self.code = code
        super().__init__(message)


def cause(exc: BaseException) -> str:
    """One line saying what went wrong in ``exc``, a foreign error (Spark's, Kafka's).

    A JVM error reaches Python as py4j's "An error occurred while calling …" over the whole
    Java trace; what a user acts on is its root (the last ``Caused by:``), so that is the line,
    else the text's first line.
    """
    lines = [line.strip() for line in str(exc).strip().splitlines()]
    roots = [line.removeprefix("Caused by: ") for line in lines if line.startswith("Caused by: ")]
    return roots[-1] if roots else (lines[0] if lines and lines[0] else repr(exc))
