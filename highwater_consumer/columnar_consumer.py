""":meth:`ChangefeedConsumer.arrow_windows`'s loop: batches of columns into Arrow windows.

The consumer in columnar mode (``ChangefeedConsumer(..., columnar=True)``) reads with a
:mod:`~highwater_consumer.columnar` reader (the C extension's when built, else confluent-kafka)
instead of assigning its confluent-kafka consumer, which it keeps for the group's offsets
(read at the start, committed at each acknowledgement, with R, as in per-row mode).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pyarrow.compute as pc

from schemas.hlc import Hlc

from .arrow_windows import ArrowWindow, ArrowWindows
from .columnar import NATIVE, NativeReader, PlainReader, reader, settle
from .decoding import BadRecord, ConsumerError, Decoder
from .windows import Partition

log = logging.getLogger(__name__)

_FATAL = -150  # librdkafka's RD_KAFKA_RESP_ERR__FATAL


class ArrowSession:
    """What a columnar consumer reads with: its reader and its windows being made."""

    def __init__(  # noqa: PLR0917 - the consumer's parts
        self,
        settings: Mapping[str, Any],
        tables: Mapping[Partition, str],
        starts: Mapping[Partition, int],
        after: Hlc | None,
        piece: int,
        native: bool | None,
        reader_of: Any = None,
    ) -> None:
        self.state = ArrowWindows(tables, after, piece, reader_of)
        slots = list(self.state.slots)
        self.reader: NativeReader | PlainReader = reader(
            settings, slots, [starts[p] for p in slots], native=native
        )
        self.native = isinstance(self.reader, NativeReader)
        self.paused: set[int] = set()
        log.info(
            "columnar reader: %s",
            NATIVE if self.native else "confluent-kafka (the C extension is not in use)",
        )

    def read(
        self, decode: Decoder, on_bad: Callable[[BadRecord], None] | None, count: int, wait: float
    ) -> int:
        """A batch into the windows; the records read."""
        columns = self.reader.read(count, wait)
        for slot, _offset, code, text in columns.errors:
            if code == _FATAL:
                raise ConsumerError(f"reading the output failed: {text} (partition slot {slot})")
        batch, bad = settle(columns, decode.reader.read)
        if len(batch) and pc.min(batch.slot).as_py() < 0:  # librdkafka named no partition of ours
            raise ConsumerError("the columnar reader read a record of a partition not assigned")
        for found in bad:
            topic, partition = self.state.slots[found.slot]
            record = decode.bad(topic, partition, found.offset, found.error)
            if on_bad is None:
                raise record from found.error
            on_bad(record)
        self.state.add(batch)
        return columns.records

    def pause_ahead(self, hold: int) -> None:
        """Above ``hold`` rows held, pause the partitions running ahead (as per-row mode)."""
        ahead = self.state.ahead() if self.state.held_rows() > hold else set()
        pause, resume = ahead - self.paused, self.paused - ahead
        if pause:
            self.reader.pause(sorted(pause))
        if resume:
            self.reader.pause(sorted(resume), resume=True)
        self.paused = ahead

    def close(self) -> None:
        """Leave."""
        self.reader.close()


def arrow_windows(
    consumer: Any, session: ArrowSession, until: Hlc | None, idle: float | None
) -> Iterator[ArrowWindow]:
    """:meth:`ChangefeedConsumer.windows`' loop over column batches."""
    state = session.state
    quiet_since = time.monotonic()
    while until is None or state.after is None or state.after < until:
        read = session.read(consumer.decode, consumer.on_bad, consumer.batch, consumer.poll_seconds)
        ready = state.ready()
        if read:
            quiet_since = time.monotonic()
        for window in ready:
            log.info(
                "window %s: %d rows (last piece: %s)", window.resolved, len(window), window.last
            )
            if window.last:
                consumer.pending[window.resolved] = state.committable()
            yield window
            if until is not None and window.last and window.resolved >= until:
                return
        session.pause_ahead(consumer.hold)
        if idle is not None and time.monotonic() - quiet_since > idle:
            return
