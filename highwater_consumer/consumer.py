"""A changefeed's output topics read as resolved windows, committed once acknowledged.

    with ChangefeedConsumer(Output.of_changefeed("localhost:9092", "orders-feed"), "my-app") as c:
        for window in c.windows():
            apply(window.rows)          # in commit order, every row once
            c.ack(window)               # offsets (and R) committed only now

Every partition of every output topic is read (assigned, not balanced: windows need them all)
with ``isolation.level=read_committed``, so exactly-once output shows only committed rows.
While more than ``hold`` rows wait above the frontier, a partition whose latest marker is
above it is paused until the others catch up: what it would read could only wait in memory.
The committed offsets carry R in their
metadata: a restarted consumer resumes after the last acknowledged window and drops replays
(``after``, or the R a sink stored itself, e.g. in the same SQL transaction as its rows).
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from schemas.claims import ClaimError
from schemas.hlc import Hlc

from .decoding import BadRecord, ConsumerError, Decoder, claimed_read
from .output import Output
from .windows import Partition, Window, Windows

if TYPE_CHECKING:  # pyarrow is the [arrow] extra's: imported when columnar mode is used
    from .arrow_windows import ArrowWindow
    from .columnar_consumer import ArrowSession

log = logging.getLogger(__name__)

# the group's coordinator is being chosen or loaded (a new broker, a moved partition): wait
_COORDINATOR_MOVING = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError._TIMED_OUT,
}

METADATA_PREFIX = "highwater R="  # a committed offset's metadata: the acknowledged window's R


class ChangefeedConsumer:
    """Reads ``output`` as consumer group ``group`` and hands over resolved windows.

    ``after``: the last window the application holds (None: the R committed with the group's
    offsets, if any); ``piece``: the most rows handed over at once (a bigger window comes in
    pieces, the last marked); ``on_bad``: called with each :class:`BadRecord` (None: raise it,
    stopping at the record); ``hold``: the rows held above the frontier beyond which the
    partitions running ahead are paused; ``batch``: the most records read at once (they live
    in memory together: 20,000 of 4 KB are 80 MB; smaller batches read slower, 2,000 at 0.6
    of the speed); ``columnar``: windows as Arrow tables (:meth:`arrow_windows`, not
    :meth:`windows`), read by the C extension's reader when it is built (``native``: True
    requires it, False reads through confluent-kafka).

    Making one touches nothing: the broker is first reached by :meth:`open` (entering the
    ``with`` block, or the first :meth:`windows`), which finds the partitions and the group's
    committed offsets (and ``after``, from their metadata) and assigns them.
    """

    def __init__(
        self,
        output: Output,
        group: str,
        *,
        after: Hlc | None = None,
        piece: int = 100_000,
        on_bad: Callable[[BadRecord], None] | None = None,
        batch: int = 20_000,
        poll_seconds: float = 0.5,
        hold: int = 500_000,
        columnar: bool = False,
        native: bool | None = None,
    ) -> None:
        self.output = output
        self.group = group
        self.after = after
        self.piece = piece
        self.on_bad = on_bad
        self.batch = batch
        self.poll_seconds = poll_seconds
        self.hold = hold
        self.columnar = columnar  # arrow_windows(), read by a columnar reader
        self.native = native  # columnar: the C reader (None: when built; False: confluent-kafka)
        self._opened: _Opened | None = None
        self.paused: set[Partition] = set()
        self.reported = time.monotonic()  # when the state was last logged
        self.pending: dict[Hlc, dict[Partition, int]] = {}  # handed over, not acknowledged

    def open(self) -> ChangefeedConsumer:
        """Reach the broker: the output's partitions assigned where the group left off.

        ``after`` becomes the R committed with the offsets unless one was given. Once only
        (opening again does nothing).
        """
        self._session()
        return self

    def _session(self) -> _Opened:
        if self._opened is None:
            self._opened = self._connect()
        return self._opened

    def _connect(self) -> _Opened:
        output = self.output
        decode = output.decoder()  # Avro by a schema topic reads the topic now
        settings = _settings(output, self.group)
        consumer = Consumer(settings)
        try:
            partitions = _partitions(consumer, output)
            committed = committed_offsets(consumer, partitions)
            stored = [_stored(tp.metadata) for tp in committed if tp.offset >= 0]
            found = [r for r in stored if r is not None]
            if self.after is None:
                self.after = max(found, default=None)
            tables = {(t, p): output.topics[t] for t, p in partitions}
            state = Windows(tables, self.after, self.piece, decode.change)
            starts = {(tp.topic, tp.partition): tp.offset for tp in committed}
            if self.columnar:
                from .columnar_consumer import ArrowSession  # noqa: PLC0415

                begin = {p: _start(o) for p, o in starts.items()}
                session = ArrowSession(
                    settings, tables, begin, self.after, self.piece, self.native, decode.change
                )
                return _Opened(consumer, decode, state, session)
            consumer.assign([TopicPartition(t, p, _start(starts[(t, p)])) for t, p in partitions])
        except BaseException:
            consumer.close()
            raise
        return _Opened(consumer, decode, state, None)

    @property
    def consumer(self) -> Consumer:
        """confluent-kafka's consumer of the output (the consumer opened if it was not)."""
        return self._session().consumer

    @property
    def decode(self) -> Decoder:
        """The output's decoder (the consumer opened if it was not)."""
        return self._session().decode

    @property
    def state(self) -> Windows:
        """The windows being made (the consumer opened if it was not)."""
        return self._session().state

    def arrow_windows(
        self, *, until: Hlc | None = None, idle: float | None = None
    ) -> Iterator[ArrowWindow]:
        """As :meth:`windows`, each window (or piece) an :class:`ArrowWindow` (``columnar``)."""
        session = self._session().columnar
        if session is None:
            raise ConsumerError("arrow_windows() reads a consumer made with columnar=True")
        from .columnar_consumer import arrow_windows  # noqa: PLC0415

        return arrow_windows(self, session, until, idle)

    def windows(self, *, until: Hlc | None = None, idle: float | None = None) -> Iterator[Window]:
        """Windows as they resolve, each one's pieces in commit order.

        Forever, or until a window at or above ``until`` was handed over (or was before the
        start), or ``idle`` seconds passed with nothing to read.
        """
        if self.columnar:
            raise ConsumerError("a columnar consumer hands over arrow_windows()")
        quiet_since = time.monotonic()
        while until is None or self.state.after is None or self.state.after < until:
            with _collector_paused():
                messages = self.consumer.consume(self.batch, self.poll_seconds)
                read_into(self.state, self.decode, self.on_bad, messages)
                ready = list(self.state.ready())
                read, messages = len(messages), []  # the batch's Messages go now, in the pause
            if read:
                quiet_since = time.monotonic()
            for window in ready:
                log.info(
                    "window %s: %d rows (last piece: %s)",
                    window.resolved,
                    len(window.rows),
                    window.last,
                )
                if window.last:
                    self.pending[window.resolved] = self.state.committable()
                yield window
                if until is not None and window.last and window.resolved >= until:
                    return
            self._pause_ahead()
            if time.monotonic() - self.reported > 10:
                self.reported = time.monotonic()
                markers = {f"{t}/{p}": str(h.marker) for (t, p), h in self.state.partitions.items()}
                log.info(
                    "waiting above %s: markers %s, paused %s, %d rows held",
                    self.state.after,
                    markers,
                    sorted(self.paused),
                    self.state.held(),
                )
            if idle is not None and time.monotonic() - quiet_since > idle:
                return

    def _pause_ahead(self) -> None:
        """Above ``hold`` rows held, pause the partitions running ahead; below, read them all.

        Pausing costs reading speed (a resumed partition is fetched again), so it only bounds
        memory: while the frontier waits on a slow partition, the others stop at their marker.
        """
        ahead = self.state.ahead() if self.state.held() > self.hold else set()
        pause, resume = ahead - self.paused, self.paused - ahead
        if pause or resume:
            log.info(
                "paused %s, resumed %s (frontier %s, %d rows held)",
                sorted(pause),
                sorted(resume),
                self.state.frontier,
                self.state.held(),
            )
        if pause:
            self.consumer.pause([TopicPartition(t, p) for t, p in sorted(pause)])
        if resume:
            self.consumer.resume([TopicPartition(t, p) for t, p in sorted(resume)])
        self.paused = ahead

    def ack(self, window: Window | ArrowWindow) -> None:
        """The application holds ``window``: commit the offsets a restart resumes from, with R.

        A piece that is not its window's last commits nothing (the window is acknowledged
        whole); windows handed over before it are acknowledged with it.
        """
        if not window.last:
            return
        offsets = self.pending.pop(window.resolved, None)
        if offsets is None:
            raise ConsumerError(f"window {window.resolved} was not handed over, or acknowledged")
        for older in [r for r in self.pending if r < window.resolved]:
            del self.pending[older]
        metadata = f"{METADATA_PREFIX}{window.resolved}"
        commit = [TopicPartition(t, p, o, metadata=metadata) for (t, p), o in offsets.items()]
        if commit:
            try:
                self.consumer.commit(offsets=commit, asynchronous=False)
            except KafkaException as exc:
                raise ConsumerError(
                    f"committing the offsets of window {window.resolved} failed: {exc}"
                ) from exc
        self.after = window.resolved

    def close(self) -> None:
        """Leave (uncommitted windows are handed over again to the next consumer).

        A consumer never opened has nothing to close.
        """
        if self._opened is not None:
            if self._opened.columnar is not None:
                self._opened.columnar.close()
            self._opened.consumer.close()

    def __enter__(self) -> ChangefeedConsumer:
        return self.open()

    def __exit__(self, *exc: Any) -> None:
        self.close()


