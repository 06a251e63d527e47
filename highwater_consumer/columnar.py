"""A changefeed's output read in batches of columns: Arrow arrays, no Python object a record.

:class:`NativeReader` is librdkafka read by the consumer's C extension (``_rdbatch``, built
with the distribution when a C compiler is there): a batch of records comes back as Arrow's
buffers, and each JSON record was scanned in C for what windows need (a row's ``updated``
HLC, its ``after``'s names and its key's width, or a marker's ``resolved``). Without the
extension :class:`PlainReader` gives the same batches through confluent-kafka, a Python
``Message`` a record (slower). :data:`NATIVE` says which is in use.

The scan says only what it is sure of; every other record (``CHECK``: any Avro record, JSON
the scan does not take as strict, forms it does not know) is read by the output's Python
decoder here, as the per-row consumer reads it: a row, a marker, or a bad record.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

import orjson
import pyarrow as pa

from schemas.claims import ClaimError
from schemas.hlc import LOGICAL_SCALE
from schemas.jsontext import loads_exact

from .decoding import JsonDecoder, Marker, claimed_read, payload

ROW, MARKER, CHECK, SKIP = 0, 1, 2, 3  # a record's kind (SKIP: bad, reported)
_U64 = 1 << 64


def _native() -> tuple[Any, str | None]:
    """The C reader and librdkafka's version, or (None, why not)."""
    try:
        from . import _rdbatch  # type: ignore[attr-defined]  # noqa: PLC0415
    except ImportError as exc:
        return None, f"the C extension is not built ({exc})"
    import confluent_kafka  # noqa: PLC0415

    here = os.path.dirname(os.path.dirname(confluent_kafka.__file__))
    found = sorted(glob.glob(os.path.join(here, "confluent_kafka.libs", "librdkafka*.so*")))
    try:  # confluent-kafka's own copy (its wheel's), else the system's
        version = _rdbatch.load(found[0] if found else "librdkafka.so.1")
    except _rdbatch.NativeError as exc:
        return None, str(exc)
    return _rdbatch, version


_RDBATCH, _WHY = _native()
NATIVE: str | None = f"librdkafka {_WHY} (highwater_consumer._rdbatch)" if _RDBATCH else None
WHY_NOT_NATIVE: str | None = None if _RDBATCH else _WHY


class Batch(NamedTuple):
    """Records read, as columns; ``slot``: the partition's place in the reader's order."""

    slot: pa.Array  # int32
    offset: pa.Array  # int64
    kind: pa.Array  # uint8: ROW, MARKER, SKIP (CHECK read by the decoder already)
    wall: pa.Array  # uint64: a row's updated, a marker's resolved
    logical: pa.Array  # uint64
    width: pa.Array  # int32: a JSON row's key's elements
    key: pa.Array  # large_binary
    value: pa.Array  # large_binary
    shape: pa.Array  # large_binary: a JSON row's after's names joined by NUL; null: deleted

    def __len__(self) -> int:
        return len(self.slot)


class Columns(NamedTuple):
    """A batch's buffers before they are Arrow arrays (what a reader returns)."""

    records: int
    buffers: dict[str, bytearray]
    errors: list[tuple[int, int, int, str]]  # slot, offset, librdkafka's code and text


def _binary(count: int, buffers: Mapping[str, Any], name: str) -> pa.Array:
    return pa.Array.from_buffers(
        pa.large_binary(),
        count,
        [
            pa.py_buffer(buffers[f"{name}_valid"]),
            pa.py_buffer(buffers[f"{name}_offsets"]),
            pa.py_buffer(buffers[f"{name}_data"]),
        ],
    )


def _fixed(kind: pa.DataType, count: int, data: Any) -> pa.Array:
    return pa.Array.from_buffers(kind, count, [None, pa.py_buffer(data)])


class BadAt(NamedTuple):
    """A record the decoder refused: its slot, offset, and the decoder's exception."""

    slot: int
    offset: int
    error: Exception


