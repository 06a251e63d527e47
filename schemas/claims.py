"""Claim checks: an output record too large for Kafka, kept in a store, a reference in its place.

Under ``oversized_rows: claim_check`` a row whose record would exceed the producer's
``max.request.size`` is written whole (its value's bytes, as the encoder made them) to the
claim store, and the output topic gets, in the row's place (same key, so the same partition
and the same order among its key's versions), a small record whose value is a
**reference**: :data:`PREFIX` and then JSON ``{"uri": …, "bytes": …, "sha256": …}``, with
the header :data:`HEADER` holding the URI. No JSON envelope or Avro framing starts with
:data:`PREFIX`, so a reader tells a reference by its first bytes; the consumer library
(``highwater_consumer``) reads the claimed value in its place, checked against its size and
SHA-256.

A claimed value's name is its SHA-256 (``<store>/<changefeed>/<topic>/<sha256>``), so a task
run again writes the same file again: nothing a retry or a zombie task writes differs from
what a committed reference names. The store is any URI Arrow's filesystems take (``file://``
or an absolute path, ``hdfs://``, ``s3://``, ``gs://``), shared by the executors that write
and the consumers that read. Spark-free; a local store needs nothing more, another needs Arrow
(imported only where a claim is written or read there).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from pathlib import Path

from .errors import HighwaterError

PREFIX = b"HWCLAIM1 "  # a reference value's first bytes ('{' starts JSON; 0x00, 0xC3 Avro)
HEADER = "highwater.claim"  # a reference record's header: the claimed value's URI


class ClaimError(HighwaterError):
    """A claimed value cannot be written to its store, or read back whole."""

    remedy = (
        "Check that `claim_store` is reachable from every executor and every consumer, with "
        "write access for the changefeed and read access for its consumers; a claimed value "
        "whose size or SHA-256 differs from its reference was changed in the store."
    )


@dataclass(frozen=True)
class Reference:
    """Where a claimed value is, and what it must be."""

    uri: str
    size: int  # bytes
    sha256: str

    def encode(self) -> bytes:
        """The reference record's value."""
        return (
            PREFIX
            + json.dumps(
                {"uri": self.uri, "bytes": self.size, "sha256": self.sha256}, separators=(",", ":")
            ).encode()
        )

    @classmethod
    def decode(cls, value: bytes) -> Reference | None:
        """The reference ``value`` is, or None for any other value."""
        if not value.startswith(PREFIX):
            return None
        try:
            fields = json.loads(value[len(PREFIX) :])
            return cls(str(fields["uri"]), int(fields["bytes"]), str(fields["sha256"]))
        except (ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"not a claim check's reference: {exc}") from None


def _local(uri: str) -> str | None:
    """The path of a local ``uri`` (an absolute path or ``file://``), else None."""
    if uri.startswith("file://"):
        return uri.removeprefix("file://")
    return uri if uri.startswith("/") else None


def _write(uri: str, value: bytes) -> None:
    """``value`` at ``uri``, written beside it first and moved there (never half-written)."""
    partial = f"{uri.rsplit('/', 1)[0]}/.{uri.rsplit('/', 1)[1]}.{uuid.uuid4().hex}"
    local = _local(uri)
    if local is not None:
        folder = Path(local).parent
        folder.mkdir(parents=True, exist_ok=True)
        temporary = folder / Path(partial).name
        temporary.write_bytes(value)
        temporary.replace(local)
        return
    from pyarrow import fs  # noqa: PLC0415 - another filesystem: Arrow's

    filesystem, path = fs.FileSystem.from_uri(uri)
    folder = path.rsplit("/", 1)[0]
    filesystem.create_dir(folder, recursive=True)
    moved = f"{folder}/{partial.rsplit('/', 1)[1]}"
    with filesystem.open_output_stream(moved) as out:
        out.write(value)
    filesystem.move(moved, path)


def _read(uri: str) -> bytes:
    local = _local(uri)
    if local is not None:
        return Path(local).read_bytes()
    from pyarrow import fs  # noqa: PLC0415 - another filesystem: Arrow's

    filesystem, path = fs.FileSystem.from_uri(uri)
    with filesystem.open_input_stream(path) as source:
        return bytes(source.read())


def put(store: str, changefeed: str, topic: str, value: bytes) -> Reference:
    """Write ``value`` to ``store`` under its SHA-256 (again, if it is there): its reference."""
    digest = hashlib.sha256(value).hexdigest()
    uri = "/".join([store.rstrip("/"), changefeed, topic, digest])
    try:
        _write(uri, value)
    except (OSError, ValueError, ImportError) as exc:
        raise ClaimError(f"cannot write a claimed value to {uri}: {exc}") from exc
    return Reference(uri, len(value), digest)


def get(reference: Reference) -> bytes:
    """The value ``reference`` names, checked against its size and SHA-256."""
    try:
        value = _read(reference.uri)
    except (OSError, ValueError, ImportError) as exc:
        raise ClaimError(f"cannot read the claimed value {reference.uri}: {exc}") from exc
    if len(value) != reference.size or hashlib.sha256(value).hexdigest() != reference.sha256:
        raise ClaimError(
            f"the claimed value {reference.uri} is not what its reference names "
            f"({len(value):,} bytes, its SHA-256 {hashlib.sha256(value).hexdigest()}; named: "
            f"{reference.size:,} bytes, {reference.sha256})"
        )
    return value


def claimed(value: bytes | None) -> bytes | None:
    """The value a reference names (None: ``value`` is no reference)."""
    if value is None:
        return None
    reference = Reference.decode(value)
    return None if reference is None else get(reference)
