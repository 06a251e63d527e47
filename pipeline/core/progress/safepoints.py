"""Safepoints: the source data still needed, held back from GC (contract §8, seed ``003_…``).

A **service safepoint** promises that the source changes after its time stay on the source
topics until it expires: ``service_id``, ``safepoint`` (an HLC), ``ttl`` and the last update;
it expires ``ttl`` seconds after that update. Two kinds:

* ``highwater-<cluster>-changefeed-<id>``: a changefeed's, at its restart position (its
  high-water mark, or time zero while its initial scan is unfinished), with the source
  offsets it resumes from; refreshed with its checkpoints, TTL ``safepoints.gc_ttl``;
* ``highwater-<cluster>-<suffix>``: an operator's (default suffix ``user-defined``), set and
  deleted with ``highwater safepoint`` or ``/api/v2/safepoint``; never one of the above.

They live in a compacted topic (``safepoints.topic``, default ``_highwater_safepoints``),
keyed by service id, one JSON record each; a delete is a tombstone. The **GC safe point** of
the cluster (``pipeline/control/gc.py`` moves it, never backwards) is kept in the same topic under
``__gc_safe_point__:<cluster>``: no source data at or below it may be relied on.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from schemas.errors import RecordError, SafepointError
from schemas.hlc import ZERO, Hlc
from sinks.admin import Replication
from sinks.compacted import CompactedTopic
from sinks.producer import AcknowledgedProducer

from ..ledger import GcRecord, SafepointFields, SafepointRecord, SourcePartition, read_part, records

log = logging.getLogger(__name__)

DEFAULT_SUFFIX = "user-defined"
DEFAULT_TTL = 86_400.0
# At most ten years: a longer hold is a typo, and expires_at must stay a representable time.
MAX_TTL = 10 * 365 * 86_400.0
CHANGEFEED = "changefeed-"
GC_KEY = "__gc_safe_point__:"


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="milliseconds")


def _seconds(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


@dataclass(frozen=True)
class Safepoint:
    """One service safepoint."""

    service_id: str
    safepoint: Hlc
    ttl: float  # seconds
    updated_at: float  # seconds since the epoch
    owner: str  # "user", or "changefeed:<id>"
    offsets: Mapping[SourcePartition, int] = field(default_factory=dict)
    cluster: str = ""

    @property
    def expires_at(self) -> float:
        """When it stops holding GC (seconds since the epoch)."""
        return self.updated_at + self.ttl

    def expired(self, now: float) -> bool:
        """True once ``now`` is at or past its expiry."""
        return now >= self.expires_at

    def fields(self) -> SafepointFields:
        """What the record and the job status hold of it."""
        offsets: dict[str, dict[str, int]] = {}
        for sp, offset in sorted(self.offsets.items()):
            offsets.setdefault(sp.topic, {})[str(sp.partition)] = offset
        return SafepointFields(
            service_id=self.service_id,
            safepoint=self.safepoint,
            ttl=self.ttl,
            updated_at=_rfc3339(self.updated_at),
            expires_at=_rfc3339(self.expires_at),
            owner=self.owner,
            cluster=self.cluster,
            offsets=offsets,
        )

    def to_json(self) -> dict[str, Any]:
        """Its fields as JSON (what the REST API returns and the job status shows)."""
        return self.fields().model_dump(mode="json")

    def encode(self) -> bytes:
        """The record's bytes (:class:`.records.SafepointRecord`)."""
        return SafepointRecord(**dict(self.fields())).encode()

    @classmethod
    def of(cls, record: SafepointFields) -> Safepoint:
        """The safepoint a record keeps."""
        try:
            return cls(
                service_id=record.service_id,
                safepoint=record.safepoint,
                ttl=record.ttl,
                updated_at=_seconds(record.updated_at),
                owner=record.owner,
                cluster=record.cluster,
                offsets={
                    SourcePartition(topic, int(p)): offset
                    for topic, parts in record.offsets.items()
                    for p, offset in parts.items()
                },
            )
        except ValueError as exc:  # an updated_at or a partition number that is none
            raise SafepointError(f"unreadable safepoint record: {exc}", code="internal") from exc

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Safepoint:
        """Read :meth:`to_json`'s form."""
        try:
            return cls.of(read_part(SafepointFields, raw, "safepoint"))
        except RecordError as exc:
            raise SafepointError(str(exc), code="internal") from exc

    @classmethod
    def decode(cls, data: bytes, *, where: str | None = None) -> Safepoint:
        """Read a safepoint record; a SafepointError (``internal``) says what is wrong."""
        try:
            return cls.of(records.decode(SafepointRecord, data, where=where))
        except RecordError as exc:
            raise SafepointError(str(exc), code="internal") from exc


