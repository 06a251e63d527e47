"""A changefeed's desired state: what operators asked for, beside what the job reports.

The jobs topic (``jobs.topic``, compacted) holds two records per changefeed:

* ``<id>``: the job status the running changefeed writes (``pipeline/core/operators/status.py``);
* ``spec/<id>``: its *spec*, written by operators (``highwater changefeed create | pause |
  resume | remove``, the REST API) and by the changefeed itself when it pauses on a bad
  record (``on_error: pause``)::

    {"changefeed_id": "orders", "desired": "running", "config": "<YAML text>",
     "base_dir": "/abs/dir", "reason": null, "bad_record": null, "skip_bad_record": false,
     "updated_at": "<RFC 3339>"}

  ``desired`` is ``running``, ``paused`` or ``removed``; ``config`` the YAML as created or
  last updated (``${VAR}`` left for the process that runs it to expand) and ``base_dir``
  where its relative paths start; ``reason`` why it was paused; ``bad_record`` the record
  it paused at (``on_error: pause``, ``topic/partition@offset``), which the next run diverts
  to the dead-letter topic when ``skip_bad_record`` (``resume --skip-bad-record``).

Changefeed ids match ``[A-Za-z0-9._-]+``, so a spec's key never is a status key. Every run of a
changefeed watches its spec (:class:`SpecWatch`): ``paused`` finishes the batch, checkpoints
and stops, the safepoint held; a run that starts paused waits for ``resume``; ``removed``
stops it and releases the safepoint. The server (``pipeline/control/supervisor.py``) runs
the changefeeds whose spec says ``running``.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, get_args

from confluent_kafka import Consumer, KafkaError, TopicPartition

from pipeline.config import ChangefeedConfig
from schemas.errors import (
    HighwaterError,
    RecordRef,
    SchemaChangeError,
    SinkError,
    SourceDecodeError,
)
from sinks.admin import ensure_topics
from sinks.compacted import COMPACTED, CompactedTopic

from ..batch import BatchResult, client_config
from ..ledger import Desired, SpecRecord, records

log = logging.getLogger(__name__)

DESIRED: tuple[Desired, ...] = get_args(Desired)
SPEC_PREFIX = "spec/"


def spec_key(changefeed_id: str) -> str:
    """The jobs topic key of a changefeed's spec."""
    return SPEC_PREFIX + changefeed_id


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class ChangefeedSpec:
    """What operators asked of one changefeed."""

    changefeed_id: str
    desired: Desired
    config: str = ""  # the YAML text; empty for a changefeed run only by `highwater run`
    base_dir: str = ""
    reason: str | None = None
    bad_record: RecordRef | None = None
    skip_bad_record: bool = False
    updated_at: str = field(default_factory=_now)

    def encode(self) -> bytes:
        """The record's bytes (:class:`.records.SpecRecord`)."""
        return SpecRecord(
            changefeed_id=self.changefeed_id,
            desired=self.desired,
            config=self.config,
            base_dir=self.base_dir,
            reason=self.reason,
            bad_record=self.bad_record,
            skip_bad_record=self.skip_bad_record,
            updated_at=self.updated_at,
        ).encode()

    @classmethod
    def decode(cls, data: bytes, *, where: str | None = None) -> ChangefeedSpec:
        """Parse a spec record (``where``: its topic and key, for the error)."""
        record = records.decode(SpecRecord, data, where=where)
        return cls(
            changefeed_id=record.changefeed_id,
            desired=record.desired,
            config=record.config,
            base_dir=record.base_dir,
            reason=record.reason,
            bad_record=record.bad_record,
            skip_bad_record=record.skip_bad_record,
            updated_at=record.updated_at,
        )

    def to(self, desired: Desired, **changes: Any) -> ChangefeedSpec:
        """The spec with another desired state (and other fields), stamped now."""
        return replace(self, desired=desired, updated_at=_now(), **changes)


parse_ref = RecordRef.parse  # ``topic/partition@offset`` (how errors and dead letters name one)


