"""When to write a checkpoint and which resolved marker may go out: plain values in, decisions out.

This is the rule the guarantees rest on (contract §5.3, §5.4, §6), kept free of Kafka and
Spark so that it can be property-tested on its own (``tests/unit/test_policy.py``). The
coordinator (``pipeline/core/coordinator/changefeed.py``) asks :meth:`Policy.after_batch`
what to do, does it in the order a :class:`Decision` gives (checkpoint first, then the
marker), and reports back what became durable (:meth:`Policy.checkpointed`,
:meth:`Policy.marker_sent`):

* a **marker** R goes out when resolved markers are on, R is above the last marker, and the
  ``resolved.interval`` has passed (or the changefeed is stopping, or reached ``end_time``);
  R is the high-water mark, capped at ``end_time``;
* a marker is only sent after a checkpoint that covers it is durable: if the last durable
  checkpoint's high-water mark is below R, the decision writes one first, carrying R as its
  ``last_marker``, so a restart never goes below a marker already sent;
* a **checkpoint** is written when progress was made since the last one (a batch read
  further or resolved further on any partition: :meth:`Policy.progressed`): at a stop, before
  a marker, at ``end_time``, and otherwise once ``min_checkpoint_frequency`` has passed since
  the last one, **whether or not the high-water mark moved**. The record keeps every
  partition's offset and resolved time (``checkpoint.py``; less, safely, over its byte
  budget), so a partition that sends no markers for a while holds the high-water mark back
  but does not make the others replay (contract §5.4, seed ``000_…``): a restart re-reads
  what was read since the last record, that is the last batch of each partition when
  ``min_checkpoint_frequency`` is at most the batch spacing, and in general what was read
  within one ``min_checkpoint_frequency`` (plus the coordinator's wait-loop tick, about a
  second, which carries out what fell due between batches).

``frontier_highwater_lag_checkpoint_threshold`` (checkpoint when the leading partition is that
far ahead of the high-water mark) is subsumed by the rule above, which checkpoints leading
partitions' progress at every ``min_checkpoint_frequency`` whatever the lag; the key is still
accepted so that existing configs validate, and has no effect.

:class:`HighWaterWatch` is the other pure rule on the driver: a high-water mark that stands
still longer than ``gc_ttl`` stops the changefeed, so that its safepoint can expire.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.config import ChangefeedConfig
from schemas.errors import SafepointError
from schemas.hlc import ZERO, Hlc


@dataclass(frozen=True)
class Cadence:
    """The options that pace checkpoints and markers (durations in seconds)."""

    resolved: bool = True
    resolved_interval: float = 10.0
    checkpoint_frequency: float = 30.0
    end_time: Hlc | None = None

    @classmethod
    def of(cls, config: ChangefeedConfig) -> Cadence:
        """The cadence a changefeed's config asks for."""
        checkpoint = config.checkpoint
        return cls(
            resolved=config.resolved.enabled,
            resolved_interval=config.resolved.interval.total_seconds(),
            checkpoint_frequency=checkpoint.min_checkpoint_frequency.total_seconds(),
            end_time=config.end_time,
        )


@dataclass(frozen=True)
class Decision:
    """What to do now, in this order: write a checkpoint, then send a marker."""

    checkpoint: bool = False
    record_marker: Hlc | None = None  # the ``last_marker`` the checkpoint record carries
    marker: Hlc | None = None  # broadcast once the checkpoint (if any) is durable
    finished: bool = False  # ``end_time`` reached: the changefeed is done


