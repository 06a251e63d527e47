"""Format ``debezium``: Debezium's change events in JSON (``JsonConverter``).

With ``schemas.enable=true`` each key and value is ``{"schema": …, "payload": …}``; without,
the payload alone. A value's payload::

    {"before": {…}|null, "after": {…}|null, "op": "c",
     "source": {"connector": "postgresql", "ts_ms": 1700000000123, "ts_us": …, "ts_ns": …,
                "lsn": 24023984, "txId": 771, …},
     "transaction": {"id": "771:24023984", "total_order": 2, "data_collection_order": 1},
     "ts_ms": …}

* the key is the record key's fields, in order (Debezium keys a row by its primary key);
* ``op``: ``c`` (insert), ``r`` (a snapshot read: a row as the connector's snapshot saw it),
  ``u`` (update), ``d`` (delete); a null value (the tombstone after a delete) carries nothing;
  ``t`` (truncate) cannot be said per key: a bad record, for ``on_error``;
* an event's **position** is where the source itself put it, never a counter of Debezium's
  (its ``total_order`` starts over when the connector restarts inside a transaction):
  PostgreSQL's ``source.sequence`` (the last commit's LSN, the event's LSN), a binlog's
  ``file``, ``pos`` and ``row`` (MySQL, MariaDB). Positions rise along a data partition in
  the order Debezium sends, so the batch drops an event at or below one already read there
  as a re-send (``batch/loop.py``); the event's place in its transaction (its LSN, its binlog
  position and row) is what the transaction log counts, each place once;
* the time (``updated``) is the commit time and the event's place within its commit, below
  the clock's unit and in the logical part, so versions of a key in one commit keep their
  order and an event sent again has exactly its first time. PostgreSQL: ``source.ts_us``
  (else ``ts_ms``, ``ts_ns``) is the commit time; the place is the LSN's distance from the
  last commit's (within ±5·10^12 bytes). A binlog (MySQL, MariaDB): ``source.ts_ms`` is the
  time its *statement* started, in whole seconds, so a transaction that commits after
  another may carry an earlier one; the commit time is its transaction's END's
  (``Change.order`` says so, and the batch takes the END's time: :func:`in_commit`), and the
  place is the file number's last digits and the position. Without transaction metadata the
  statement's time is all there is. Snapshot reads (``op: r``) have no position: they come
  before the stream;
* with a schema, values are read by their semantic types (``connect_types.py``): exact
  decimals, dates, times and timestamps as ISO-8601 text; without one the payload is kept as
  sent.

Debezium writes no resolved markers on the data topics: a null-key record there is not a
marker, and the markers come from elsewhere (the transaction metadata topic).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import orjson

from schemas.hlc import Hlc

from .base import (
    BadRecord,
    Change,
    LogPosition,
    Marker,
    Op,
    Rows,
    SourceShape,
    exact_flags,
    no_times,
    parse_json,
)
from .connect_types import field_schemas, typed, whole
from .wire import MAGIC, WireReader

_OPS: dict[str, Op] = {"c": "insert", "r": "insert", "u": "update", "d": "delete"}
_CLOCKS = (("ts_us", 1_000), ("ts_ms", 1_000_000), ("ts_ns", 1))  # field, ns per unit


_LOGICAL = 10_000_000_000  # the logical part's ten digits


class Place(NamedTuple):
    """Where the source put an event: its position and its place in its commit."""

    position: LogPosition  # rises along a data partition in the order Debezium sends
    within: int  # unique within its transaction: what the transaction log counts
    order: int  # its order within the commit (the low digits of its time)
    signed: bool = False  # ``order`` is a distance either side of zero
    from_end: bool = False  # the commit time is the transaction's END's (a binlog)


def commit_time(source: Any) -> tuple[Any, int, int]:
    """``(source, clock, ns per unit)``: the event's commit time, as its finest clock has it."""
    if type(source) is not dict:
        raise BadRecord("no 'source' object")
    found = [(f, source.get(f), scale) for f, scale in _CLOCKS if source.get(f) is not None]
    if not found:
        raise BadRecord("no 'source.ts_ms' (nor ts_us, ts_ns): the commit time is needed")
    field, ts, scale = found[0]
    ts = whole(ts)
    if ts is None or ts < 0:
        raise BadRecord(f"'source.{field}' is not a non-negative integer")
    return source, ts, scale


