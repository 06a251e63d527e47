"""A changefeed's desired state: what operators asked for, beside what the job reports.

The jobs topic (``jobs.topic``, compacted) holds two records per changefeed:

* ``<id>``: the job status the running changefeed writes (``pipeline/core/status.py``);
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
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, get_args

from confluent_kafka import Consumer, KafkaError, TopicPartition

from schemas.errors import HighwaterError, RecordRef, SinkError
from sinks.compacted import CompactedTopic

from . import records
from .records import Desired, SpecRecord

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
