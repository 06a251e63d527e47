"""Reading a protobuf output (``encoder.format: protobuf``): its ``Message`` and ``Key``.

Records in Confluent's wire format (a registry) or bare (none), told apart by their first
byte (``schemas/protobuf.py``). A row change is a ``wrapped`` (with ``updated``) or
``enriched`` (with ``source.ts_hlc``) message, a marker a ``resolved`` one; values come back
as ``schemas.protobuf.python`` gives them (decimals exact, instants ISO 8601 text, UTC).
"""

from __future__ import annotations

from typing import Any

from google.protobuf.message import DecodeError

from schemas import highwater_changefeed_pb2 as pb
from schemas.hlc import Hlc, parse_packed
from schemas.protobuf import columns, unframed

from .decoding import TOMBSTONE, Change, Marker, Read


def _parsed(kind: Any, data: bytes, what: str) -> Any:
    """``data`` (bare or framed) parsed as a ``kind`` message; ``ValueError`` if it is not."""
    message = kind()
    try:
        message.ParseFromString(unframed(data))
    except DecodeError as exc:
        raise ValueError(f"{what} is not a protobuf {kind.__name__}: {exc}") from None
    return message


def _message(value: bytes) -> Any:
    return _parsed(pb.Message, value, "the value")


def _key(key: bytes) -> dict[str, Any]:
    return columns(_parsed(pb.Key, key, "the key").key)


def _change(message: pb.Message) -> tuple[str, Any]:
    """A row message's commit time and its envelope (wrapped or enriched)."""
    which = message.WhichOneof("data")
    if which == "wrapped" and message.wrapped.updated:
        return message.wrapped.updated, message.wrapped
    if which == "enriched" and message.enriched.source.ts_hlc:
        return message.enriched.source.ts_hlc, message.enriched
    raise ValueError(
        "no commit time in the message: consuming windows needs the changefeed's envelope: "
        "wrapped with updated: true, or enriched with updated: true and "
        "enriched_properties: [source]"
    )


class ProtobufDecoder:
    """The protobuf messages, bare or in Confluent's wire format."""

    def read(self, key: bytes | None, value: bytes | None) -> Read:
        """A record's marker or time; ``ValueError`` says why it is not Highwater's."""
        if value is None:
            raise ValueError(TOMBSTONE)
        message = _message(value)
        if message.WhichOneof("data") == "resolved":
            return Marker(Hlc.parse(message.resolved.resolved))
        updated, _ = _change(message)
        if key is None:
            raise ValueError("a row change without a key")
        _key(key)
        return parse_packed(updated)

    def change(self, key: bytes, value: bytes) -> Change:
        """A row change read whole (a record :meth:`read` took)."""
        updated, envelope = _change(_message(value))
        after = columns(envelope.after.values) if envelope.HasField("after") else None
        before = columns(envelope.before.values) if envelope.HasField("before") else None
        return Change(Hlc.parse(updated), _key(key), after, before)