def at(ts: int, scale: int, place: Place | None) -> Hlc:
    """The time of an event: its clock, and below its unit the event's place in its commit.

    Without a place (a snapshot read) the logical part is zero.
    """
    if place is None:
        return Hlc(ts * scale, 0)
    room = scale * _LOGICAL  # below the clock's unit, and the logical part
    order = place.order + room // 2 if place.signed else place.order
    order = min(max(order, 0), room - 1)  # beyond the room: ties, never inversions
    return Hlc(ts * scale + order // _LOGICAL, order % _LOGICAL)


def in_commit(end: Hlc, order: int) -> Hlc:
    """The time of a binlog change whose transaction ENDed at ``end``: within its millisecond."""
    order = min(max(order, 0), _MILLISECOND * _LOGICAL - 1)
    return Hlc(end.wall + order // _LOGICAL, order % _LOGICAL)


def commit_time_of(change: Change, commits: Mapping[str, Hlc]) -> Hlc | None:
    """A change's time as a batch takes it: its own, or a binlog change's END's.

    ``commits``: transaction id -> its END's time; None when that END was not read yet.
    (The batch's loop, ``batch/loop.py``, inlines the same rule on its hot path.)
    """
    if change.order is None or change.tx is None:
        return change.ts
    end = commits.get(change.tx[0])
    return None if end is None else in_commit(end, change.order)


_MILLISECOND = 1_000_000  # an END's time is in milliseconds


# A position read carries the time its change was given after it: the place, this mark, then
# wall and logical (the mark tells it from a place written before times were kept)
_TIMED = -1


def timed(position: LogPosition, ts: Hlc) -> LogPosition:
    """``position`` with the time it was read at (what :func:`snapshot_read` starts above)."""
    return (*position, _TIMED, ts.wall, ts.logical)


def time_of(position: LogPosition | None) -> Hlc | None:
    """The time a :func:`timed` position carries; None for a place alone."""
    if position is None or len(position) < 3 or position[-3] != _TIMED:
        return None
    return Hlc(position[-2], position[-1])


def snapshot_read(
    point: LogPosition, floor: Hlc, latest: LogPosition | None
) -> tuple[Hlc, LogPosition]:
    """The time of a snapshot's read, and the partition's latest position after it.

    A snapshot reads the tables as of one point of the source's history (``point``: a place
    just below the first change streamed after it), after every change its partition sent
    before it and before every change streamed after it. Debezium's own time for a read is
    no such point (:func:`snapshot_point`), so the read is timed just above what its
    partition has passed: its floor and the time of the latest change or read there. That
    is above every version of its key emitted before (a snapshot done again after a restart
    is news, not below them) and below every commit that follows. The latest position keeps
    its place (or takes the point's, on a partition that has none yet) with the read's time,
    so the next read is timed above this one. The batch's loop (``batch/loop.py``) calls it.
    """
    passed = time_of(latest)
    passed = floor if passed is None else max(floor, passed)
    ts = passed.next()
    place = point if latest is None else latest[:-3] if time_of(latest) else latest
    return ts, timed(place, ts)


def place_of(source: dict[str, Any]) -> Place | None:
    """The event's place in the source (see the module); None for a snapshot's read."""
    if source.get("snapshot") not in (None, "false", False):
        return None
    connector = source.get("connector")
    if connector == "postgresql":
        return _pg_place(source)
    if connector in ("mysql", "mariadb"):
        return _binlog_place(source)
    raise BadRecord(
        f"connector {connector!r}: Highwater knows the source positions of postgresql, mysql "
        "and mariadb; without one an event sent again after a restart cannot be told from news"
    )


def snapshot_point(source: dict[str, Any]) -> LogPosition | None:
    """A place just below every change streamed after a snapshot's read (see the module).

    A read's ``ts_ms`` is the database's ``CURRENT_TIMESTAMP`` when its table's scan began
    (Debezium's ``getSnapshotSourceTimestamp``), not the snapshot's point: on a binlog the
    scan's own statement, later than the point by every table scanned before it; on
    PostgreSQL the snapshot transaction's start, after the replication slot's consistent
    point by however long the slot took (a commit between the two is streamed after the
    read, seen here). A change committed after the point can carry an earlier time than the
    read, so :func:`snapshot_read` times it. The place: a binlog's ``(file number, pos, -1)``
    (row -1, below the events there); PostgreSQL's ``(0, LSN - 1)`` (the read's LSN is where
    the stream begins; a change's place is ``(last commit LSN, LSN)``, or ``(LSN, LSN)`` in
    a stream's first transaction: :func:`_pg_place`). None for other connectors' reads (their
    changes have no place: bad records), timed as Debezium says.
    """
    if source.get("connector") == "postgresql":
        lsn = _lsn(source.get("lsn"))
        if lsn is None:
            sequence = source.get("sequence")
            pair = _json_list(sequence) if type(sequence) is str else None
            lsn = _lsn(pair[1]) if pair is not None and len(pair) == 2 else None
        if lsn is None:
            raise BadRecord(
                "a snapshot read's 'source.lsn' is not an LSN: where its snapshot began is needed"
            )
        return (0, lsn - 1)
    if source.get("connector") not in ("mysql", "mariadb"):
        return None
    name, pos = source.get("file"), whole(source.get("pos"))
    number = name.rpartition(".")[2] if type(name) is str else ""
    if not number.isdigit() or pos is None or pos < 0:
        raise BadRecord(
            "a snapshot read's 'source.file' and 'pos' are not a binlog file "
            "'<name>.<number>' and a position: where its snapshot began is needed"
        )
    return (int(number), pos, -1)


def _pg_place(source: dict[str, Any]) -> Place:
    """``(last commit LSN, LSN)`` from ``source.sequence``; the LSN's distance from it.

    A stream's first transaction has no last commit (``[null, LSN]``: Debezium began without
    an offset, after its snapshot): its place is ``(LSN, LSN)``. Its events lie below its own
    commit, so below every later transaction's place, and above every commit before the
    snapshot's point, so a stream begun again after a snapshot done again is news against
    what the old stream sent, while a re-send of the first transaction (a restart from the
    snapshot's offset) stays at or below the places read. Its time keeps the LSN's distance
    from zero. Placed ``(0, LSN)`` it would sort below the old stream's places and be dropped
    as a re-send. A transaction open across a restart and a new snapshot whose first events
    precede the old stream's last commit, and that is the new stream's first, would still be
    taken for a re-send: the places alone cannot tell the two apart.
    """
    sequence = source.get("sequence")
    pair = _json_list(sequence) if type(sequence) is str else None
    lsn = _lsn(pair[1]) if pair is not None and len(pair) == 2 else None
    if pair is None or lsn is None or (pair[0] is not None and _lsn(pair[0]) is None):
        raise BadRecord(
            f"'source.sequence' {sequence!r} is not '[\"<last commit LSN>\", \"<LSN>\"]': "
            "an event's place in PostgreSQL's history is needed (Debezium 1.4 or later sends it)"
        )
    last = _lsn(pair[0])
    if last is None:  # a stream's first transaction: no commit streamed before it
        return Place((lsn, lsn), lsn, lsn, signed=True)
    return Place((last, lsn), lsn, lsn - last, signed=True)


def _binlog_place(source: dict[str, Any]) -> Place:
    """``(file number, pos, row)`` of a binlog; the file's last digits and the position."""
    name, pos, row = source.get("file"), whole(source.get("pos")), whole(source.get("row"))
    number = name.rpartition(".")[2] if type(name) is str else ""
    if not number.isdigit() or pos is None or pos < 0 or row is None or not 0 <= row < _ROWS:
        raise BadRecord(
            "'source.file', 'pos' and 'row' are not a binlog file '<name>.<number>', a "
            "position and a row: an event's place in the binlog is needed"
        )
    files = int(number)
    return Place((files, pos, row), pos * _ROWS + row, (files % 1000) * 2**32 + pos, from_end=True)


_ROWS = 100_000  # rows of one binlog event (a place in a transaction is pos * _ROWS + row)


def _json_list(text: str) -> list[Any] | None:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return value if type(value) is list else None


def _lsn(value: Any) -> int | None:
    """An LSN as Debezium writes it in ``sequence``: decimal text (or a number)."""
    if type(value) is str and value.isdigit():
        return int(value)
    number = whole(value)
    return number if number is not None and number >= 0 else None


class DebeziumAdapter:
    """Format ``debezium`` (see the module's description).

    ``wire``: the reader of records in Confluent's wire format (``AvroConverter``), when the
    source names a registry; JSON records are read either way.
    """

    in_band_markers = False  # they come from the transaction topic (transaction_feed.py)
    times = staticmethod(no_times)
    exact = staticmethod(exact_flags)

    def __init__(self, wire: WireReader | None = None) -> None:
        self.wire = wire

    def decode(
        self, key: bytes | None, value: bytes | None, exact: bool | None = None
    ) -> Change | Marker | Rows | None:
        """One record: a change, or None (a tombstone)."""
        if key is None:
            raise BadRecord(
                "no record key: Debezium keys rows by their primary key (a table without one "
                "cannot be followed per key)"
            )
        return self.change(self.key(key, exact), value, exact, key)

    def key(self, key: bytes, exact: bool | None = None) -> list[Any]:
        """The key's fields, in order."""
        payload = _body(key, exact, self.wire, "key is not a JSON object")[0]
        if type(payload) is not dict or not payload:
            raise BadRecord("key has no fields")
        return list(payload.values())

    def change(
        self,
        key_values: list[Any],
        value: bytes | None,
        exact: bool | None = None,
        key: bytes | None = None,
    ) -> Change | None:
        """A keyed record: its change, or None for a tombstone."""
        if value is None:
            return None
        payload, schema = _body(value, exact, self.wire, "value is not a JSON object")
        if payload is None:
            return None  # a tombstone with schemas.enable=true
        if type(payload) is not dict:
            raise BadRecord("the payload is not an object")
        code = payload.get("op")
        op = _OPS.get(code)  # type: ignore[arg-type]
        if op is None:
            if code == "t":
                raise BadRecord("a TRUNCATE removes every row at once: it cannot be said per key")
            raise BadRecord(f"'op' {code!r} is not c, r, u or d")
        source, clock, scale = commit_time(payload.get("source"))
        place = None if code == "r" else place_of(source)  # a snapshot read: before the stream
        ts = at(clock, scale, place)
        point = snapshot_point(source) if place is None else None  # a snapshot's read
        tx = _in_transaction(payload.get("transaction"), place)
        try:
            images = []
            for field in ("after", "before"):
                image = payload.get(field)
                if image is not None and type(image) is not dict:
                    raise BadRecord(f"{field!r} is not an object or null")
                if image is not None and schema is not None:
                    image = typed(image, field_schemas(schema, field), field)
                images.append(image)
            after, before = images
            if (after is None) != (op == "delete"):
                raise BadRecord(f"op {code!r} with {'no ' if after is None else ''}'after'")
        except BadRecord as exc:
            exc.tx, exc.ts = tx, ts  # it still counts for its transaction
            exc.position = None if place is None else place.position
            raise
        if place is None:
            return Change(key_values, after, before, op, ts, None, tx, point=point)
        order = place.order if place.from_end and tx is not None else None
        return Change(key_values, after, before, op, ts, None, tx, place.position, order)

    def marker(self, value: bytes | None) -> Marker | None:
        """Debezium writes no markers on its data topics."""
        return None

    def key_names(self, key: bytes | None, value: bytes | None) -> tuple[str, ...] | None:
        """The key's fields, in order."""
        if key is None:
            return None
        payload = _body(key, None, self.wire, "key is not a JSON object")[0]
        return tuple(payload) if type(payload) is dict and payload else None

    def shape(self, key: bytes | None, value: bytes | None) -> SourceShape | None:
        """The Connect schemas of a change's columns (``after``'s, else ``before``'s), its key.

        None without a schema (``schemas.enable=false``), or for a tombstone.
        """
        if key is None or value is None:
            return None
        schema = _body(value, None, self.wire, "value is not a JSON object")[1]
        payload = _body(key, None, self.wire, "key is not a JSON object")[0]
        if schema is None or type(payload) is not dict:
            return None
        columns = {**field_schemas(schema, "before"), **field_schemas(schema, "after")}
        return SourceShape(columns, tuple(payload))


def _in_transaction(transaction: Any, place: Place | None) -> tuple[str, int] | None:
    """``(id, place within it)`` of a change of a transaction, if it says which."""
    if type(transaction) is not dict or place is None:
        return None  # a snapshot read, or transaction metadata off
    tx_id = transaction.get("id")
    if type(tx_id) is not str:
        raise BadRecord("'transaction' has no string 'id'")
    return transaction_key(tx_id), place.within


def transaction_key(tx_id: str) -> str:
    """What names one transaction in its changes and its END event alike.

    PostgreSQL's ids are ``<xid>:<lsn>`` with the LSN of the event itself (BEGIN, each
    change and END each show their own): the xid is the transaction. Other connectors' ids
    (MySQL's GTID ``<uuid>:<n>``, SQL Server's commit LSN) are the same on every event.
    """
    xid, colon, lsn = tx_id.partition(":")
    return xid if colon and xid.isdigit() and lsn.isdigit() else tx_id


class TransactionEvent(NamedTuple):
    """A record of the transaction metadata topic."""

    status: str  # BEGIN or END
    id: str
    counts: dict[str, int]  # END: events per data collection (``schema.table``)
    time: Hlc  # ``ts_ms``, in nanoseconds


def transaction_event(value: bytes | None, wire: WireReader | None = None) -> TransactionEvent:
    """A transaction topic's BEGIN or END event (JSON, with or without schemas; or Avro)."""
    if value is None:
        raise BadRecord("null value")
    payload = _body(value, None, wire, "value is not a JSON object")[0]
    if type(payload) is not dict:
        raise BadRecord("the payload is not an object")
    status, tx_id, ts = payload.get("status"), payload.get("id"), payload.get("ts_ms")
    if status not in ("BEGIN", "END") or type(tx_id) is not str:
        raise BadRecord("not a transaction event: no 'status' BEGIN/END and string 'id'")
    if type(ts) is not int or ts < 0:
        raise BadRecord("'ts_ms' is not a non-negative integer")
    counts: dict[str, int] = {}
    for entry in payload.get("data_collections") or ():
        name = entry.get("data_collection") if type(entry) is dict else None
        count = entry.get("event_count") if type(entry) is dict else None
        if type(name) is not str or type(count) is not int:
            raise BadRecord("'data_collections' entries need 'data_collection' and 'event_count'")
        counts[name] = count
    if status == "END" and payload.get("data_collections") is None:
        raise BadRecord("END without 'data_collections'")
    return TransactionEvent(status, transaction_key(tx_id), counts, Hlc(ts * 1_000_000, 0))


def _body(
    data: bytes, exact: bool | None, wire: WireReader | None, what: str
) -> tuple[Any, dict[str, Any] | None]:
    """``(payload, schema)`` of a key or value: JSON, or Avro in Confluent's wire format."""
    if data[:1] == MAGIC:
        if wire is None:
            raise BadRecord(
                "Avro in Confluent's wire format: name the registry (sources[i].schema_registry)"
            )
        return wire.read(data)
    return _payload(parse_json(data, exact, dict, what))


def _payload(body: dict[str, Any]) -> tuple[Any, dict[str, Any] | None]:
    """``(payload, schema)`` of a ``{"schema", "payload"}`` envelope, or ``(body, None)``."""
    if len(body) == 2 and "schema" in body and "payload" in body:
        schema = body["schema"]
        return body["payload"], schema if type(schema) is dict else None
    return body, None