class SpecStore:
    """The specs in a jobs topic (``CompactedTopic``), read and written by key."""

    def __init__(self, jobs: CompactedTopic) -> None:
        self.jobs = jobs

    def all(self) -> dict[str, ChangefeedSpec]:
        """Every readable spec, by changefeed id (an unreadable one is logged and skipped)."""
        return specs_of(self.jobs.read_all())

    def get(self, changefeed_id: str) -> ChangefeedSpec | None:
        """One changefeed's spec."""
        return self.all().get(changefeed_id)

    def put(self, spec: ChangefeedSpec) -> None:
        """Write a spec (durable when this returns)."""
        self.jobs.put(spec_key(spec.changefeed_id), spec.encode())

    def delete(self, changefeed_id: str) -> None:
        """Forget a changefeed: its spec and its status."""
        self.jobs.put(spec_key(changefeed_id), None)
        self.jobs.put(changefeed_id, None)


def specs_of(records: Mapping[str, bytes]) -> dict[str, ChangefeedSpec]:
    """The specs among a jobs topic's records."""
    specs = {}
    for key, data in records.items():
        if key.startswith(SPEC_PREFIX):
            try:
                spec = ChangefeedSpec.decode(data, where=f"key {key!r}")
            except HighwaterError as exc:
                log.warning("jobs topic key %r skipped: %s", key, exc)
                continue
            specs[spec.changefeed_id] = spec
    return specs


def statuses_of(records: Mapping[str, bytes]) -> dict[str, bytes]:
    """The job status records among a jobs topic's records."""
    return {key: data for key, data in records.items() if not key.startswith(SPEC_PREFIX)}


class SpecWatch:
    """Follows one changefeed's spec in the jobs topic, cheaply enough to ask every second.

    A consumer stays assigned to the topic (committed records only); :meth:`current` takes
    what arrived since the last call without waiting.
    """

    def __init__(
        self, client: Mapping[str, Any], topic: str, changefeed_id: str, timeout: float = 30.0
    ) -> None:
        self.key = spec_key(changefeed_id).encode()
        self.topic = topic
        self._spec: ChangefeedSpec | None = None
        self._consumer = Consumer(
            {
                **client,
                "group.id": f"highwater-watch-{uuid.uuid4().hex}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
            }
        )
        metadata = self._consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        partitions = [] if metadata is None or metadata.error else list(metadata.partitions)
        self._consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        self._catch_up(partitions, timeout)

    def _catch_up(self, partitions: list[int], timeout: float) -> None:
        """Read up to the end as of now, so the first answer is the latest spec."""
        pending = set(partitions)
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise SinkError(f"reading {self.topic!r} timed out")
            for msg in self._consumer.consume(500, 1.0):
                error = msg.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    pending.discard(int(msg.partition() or 0))
                else:
                    self._take(msg)

    def _take(self, msg: Any) -> None:
        error = msg.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                log.warning("watching %r: %s", self.topic, error.str())
            return
        if msg.key() != self.key:
            return
        value = msg.value()
        if value is None:
            self._spec = None
            return
        try:
            where = f"topic {self.topic}, partition {msg.partition()}, offset {msg.offset()}"
            self._spec = ChangefeedSpec.decode(value, where=where)
        except HighwaterError as exc:
            log.warning("jobs topic key %r skipped: %s", self.key.decode(), exc)

    def current(self) -> ChangefeedSpec | None:
        """The spec as it stands (None: there is none; the changefeed runs as configured)."""
        for msg in self._consumer.consume(500, 0):
            self._take(msg)
        return self._spec

    def close(self) -> None:
        """Release the consumer."""
        self._consumer.close()


def wait_while_paused(
    watch: Callable[[], ChangefeedSpec | None],
    stopped: Callable[[], bool],
    *,
    poll: float = 1.0,
    on_wait: Callable[[ChangefeedSpec], None] | None = None,
) -> ChangefeedSpec | None:
    """Block while the spec says ``paused`` (or until ``stopped``); return the spec then."""
    spec = watch()
    announced = False
    while spec is not None and spec.desired == "paused" and not stopped():
        if not announced and on_wait is not None:
            on_wait(spec)
            announced = True
        time.sleep(poll)
        spec = watch()
    return spec