def read_into(
    state: Windows,
    decode: Decoder,
    on_bad: Callable[[BadRecord], None] | None,
    messages: list[Message],
) -> None:
    """A batch of records into the windows (the loop every record goes through).

    A record the decoder refuses is a claim check's reference, read as the value it names
    (a store that cannot give it back stops the consumer: the store's fault, not the
    record's), or a bad record: ``on_bad``'s, or raised without it.
    """
    read, add = decode.reader.read, state.add
    for message in messages:
        if message.error() is not None:
            _failed(message)
            continue
        key, value = message.key(), message.value()
        try:
            found = read(key, value)
        except Exception as exc:
            try:
                value, found = claimed_read(read, key, value, exc)
            except ClaimError:
                raise
            except Exception as bad:
                _bad(state, decode, on_bad, message, bad)
                continue
        place: Partition = (message.topic(), message.partition())  # type: ignore[assignment]
        offset: int = message.offset()  # type: ignore[assignment]
        if type(found) is int:
            add(place, offset, found, key, value)  # type: ignore[arg-type]
        else:
            state.marker(place, offset, found.resolved)  # type: ignore[union-attr]


def _bad(
    state: Windows,
    decode: Decoder,
    on_bad: Callable[[BadRecord], None] | None,
    message: Message,
    exc: Exception,
) -> None:
    topic, partition, offset = message.topic(), message.partition(), message.offset()
    record = decode.bad(topic, partition, offset, exc)  # type: ignore[arg-type]
    if on_bad is None:
        raise record from exc
    on_bad(record)
    state.skipped((topic, partition), offset)  # type: ignore[arg-type]