class Policy:
    """The checkpoint-and-marker rule, with what it remembers between batches.

    A resumed run starts from its checkpoint record (:meth:`resume`). Times (``now``) come
    from one monotonic clock the caller owns.
    """

    def __init__(self, cadence: Cadence) -> None:
        self.cadence = cadence
        self.checkpointed_hw = ZERO  # the high-water mark of the last durable record
        self.last_marker: Hlc | None = None  # the last marker sent, or covered by the record
        self.sent: Hlc | None = None  # the last marker broadcast to every output partition
        self.recorded_sent: Hlc | None = None  # what the last durable record says was sent
        self.last_checkpoint_at = float("-inf")
        self.last_marker_at = float("-inf")
        self.dirty = False  # progress since the last durable checkpoint

    def resume(
        self, checkpointed_hw: Hlc, last_marker: Hlc | None, marker_sent: Hlc | None
    ) -> Hlc | None:
        """Start from a checkpoint record; returns a marker to send again, if any.

        A record's marker is broadcast after the record is durable: if the last run stopped
        in between, the record covers a marker it does not say was sent, and the resume
        sends it (contract §5.3: markers are never lost, and a repeat never goes backwards).
        """
        self.checkpointed_hw = checkpointed_hw
        self.last_marker = last_marker
        self.sent = self.recorded_sent = marker_sent
        return last_marker if last_marker is not None and last_marker != marker_sent else None

    def progressed(self) -> None:
        """A batch moved the frontier (read offsets or resolved times)."""
        self.dirty = True

    def after_batch(self, high_water: Hlc, now: float, *, final: bool = False) -> Decision:
        """The decision after a batch (``final``: the changefeed is stopping).

        Also asked between batches (the coordinator's wait loop), so that what fell due while
        the sources were quiet goes out without waiting for the next batch.
        """
        cadence = self.cadence
        end = cadence.end_time
        reached_end = end is not None and high_water >= end
        marker = high_water if end is None else min(high_water, end)
        marker_due = (
            cadence.resolved
            and marker > (self.last_marker or ZERO)
            and (reached_end or final or now - self.last_marker_at >= cadence.resolved_interval)
        )
        # Progress is saved at every min_checkpoint_frequency, not only when the high-water
        # mark moved: the record carries each partition's own offset and resolved time.
        waited = now - self.last_checkpoint_at >= cadence.checkpoint_frequency
        checkpoint_due = (marker_due and self.checkpointed_hw < marker) or (
            self.dirty and (final or marker_due or reached_end or waited)
        )
        return Decision(
            checkpoint=checkpoint_due,
            record_marker=marker if marker_due else self.last_marker,
            marker=marker if marker_due else None,
            finished=reached_end,
        )

    def after_scan(self, statement_time: Hlc, *, only: bool) -> Decision:
        """The decision once the whole snapshot is acknowledged: its time is resolved.

        The first marker is the statement time (capped at ``end_time``); the checkpoint that
        records the scan's end carries it. ``only``: the changefeed ends there.
        """
        end = self.cadence.end_time
        marker = statement_time if end is None else min(statement_time, end)
        finished = only or (end is not None and statement_time >= end)
        if not self.cadence.resolved:
            return Decision(checkpoint=True, record_marker=self.last_marker, finished=finished)
        return Decision(checkpoint=True, record_marker=marker, marker=marker, finished=finished)

    def checkpointed(self, high_water: Hlc, now: float) -> None:
        """A checkpoint record at ``high_water`` is durable (it says :attr:`sent` was sent)."""
        self.checkpointed_hw = high_water
        self.last_checkpoint_at = now
        self.dirty = False
        self.recorded_sent = self.sent

    def marker_sent(self, marker: Hlc, now: float) -> None:
        """``marker`` reached every output partition."""
        self.last_marker = self.sent = marker
        self.last_marker_at = now

    def unconfirmed(self) -> bool:
        """Whether the durable record does not say the last marker was sent.

        Checked as a run ends (a stop, ``end_time``, a drain's end): one more record then
        spares the next run re-sending a marker that did reach every partition.
        """
        return self.sent != self.recorded_sent


class HighWaterWatch:
    """Notices a high-water mark that has not moved for longer than ``ttl`` seconds.

    Such a changefeed would hold GC back for ever with its safepoint; it stops instead, so the
    safepoint can expire (seed ``003_…``). Counted from the first observation: starting up is
    not standing still.
    """

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self.high_water = ZERO
        self.moved_at: float | None = None  # wall seconds

    def stalled(self, high_water: Hlc, now: float) -> bool:
        """Observe the high-water mark at ``now``; True once it stood still past the TTL."""
        if self.moved_at is None or high_water > self.high_water:
            self.high_water, self.moved_at = high_water, now
            return False
        return now - self.moved_at > self.ttl

    def quiet(self, now: float) -> None:
        """Nothing is waiting at ``now`` (a quiet source): count standing still from here."""
        self.moved_at = now

    def check(self, high_water: Hlc, now: float) -> None:
        """:meth:`stalled`, as the error that stops the changefeed."""
        if self.stalled(high_water, now):
            raise SafepointError(
                f"GC TTL exceeded: the high-water mark {high_water} has not moved for more "
                f"than gc_ttl ({self.ttl:g} s), so the changefeed stops rather than hold GC "
                "back; hold GC with 'highwater safepoint set' to resume it later without a gap"
            )