def settle(columns: Columns, read: Callable[[Any, Any], Any]) -> tuple[Batch, list[BadAt]]:
    """The batch as Arrow arrays, each record the scan was not sure of read by ``read``.

    ``read``: the decoder's (``JsonDecoder.read``/``AvroDecoder.read``); a record it refuses
    is SKIP and listed (bad). JSON rows read here get their shape and width as the scan's.
    """
    count, buffers = columns.records, columns.buffers
    bad: list[BadAt] = []
    claimed: dict[int, bytes] = {}
    checks = buffers["kind"].find(CHECK) >= 0
    shapes = _read_checks(buffers, read, bad, claimed) if checks else {}
    shape, value = _binary(count, buffers, "shape"), _binary(count, buffers, "value")
    if shapes:
        shape = _replaced(shape, shapes)
    if claimed:  # references read as their claimed values: those values in their place
        value = _replaced(value, claimed)
    batch = Batch(
        _fixed(pa.int32(), count, buffers["slot"]),
        _fixed(pa.int64(), count, buffers["offset"]),
        _fixed(pa.uint8(), count, buffers["kind"]),
        _fixed(pa.uint64(), count, buffers["wall"]),
        _fixed(pa.uint64(), count, buffers["logical"]),
        _fixed(pa.int32(), count, buffers["width"]),
        _binary(count, buffers, "key"),
        value,
        shape,
    )
    return batch, bad


def _replaced(array: pa.Array, by_place: Mapping[int, bytes | None]) -> pa.Array:
    """``array`` (large binary) with the values of ``by_place`` at their places."""
    listed = array.to_pylist()
    for at, found in by_place.items():
        listed[at] = found
    return pa.array(listed, pa.large_binary())


def _read_checks(
    buffers: dict[str, bytearray],
    read: Callable[[Any, Any], Any],
    bad: list[BadAt],
    claimed: dict[int, bytes],
) -> dict[int, bytes | None]:
    """The CHECK records read by ``read``, their kind and time set; JSON rows' shapes.

    A claim check's reference is read as the value it names, kept in ``claimed`` by place.
    """
    kinds = buffers["kind"]
    shapes: dict[int, bytes | None] = {}
    walls = memoryview(buffers["wall"]).cast("Q")
    logicals = memoryview(buffers["logical"]).cast("Q")
    widths = memoryview(buffers["width"]).cast("i")
    slots = memoryview(buffers["slot"]).cast("i")
    offsets = memoryview(buffers["offset"]).cast("q")
    key_at = memoryview(buffers["key_offsets"]).cast("q")
    value_at = memoryview(buffers["value_offsets"]).cast("q")
    keys_valid, values_valid = buffers["key_valid"], buffers["value_valid"]
    key_data, value_data = buffers["key_data"], buffers["value_data"]
    json = isinstance(getattr(read, "__self__", None), JsonDecoder)
    at = kinds.find(CHECK)
    while at >= 0:
        key = bytes(key_data[key_at[at] : key_at[at + 1]]) if _bit(keys_valid, at) else None
        value = (
            bytes(value_data[value_at[at] : value_at[at + 1]]) if _bit(values_valid, at) else None
        )
        try:
            try:
                found = read(key, value)
            except Exception as exc:  # a claim check's reference, or a bad record
                value, found = claimed_read(read, key, value, exc)
                claimed[at] = value
        except ClaimError:
            raise  # the store, not the record: the consumer stops
        except Exception as exc:  # the decoder's error: a bad record
            kinds[at] = SKIP
            bad.append(BadAt(slots[at], offsets[at], exc))
        else:
            if type(found) is Marker:
                kinds[at] = MARKER
                time = found.resolved.packed()
            else:
                kinds[at] = ROW
                time = found
                if json:
                    shapes[at], widths[at] = _json_shape(key, value)  # type: ignore[arg-type]
            wall, logical = divmod(time, LOGICAL_SCALE)
            if wall >= _U64:
                raise ValueError(f"an HLC wall of {wall} is beyond the columnar reader's 64 bits")
            walls[at], logicals[at] = wall, logical
        at = kinds.find(CHECK, at + 1)
    return shapes


def _bit(bits: bytearray, at: int) -> bool:
    return bool(bits[at >> 3] >> (at & 7) & 1)