@dataclass(frozen=True)
class Registry:
    """Everything in the safepoint topic for one cluster, as read at one moment."""

    safepoints: Mapping[str, Safepoint]
    gc_safe_point: Hlc = ZERO
    unreadable: Mapping[str, str] = field(default_factory=dict)  # key -> why, reported


class SafepointRegistry:
    """Reads and writes one cluster's safepoints and GC safe point in the compacted topic."""

    def __init__(
        self,
        client: Mapping[str, Any],
        topic: str,
        cluster: str,
        *,
        clock: Callable[[], float] = time.time,
        producer: AcknowledgedProducer | None = None,
    ) -> None:
        self.topic = topic
        self.cluster = cluster
        self.clock = clock
        self._store = CompactedTopic(client, topic, producer=producer)

    def ensure(self, replication_factor: Replication = "auto") -> None:
        """Create the topic if it is missing."""
        self._store.ensure(replication_factor)

    def close(self) -> None:
        """Release the producer."""
        self._store.close()

    # -- names ------------------------------------------------------------------------------

    def service_id(self, suffix: str) -> str:
        """``highwater-<cluster>-<suffix>``."""
        return f"highwater-{self.cluster}-{suffix}"

    def changefeed_service_id(self, changefeed_id: str) -> str:
        """The service id of a changefeed's own safepoint."""
        return self.service_id(f"{CHANGEFEED}{changefeed_id}")

    # -- reads ------------------------------------------------------------------------------

    def read(self) -> Registry:
        """The cluster's safepoints and GC safe point, latest values.

        A safepoint record that cannot be read is reported (``unreadable``, and a warning
        naming topic and key) and left out: it must not stop every changefeed. The GC safe
        point itself must be readable: nothing could be checked against it otherwise.
        """
        safepoints: dict[str, Safepoint] = {}
        unreadable: dict[str, str] = {}
        gc = ZERO
        for key, value in self._read_all().items():
            if key == GC_KEY + self.cluster:
                gc = self._gc_record(key, value)
            elif not key.startswith(GC_KEY):
                try:
                    safepoint = Safepoint.decode(value, where=f"topic {self.topic}, key {key!r}")
                except SafepointError as exc:
                    unreadable[key] = str(exc)
                    log.warning(
                        "topic %s, key %r: unreadable safepoint record skipped: %s",
                        self.topic,
                        key,
                        exc,
                    )
                    continue
                if safepoint.cluster == self.cluster:  # cluster "a" is no prefix of "a-b"
                    safepoints[key] = safepoint
        return Registry(safepoints, gc, unreadable)

    def _gc_record(self, key: str, value: bytes) -> Hlc:
        try:
            return records.decode(GcRecord, value).gc_safe_point
        except RecordError as exc:
            raise SafepointError(
                f"topic {self.topic}, key {key!r}: the GC safe point record is unreadable "
                f"({exc.reason}); rewrite it before GC or any changefeed relies on it",
                code="internal",
            ) from exc

    def _read_all(self) -> dict[str, bytes]:
        return self._store.read_all()

    def _refuse_foreign(self, service_id: str) -> Safepoint | None:
        """The operator's safepoint under ``service_id``; refused if it is anyone else's."""
        value = self._read_all().get(service_id)
        if value is None:
            return None
        found = Safepoint.decode(value, where=f"topic {self.topic}, key {service_id!r}")
        if found.owner != "user" or found.cluster != self.cluster:
            raise SafepointError(
                f"{service_id} belongs to {found.owner} of cluster {found.cluster!r}; only "
                "its owner sets and deletes it",
                code="forbidden",
            )
        return found

    # -- an operator's safepoints -----------------------------------------------------------

    def set_user(self, suffix: str, start_ts: Hlc, ttl: float) -> Safepoint:
        """Create or refresh an operator's safepoint; refused below the GC safe point."""
        _check_suffix(suffix)
        if not (math.isfinite(ttl) and 0 < ttl <= MAX_TTL):
            raise SafepointError(
                f"ttl must be positive and at most {MAX_TTL:g} seconds (10 years), got {ttl:g}",
                code="invalid_argument",
            )
        service_id = self.service_id(suffix)
        previous = self._refuse_foreign(service_id)
        self._refuse_below_gc(start_ts)
        safepoint = Safepoint(
            service_id, start_ts, float(ttl), self.clock(), "user", cluster=self.cluster
        )
        self._put(safepoint)
        try:
            self._refuse_below_gc(start_ts)  # a GC pass may have raced the write
        except SafepointError:
            if previous is None:
                self._store.put(service_id, None)
            else:
                self._put(previous)
            raise
        return safepoint

    def _refuse_below_gc(self, start_ts: Hlc) -> None:
        gc = self.read().gc_safe_point
        if start_ts < gc:
            raise SafepointError(
                f"start-ts {start_ts} is below the GC safe point {gc}: the data after it may be "
                "gone already; choose a start-ts at or above the GC safe point",
                code="invalid_argument",
            )

    def delete_user(self, suffix: str) -> Safepoint:
        """Delete an operator's safepoint; returns what was deleted."""
        _check_suffix(suffix)
        service_id = self.service_id(suffix)
        found = self._refuse_foreign(service_id)
        if found is None:
            raise SafepointError(f"no safepoint {service_id!r}", code="not_found")
        self._store.put(service_id, None)
        return found

    # -- a changefeed's own -----------------------------------------------------------------

    def hold(
        self,
        changefeed_id: str,
        ts: Hlc,
        ttl: float,
        offsets: Mapping[SourcePartition, int] | None = None,
    ) -> Safepoint:
        """Set a changefeed's safepoint at ``ts`` (its restart position)."""
        safepoint = Safepoint(
            self.changefeed_service_id(changefeed_id),
            ts,
            float(ttl),
            self.clock(),
            f"changefeed:{changefeed_id}",
            dict(offsets or {}),
            cluster=self.cluster,
        )
        self._put(safepoint)
        return safepoint

    def release(self, changefeed_id: str) -> None:
        """Delete a changefeed's safepoint (it needs no more source data)."""
        self._store.put(self.changefeed_service_id(changefeed_id), None)

    # -- the GC safe point ------------------------------------------------------------------

    def advance_gc(self, to: Hlc) -> Hlc:
        """Move the GC safe point up to ``to`` (never down); returns where it stands."""
        current = self.read().gc_safe_point
        if to <= current:
            return current
        record = GcRecord(gc_safe_point=to, updated_at=_rfc3339(self.clock()))
        self._store.put(GC_KEY + self.cluster, record.encode())
        return to

    def _put(self, safepoint: Safepoint) -> None:
        self._store.put(safepoint.service_id, safepoint.encode())