class StopRequest:
    """A request to stop after the current batch: SIGTERM, a stop file, or the spec.

    ``reason`` is the state the run ends in: ``stopped`` (a signal or stop file), or what the
    changefeed's spec asks (``paused``, ``removed``), read at most once a second through
    :meth:`follow`.
    """

    def __init__(self, stop_file: Path | None = None) -> None:
        self._event = threading.Event()
        self._file = stop_file
        self.reason = "stopped"
        self._spec: Callable[[], ChangefeedSpec | None] | None = None
        self._asked = 0.0

    def follow(self, spec: Callable[[], ChangefeedSpec | None]) -> None:
        """Stop too when ``spec()`` no longer says ``running``."""
        self._spec = spec

    def set(self, reason: str = "stopped") -> None:
        """Ask the changefeed to stop (the first reason given stands)."""
        if not self._event.is_set():
            self.reason = reason
        self._event.set()

    def is_set(self) -> bool:
        """True once a stop was asked for."""
        if self._file is not None and self._file.exists():
            self.set()
        if not self._event.is_set() and self._spec is not None:
            now = time.monotonic()
            if now - self._asked >= 1.0:
                self._asked = now
                spec = self._spec()
                if spec is not None and spec.desired != "running":
                    self.set(spec.desired)
        return self._event.is_set()


class Admission:
    """A run's standing with its spec: let in, the record it diverts, the pause it ends in.

    :meth:`admit` follows the spec (waiting while it says ``paused``; ``removed`` does not
    start); :meth:`skip` is the bad record an operator chose to divert (``resume
    --skip-bad-record``); :meth:`halt` and :meth:`pause_at` write the spec paused at a record and
    stop the run.
    """

    def __init__(self, config: ChangefeedConfig, stop: StopRequest) -> None:
        self.config = config
        self.stop = stop
        self.spec: ChangefeedSpec | None = None  # as it stood when the run was let in
        self.paused_at: str | None = None  # the error a pause stopped the run at

    def admit(self, resources: ExitStack) -> bool:
        """Wait while the spec says ``paused``; False when a stop came before the start."""
        self.spec = admit(self.config, self.stop, resources)
        return not self.stop.is_set()

    def skip(self) -> RecordRef | None:
        """The bad record an operator chose to divert, if any."""
        spec = self.spec
        return spec.bad_record if spec is not None and spec.skip_bad_record else None

    def halt(
        self,
        result: BatchResult,
        specs: SpecStore,
        explain: Callable[[SchemaChangeError], SchemaChangeError],
    ) -> None:
        """Stop at what stops a batch or chunk (:meth:`~.batch.BatchResult.stops`).

        ``on_error: fail`` fails the run at a bad record (raised); else the spec says paused
        at the record or at the schema change (``explain``: the output schemas' account of it),
        and the run stops.
        """
        exc = result.stop_error(self.config.on_error, explain)
        if isinstance(exc, SourceDecodeError) and self.config.on_error == "fail":
            raise exc
        self.pause_at(specs, exc)

    def pause_at(self, specs: SpecStore, exc: SourceDecodeError | SchemaChangeError) -> None:
        """The spec says paused at the record ``exc`` names, and the run stops.

        ``on_error: pause`` at a bad record (which ``resume --skip-bad-record`` may divert), or
        a schema change (which an update of the table's schema lets through).
        """
        log.error("%s", exc)
        self.paused_at = str(exc)
        spec = self.spec or ChangefeedSpec(self.config.changefeed_id, "running")
        bad = exc.record if isinstance(exc, SourceDecodeError) else None
        specs.put(spec.to("paused", reason=str(exc), bad_record=bad, skip_bad_record=False))
        self.stop.set("paused")


def admit(
    config: ChangefeedConfig, stop: StopRequest, resources: ExitStack
) -> ChangefeedSpec | None:
    """A run's admission: follow its spec, waiting while it says ``paused``.

    Returns the spec as it stood when the run was let in (None: no spec, a changefeed run only
    by ``highwater run``). Raises when the spec says ``removed``. ``stop`` follows the spec from
    then on.
    """
    client = client_config(config.kafka)
    ensure_topics(  # the watch follows the jobs topic from its start
        client,
        {config.jobs.topic: 1},
        replication_factor=config.checkpoint.replication_factor,
        topic_config=COMPACTED,
    )
    watch = SpecWatch(client, config.jobs.topic, config.changefeed_id)
    resources.callback(watch.close)
    spec = wait_while_paused(
        watch.current,
        stop.is_set,
        on_wait=lambda s: log.warning(
            "changefeed %s is paused (%s): waiting for resume",
            config.changefeed_id,
            s.reason or "by an operator",
        ),
    )
    if spec is not None and spec.desired == "removed":
        raise HighwaterError(
            f"changefeed {config.changefeed_id!r} was removed: create it again to run it"
        )
    stop.follow(watch.current)
    return spec