def _json(data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return loads_exact(data)


def _json_shape(key: bytes, value: bytes) -> tuple[bytes | None, int]:
    """A JSON row's after's names joined by NUL (None: deleted), and its key's width."""
    after = payload(_json(value))["after"]
    width = len(payload(_json(key)))
    return (None if after is None else "\0".join(after).encode()), width


class NativeReader:
    """librdkafka's consumer of ``partitions`` (in slot order), read by the C extension.

    ``settings``: librdkafka's configuration; ``starts``: each partition's first offset.
    """

    def __init__(
        self, settings: Mapping[str, Any], partitions: list[tuple[str, int]], starts: list[int]
    ) -> None:
        if _RDBATCH is None:
            raise RuntimeError(f"the native reader is not available: {WHY_NOT_NATIVE}")
        topics: dict[str, int] = {}
        for topic, partition in partitions:
            topics[topic] = max(topics.get(topic, 0), partition + 1)
        if [(t, p) for t, n in topics.items() for p in range(n)] != list(partitions):
            raise ValueError("the native reader reads every partition of its topics, in order")
        config = [(k, _setting(v)) for k, v in settings.items()]
        self._reader = _RDBATCH.Reader(config, list(topics.items()), list(starts))

    def read(self, count: int, timeout: float) -> Columns:
        """Up to ``count`` records (waiting up to ``timeout`` seconds)."""
        return Columns(*self._reader.read(count, int(timeout * 1000)))

    def pause(self, slots: Iterable[int], *, resume: bool = False) -> None:
        """Stop fetching these partitions (or fetch them again)."""
        self._reader.pause(list(slots), resume)

    def close(self) -> None:
        """Leave."""
        self._reader.close()


def _setting(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class PlainReader:
    """The same batches through confluent-kafka (no C extension): a ``Message`` a record."""

    def __init__(
        self, settings: Mapping[str, Any], partitions: list[tuple[str, int]], starts: list[int]
    ) -> None:
        from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415

        self._partition = TopicPartition
        self.slots = {p: n for n, p in enumerate(partitions)}
        self.consumer = Consumer(dict(settings))
        self.consumer.assign(
            [TopicPartition(t, p, s) for (t, p), s in zip(partitions, starts, strict=True)]
        )
        self.partitions = partitions

    def read(self, count: int, timeout: float) -> Columns:
        """Up to ``count`` records (waiting up to ``timeout`` seconds), each a CHECK."""
        errors: list[tuple[int, int, int, str]] = []
        slots: list[int] = []
        offsets: list[int] = []
        keys: list[bytes | None] = []
        values: list[bytes | None] = []
        for message in self.consumer.consume(count, timeout):
            place = (message.topic(), message.partition())
            error = message.error()
            if error is not None:
                errors.append((self.slots.get(place, -1), -1, error.code(), str(error)))  # type: ignore[arg-type]
                continue
            slots.append(self.slots[place])  # type: ignore[index]
            offsets.append(message.offset())  # type: ignore[arg-type]
            keys.append(message.key())
            values.append(message.value())
        return columns_of(slots, offsets, keys, values, errors)

    def pause(self, slots: Iterable[int], *, resume: bool = False) -> None:
        """Stop fetching these partitions (or fetch them again)."""
        places = [self._partition(*self.partitions[s]) for s in slots]
        if places:
            (self.consumer.resume if resume else self.consumer.pause)(places)

    def close(self) -> None:
        """Leave."""
        self.consumer.close()


def columns_of(
    slots: list[int],
    offsets: list[int],
    keys: list[bytes | None],
    values: list[bytes | None],
    errors: list[tuple[int, int, int, str]] | None = None,
) -> Columns:
    """Records given as lists, as a reader's batch: every one CHECK (the decoder reads it)."""
    n = len(slots)
    key = pa.array(keys, pa.large_binary())
    value = pa.array(values, pa.large_binary())
    buffers = {
        "slot": bytearray(pa.array(slots, pa.int32()).buffers()[1] or b""),
        "offset": bytearray(pa.array(offsets, pa.int64()).buffers()[1] or b""),
        "kind": bytearray([CHECK]) * n,
        "wall": bytearray(8 * n),
        "logical": bytearray(8 * n),
        "width": bytearray(4 * n),
        **_binary_buffers("key", key),
        **_binary_buffers("value", value),
        **_binary_buffers("shape", pa.nulls(n, pa.large_binary())),
    }
    return Columns(n, buffers, errors or [])


def _binary_buffers(name: str, array: pa.Array) -> dict[str, bytearray]:
    n = len(array)
    valid, offsets, data = array.buffers()
    return {
        f"{name}_valid": bytearray(valid)
        if valid is not None
        else bytearray(b"\xff" * (n // 8 + 1)),
        f"{name}_offsets": bytearray(offsets) if offsets is not None else bytearray(8 * (n + 1)),
        f"{name}_data": bytearray(data) if data is not None else bytearray(),
    }


def reader(
    settings: Mapping[str, Any],
    partitions: list[tuple[str, int]],
    starts: list[int],
    *,
    native: bool | None = None,
) -> NativeReader | PlainReader:
    """The native reader when built (``native``: True requires it, False refuses it)."""
    if native is None:
        native = _RDBATCH is not None
    kind = NativeReader if native else PlainReader
    return kind(settings, partitions, starts)
