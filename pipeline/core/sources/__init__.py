"""Source adapters: one raw Kafka record in, one internal change (or marker) out.

The contract is ``base.py``; one module per ``format:`` of a source:

==============  =================================================================
``native``      CockroachDB's changefeed JSON, resolved markers on every partition
``canal-json``  TiCDC's Canal-JSON (TiDB extension): watermarks are the markers
``debezium``    Debezium's JSON events (with or without schemas); no markers of its
                own: they are derived from its transaction metadata topic
                (``transactions.py``, ``transaction_feed.py``)
==============  =================================================================

Beside them: ``connect_types.py`` (Kafka Connect's types in Debezium's row images) and
``wire.py`` (records in Confluent's wire format, read by their registry's schemas).
"""

from __future__ import annotations

from collections.abc import Mapping

from .base import (
    NOT_JSON,
    Adapter,
    BadRecord,
    Change,
    LogPosition,
    Marker,
    Op,
    Rows,
    SourceShape,
    SourceUnavailable,
    exact_flags,
    loads,
    parse_hlc,
    record_time,
)
from .canal import CanalJsonAdapter
from .debezium import (
    DebeziumAdapter,
    commit_time_of,
    in_commit,
    snapshot_read,
    timed,
    transaction_event,
)
from .native import NativeAdapter
from .wire import WireReader

__all__ = [
    "NOT_JSON",
    "Adapter",
    "BadRecord",
    "CanalJsonAdapter",
    "Change",
    "DebeziumAdapter",
    "LogPosition",
    "Marker",
    "NativeAdapter",
    "Op",
    "Rows",
    "SourceShape",
    "SourceUnavailable",
    "WireReader",
    "adapter",
    "commit_time_of",
    "exact_flags",
    "in_commit",
    "loads",
    "parse_hlc",
    "record_time",
    "snapshot_read",
    "timed",
    "transaction_event",
]

ADAPTERS: dict[str, type[Adapter]] = {
    "native": NativeAdapter,
    "canal-json": CanalJsonAdapter,
    "debezium": DebeziumAdapter,
}


def adapter(source_format: str, registry: Mapping[str, str] | None = None) -> Adapter:
    """The adapter for a source's ``format``.

    ``registry``: its schema registry's client configuration (Debezium's Avro,
    ``sources[i].schema_registry``).
    """
    if registry is not None and source_format == "debezium":
        return DebeziumAdapter(WireReader.of(registry))
    return ADAPTERS[source_format]()