def _settings(output: Output, group: str) -> dict[str, Any]:
    """The output consumer's librdkafka configuration (either reader's)."""
    return {
        "bootstrap.servers": output.bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "auto.offset.reset": "earliest",
        # larger fetches than librdkafka's 1 MB a partition: ~40 % more records a second
        "max.partition.fetch.bytes": 8 * 1024 * 1024,
        # a partition whose fetched records wait beyond librdkafka's queue thresholds is
        # fetched again after this long (librdkafka: 1 s): the reader sat idle a third
        # of the time (109k -> 118k changes/s)
        "fetch.queue.backoff.ms": 20,
        **output.kafka,
    }


def _failed(message: Message) -> None:
    error = message.error()
    if error is not None and not error.retriable() and error.fatal():
        raise ConsumerError(f"reading the output failed: {error}")
    # else librdkafka retries on its own (an event, not a record)


def committed_offsets(
    consumer: Consumer, partitions: list[Partition], timeout: float = 60
) -> list[TopicPartition]:
    """The group's committed offsets (a new broker's coordinator may need a moment)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return list(consumer.committed([TopicPartition(*p) for p in partitions], 30))
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            code = error.code() if isinstance(error, KafkaError) else None
            retriable = code in _COORDINATOR_MOVING or (
                isinstance(error, KafkaError) and error.retriable()
            )
            if not retriable or time.monotonic() > deadline:
                raise ConsumerError(f"the group's committed offsets: {exc}") from exc
            time.sleep(0.5)


def _partitions(consumer: Consumer, output: Output) -> list[Partition]:
    """Every partition of every output topic, in order."""
    out: list[Partition] = []
    for topic in sorted(output.topics):
        metadata = consumer.list_topics(topic, timeout=30).topics.get(topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            raise ConsumerError(f"output topic {topic!r} cannot be read")
        out.extend((topic, p) for p in sorted(metadata.partitions))
    return out


class _Opened(NamedTuple):
    """What an open consumer has: the client, the output's decoder, the windows being made."""

    consumer: Consumer
    decode: Decoder
    state: Windows
    columnar: ArrowSession | None  # columnar mode's reader and windows


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while a batch is read and its windows made.

    A batch is thousands of Message objects that die together at its end, and a window
    thousands of rows: the collector would walk them (and every older object) dozens of times
    a batch while they live (20 % of the consumer's time), yet nothing here makes a cycle.
    The collector runs as before once the batch is done (and if the application paused it
    itself, it stays paused).
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _start(committed: int) -> int:
    """Where a partition is read from: its committed offset, else its beginning."""
    return committed if committed >= 0 else OFFSET_BEGINNING


def _stored(metadata: str | None) -> Hlc | None:
    if not metadata or not metadata.startswith(METADATA_PREFIX):
        return None
    return Hlc.parse(metadata.removeprefix(METADATA_PREFIX))