def _check_suffix(suffix: str) -> None:
    if not suffix or suffix != suffix.strip():
        raise SafepointError(
            f"service-id-suffix {suffix!r} is empty or has spaces around it",
            code="invalid_argument",
        )
    if suffix.startswith(CHANGEFEED):
        raise SafepointError(
            f"service-id-suffix {suffix!r} names a changefeed's own safepoint, which only the "
            "changefeed sets and deletes",
            code="forbidden",
        )


REFRESH_SECONDS = 60.0  # a changefeed refreshes its safepoint at most once a minute


class ChangefeedSafepoint:
    """A changefeed's own safepoint: held at its restart position from start to finish.

    It is set before the changefeed reads anything (creating or resuming), so GC is held from
    the start time until the first checkpoint; then refreshed with the checkpoints, at most
    once a minute; released when the changefeed finishes. Starting or resuming below the GC
    safe point is refused.
    """

    def __init__(self, registry: SafepointRegistry, changefeed_id: str, ttl: float) -> None:
        self.registry = registry
        self.changefeed_id = changefeed_id
        self.ttl = ttl
        self.current: Safepoint | None = None
        self.gc_safe_point = ZERO  # as read when the hold was set (start)
        self._refreshed_at = float("-inf")

    @property
    def service_id(self) -> str:
        """``highwater-<cluster>-changefeed-<id>``."""
        return self.registry.changefeed_service_id(self.changefeed_id)

    def start(
        self,
        restart: Hlc,
        offsets: Mapping[SourcePartition, int],
        gone: Callable[[Hlc], str],
        *,
        check: bool = True,
    ) -> None:
        """Hold GC at ``restart``; with ``check``, refuse when the GC safe point is above it.

        ``gone(gc)`` describes, for the error, which source data may be missing. (An initial
        scan holds at time zero and checks its source offsets instead.)
        """
        before = self.registry.read()
        previous = before.safepoints.get(self.service_id)
        if check:
            self._refuse_below(restart, before.gc_safe_point, previous, gone)
        self.refresh(restart, offsets, force=True)
        after = self.registry.read().gc_safe_point  # a GC pass may have raced the hold
        self.gc_safe_point = after
        if check and restart < after:
            self.release()
            self._refuse_below(restart, after, previous, gone)

    def _refuse_below(
        self,
        restart: Hlc,
        gc: Hlc,
        previous: Safepoint | None,
        gone: Callable[[Hlc], str],
    ) -> None:
        if restart >= gc:
            return
        now = self.registry.clock()
        reason = "GC TTL exceeded: " if previous is not None and previous.expired(now) else ""
        held = (
            f" (its safepoint expired at {previous.to_json()['expires_at']})"
            if reason and previous is not None
            else ""
        )
        raise SafepointError(
            f"{reason}changefeed {self.changefeed_id!r} cannot start at {restart}: the GC safe "
            f"point of cluster {self.registry.cluster!r} is {gc}{held}, so {gone(gc)}. Nothing "
            "was emitted; start a new changefeed (initial_scan, or a cursor at or above the GC "
            "safe point), or hold GC with 'highwater safepoint set' before it moves on"
        )

    def refresh(
        self, restart: Hlc, offsets: Mapping[SourcePartition, int], *, force: bool = False
    ) -> None:
        """Move the safepoint to ``restart`` and renew its TTL (at most once a minute)."""
        now = self.registry.clock()
        if not force and now - self._refreshed_at < REFRESH_SECONDS:
            return
        self.current = self.registry.hold(self.changefeed_id, restart, self.ttl, offsets)
        self._refreshed_at = now

    def release(self) -> None:
        """The changefeed needs no more source data."""
        self.registry.release(self.changefeed_id)
        self.current = None


def retention_warnings(configs: Mapping[str, Mapping[str, str | None]]) -> list[str]:
    """The topics whose own retention could delete data a safepoint protects.

    ``configs``: each topic's settings, as :func:`sinks.admin.topic_configs` reads them.
    """
    warnings = []
    for topic, settings in sorted(configs.items()):
        if "delete" not in (settings.get("cleanup.policy") or ""):
            continue
        for name in ("retention.ms", "retention.bytes"):
            value = settings.get(name)
            if value is not None and int(value) >= 0:
                warnings.append(
                    f"topic {topic} has {name}={value}: Kafka may delete records a safepoint "
                    f"protects; set {name}=-1 and let 'highwater gc run' trim it"
                )
    return warnings
