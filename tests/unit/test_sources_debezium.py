"""Debezium's change events (``pipeline/core/sources/debezium.py``).

The records are shaped as Debezium's PostgreSQL connector writes them through Kafka Connect's
``JsonConverter``, with and without ``schemas.enable``, and its ``AvroConverter`` (Confluent's
wire format): a table with NUMERIC of fixed and of
variable scale (``decimal.handling.mode=precise``), dates, times, timestamps with and without
a zone, text of any characters; transaction metadata on.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import uuid
from dataclasses import replace
from decimal import Context, Decimal
from typing import Any

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.core.batch.contract import PartitionSeen
from pipeline.core.batch.walk import rest_plan
from pipeline.core.sources import BadRecord, Change, SourceUnavailable
from pipeline.core.sources.connect_types import decimal_number
from pipeline.core.sources.debezium import DebeziumAdapter, in_commit, time_of
from pipeline.core.sources.wire import WireReader, without_logical_types
from schemas.hlc import Hlc
from schemas.jsontext import Number
from tests.support.debezium_avro import AVRO_KEY, AVRO_VALUE
from tests.support.debezium_json import column, envelope_schema
from tests.unit.test_batch import SRC, arrow, run
from tests.unit.test_batch import plan as batch_plan

pytestmark = pytest.mark.unit


def b64(unscaled: int) -> str:
    size = max(1, (unscaled.bit_length() + 8) // 8)
    return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()


COLUMNS = [
    column("id", "int32"),
    column("amount", "bytes", "org.apache.kafka.connect.data.Decimal", scale="2"),
    {
        "type": "struct",
        "optional": True,
        "name": "io.debezium.data.VariableScaleDecimal",
        "field": "ratio",
        "fields": [{"type": "int32", "field": "scale"}, {"type": "bytes", "field": "value"}],
    },
    column("day", "int32", "io.debezium.time.Date"),
    column("at", "int64", "io.debezium.time.MicroTimestamp"),
    column("at_ms", "int64", "org.apache.kafka.connect.data.Timestamp"),
    column("clock", "int64", "io.debezium.time.MicroTime"),
    column("zoned", "string", "io.debezium.time.ZonedTimestamp"),
    column("note", "string"),
]
SCHEMA = envelope_schema(COLUMNS, "pg.public.orders.Envelope")
SOURCE = {
    "version": "3.3.1.Final",
    "connector": "postgresql",
    "name": "pg",
    "ts_ms": 1_700_000_000_123,
    "ts_us": 1_700_000_000_123_456,
    "ts_ns": 1_700_000_000_123_456_000,
    "snapshot": "false",
    "db": "shop",
    "schema": "public",
    "table": "orders",
    "txId": 771,
    "lsn": 24023984,
    "sequence": '["24023800","24023984"]',  # the last commit's LSN, the event's
}
# the event's time: its commit's microsecond, then its LSN's distance from the last commit's
# (184 bytes) above the middle of the room below the microsecond and the logical part
AT = Hlc(1_700_000_000_123_456_000 + 500, 184)
ROW = {
    "id": 7,
    "amount": b64(-123456),  # -1234.56
    "ratio": {"scale": 30, "value": b64(12345678901234567890123456789012345)},
    "day": 19782,  # 2024-02-29
    "at": 1_709_251_199_999_999,  # 2024-02-29T23:59:59.999999
    "at_ms": 1_709_251_199_120,
    "clock": 45_296_000_001,  # 12:34:56.000001
    "zoned": "2024-02-29T23:59:59.999999Z",
    "note": 'ü 𝄞 "quoted" \\ \u2028',
}
TYPED = {
    "id": 7,
    "amount": Number("-1234.56"),
    "ratio": Number("12345.678901234567890123456789012345"),
    "day": "2024-02-29",
    "at": "2024-02-29T23:59:59.999999",
    "at_ms": "2024-02-29T23:59:59.120",
    "clock": "12:34:56.000001",
    "zoned": "2024-02-29T23:59:59.999999Z",
    "note": ROW["note"],
}
TX = {"id": "771:24023984", "total_order": 2, "data_collection_order": 1}


def payload(op: str, after: Any = None, before: Any = None, **extra: Any) -> dict[str, Any]:
    return {
        "before": before,
        "after": after,
        "source": SOURCE,
        "op": op,
        "ts_ms": 1_700_000_000_200,
        "transaction": TX,
        **extra,
    }


def decode(key: Any, value: Any, *, schema: bool = True, exact: bool | None = None) -> Any:
    def enc(body: Any, body_schema: Any) -> bytes | None:
        if body is None:
            return None
        wrapped = {"schema": body_schema, "payload": body} if schema else body
        return json.dumps(wrapped, ensure_ascii=False).encode()

    return DebeziumAdapter().decode(enc(key, {"type": "struct"}), enc(value, SCHEMA), exact)


@pytest.mark.parametrize("exact", [None, False, True])
def test_an_insert_with_a_schema_reads_every_semantic_type_exactly(exact: bool | None) -> None:
    # exact=True: the batch's exact reader, which keeps 19-digit ts_ns as its text (seen on a
    # real feed: it read as "not an integer")
    change = decode({"id": 7}, payload("c", after=ROW), exact=exact)
    assert change == Change(
        [7], TYPED, None, "insert", AT, None, ("771", 24023984), (24023800, 24023984)
    )


def test_updates_deletes_and_snapshot_reads() -> None:
    old = {**ROW, "note": "old"}
    update = decode({"id": 7}, payload("u", after=ROW, before=old))
    assert (update.op, update.after, update.before) == ("update", TYPED, {**TYPED, "note": "old"})
    delete = decode({"id": 7}, payload("d", before=ROW))
    assert (delete.op, delete.after, delete.before) == ("delete", None, TYPED)
    read = decode({"id": 7}, payload("r", after=ROW, transaction=None))
    assert (read.op, read.ts) == ("insert", Hlc(1_700_000_000_123_456_000, 0))


def test_tombstones_carry_nothing() -> None:
    assert DebeziumAdapter().decode(b'{"id":7}', None) is None
    assert decode({"id": 7}, None) is None
    tombstone = json.dumps({"schema": None, "payload": None}).encode()
    assert DebeziumAdapter().decode(b'{"id":7}', tombstone) is None


def test_without_a_schema_the_payload_is_kept_as_sent() -> None:
    sent = {**ROW, "amount": "-1234.56000000000000000001"}  # decimal.handling.mode=string
    change = decode({"id": 7, "region": "eu"}, payload("c", after=sent), schema=False)
    assert change.key == [7, "eu"]
    assert change.after == sent


def test_the_commit_time_is_the_microsecond_clock_else_milli_then_nanoseconds() -> None:
    milli = {k: v for k, v in SOURCE.items() if k != "ts_us"}
    nano = {k: v for k, v in milli.items() if k != "ts_ms"}
    at = [decode({"id": 1}, payload("c", after={}, source=s)).ts for s in (SOURCE, milli, nano)]
    assert [ts.wall // unit for ts, unit in zip(at, (1000, 10**6, 1), strict=True)] == [
        SOURCE["ts_us"],
        SOURCE["ts_ms"],
        SOURCE["ts_ns"],  # no room below it: the place is in the logical part alone
    ]
    assert at[1] == Hlc(SOURCE["ts_ms"] * 10**6 + 500_000, 184)
    assert at[2] == Hlc(SOURCE["ts_ns"], 5_000_000_184)


def pg(lsn: int, last: int = 24_023_800, order: int = 1, **source: Any) -> dict[str, Any]:
    """A PostgreSQL change at ``lsn`` after the commit at ``last``, Debezium's count ``order``."""
    place = {"lsn": lsn, "sequence": json.dumps([str(last), str(lsn)]), **source}
    return payload(
        "u", after={"id": 1}, source={**SOURCE, **place}, transaction={**TX, "total_order": order}
    )


def test_versions_of_a_key_in_one_commit_keep_the_order_of_their_lsns() -> None:
    """Debezium's total_order starts over after a restart: the LSN is the order."""
    first = decode({"id": 1}, pg(24_023_984, order=5))
    second = decode({"id": 1}, pg(24_024_100, order=1))  # counted again after a restart
    assert first.ts < second.ts
    assert first.position < second.position
    assert first.tx == ("771", 24_023_984)
    assert second.tx == ("771", 24_024_100)


def test_an_event_sent_again_has_exactly_its_first_time_and_position() -> None:
    first = decode({"id": 1}, pg(24_023_984, order=5))
    again = decode({"id": 1}, pg(24_023_984, order=2))  # the restart's count, the same LSN
    assert (again.ts, again.position, again.tx) == (first.ts, first.position, first.tx)


@settings(max_examples=300, deadline=None)
@given(
    last=st.integers(0, 2**63),
    distances=st.lists(st.integers(-(10**12), 10**12), min_size=2, max_size=6, unique=True),
)
def test_a_commit_s_changes_are_timed_in_lsn_order_whatever_their_distance(
    last: int, distances: list[int]
) -> None:
    """Changes of a long transaction lie before the last commit's LSN, others after it."""
    lsns = sorted({max(0, last + d) for d in distances})
    changes = [decode({"id": 1}, pg(lsn, last=last)) for lsn in lsns]
    assert [c.ts for c in changes] == sorted(c.ts for c in changes)
    assert len({c.ts for c in changes}) == len(changes)
    assert all(c.ts.wall // 1000 == SOURCE["ts_us"] for c in changes)  # within the microsecond


def test_a_commit_s_time_never_orders_an_lsn_beyond_the_room_the_wrong_way() -> None:
    far = [decode({"id": 1}, pg(n, last=10**13)).ts for n in (0, 10**12, 10**13 + 6 * 10**12)]
    assert far[0] <= far[1] < decode({"id": 1}, pg(10**13, last=10**13)).ts <= far[2]


def binlog(file: str, pos: int, row: int, **source: Any) -> dict[str, Any]:
    """A MySQL/MariaDB change at ``file``/``pos``/``row`` (the binlog's seconds as ts_ms)."""
    place = {"connector": "mariadb", "file": file, "pos": pos, "row": row, **source}
    clock = {"ts_ms": 1_700_000_000_000, "ts_us": 1_700_000_000_000_000}
    body = {k: v for k, v in SOURCE.items() if k not in ("lsn", "sequence", "ts_ns")}
    return payload("u", after={"id": 1}, source={**body, **clock, **place})


def test_binlog_changes_are_placed_by_file_position_and_row() -> None:
    places = [("mysql-bin.000009", 4_000_000_000, 0), ("mysql-bin.000010", 4, 0)]
    places += [("mysql-bin.000010", 900, 0), ("mysql-bin.000010", 900, 3)]
    changes = [decode({"id": 1}, binlog(*p)) for p in places]
    assert [c.position for c in changes] == [
        (9, 4_000_000_000, 0),
        (10, 4, 0),
        (10, 900, 0),
        (10, 900, 3),
    ]
    times = [c.ts for c in changes]
    assert times[:3] == sorted(times[:3])  # a new file within the second keeps the order
    assert len(set(times[:3])) == 3
    assert times[2] == times[3]  # rows of one event: different keys, one time
    assert changes[3].tx == (TX["id"].split(":")[0], 900 * 100_000 + 3)
    for bad in (("mysql-bin", 4, 0), ("mysql-bin.000010", None, 0), ("mysql-bin.000010", 4, None)):
        with pytest.raises(BadRecord, match="binlog"):
            decode({"id": 1}, binlog(*bad))


def test_an_event_without_a_place_in_the_source_is_a_bad_record() -> None:
    no_sequence = {k: v for k, v in SOURCE.items() if k != "sequence"}
    with pytest.raises(BadRecord, match=r"source\.sequence"):
        decode({"id": 1}, payload("c", after={}, source=no_sequence))
    with pytest.raises(BadRecord, match=r"source\.sequence"):
        decode({"id": 1}, payload("c", after={}, source={**SOURCE, "sequence": '["x","1"]'}))
    with pytest.raises(BadRecord, match="connector 'oracle'"):
        decode({"id": 1}, payload("c", after={}, source={**SOURCE, "connector": "oracle"}))
    snapshot = decode({"id": 1}, payload("r", after={}, source=no_sequence, transaction=None))
    assert (snapshot.position, snapshot.tx) == (None, None)  # a snapshot read comes first


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (None, payload("c", after=ROW), "no record key"),
        ({}, payload("c", after=ROW), "key has no fields"),
        ({"id": 7}, payload("t"), "TRUNCATE"),
        ({"id": 7}, payload("x", after=ROW), "'op' 'x'"),
        ({"id": 7}, payload("c"), "op 'c' with no 'after'"),
        ({"id": 7}, payload("d", after=ROW), "op 'd' with 'after'"),
        ({"id": 7}, payload("c", after=ROW, source=None), "no 'source'"),
        ({"id": 7}, payload("c", after=ROW, source={"ts_ms": "x"}), "'source.ts_ms'"),
        ({"id": 7}, payload("c", after=ROW, source={}), "commit time is needed"),
        ({"id": 7}, payload("c", after={**ROW, "amount": "%%%"}), "after.amount"),
        ({"id": 7}, payload("c", after={**ROW, "day": "today"}), "after.day"),
        ({"id": 7}, payload("c", after=[1]), "'after' is not an object"),
    ],
)
def test_what_cannot_be_read_is_a_bad_record_saying_why(key: Any, value: Any, reason: str) -> None:
    if key is None:
        with pytest.raises(BadRecord) as caught:
            DebeziumAdapter().decode(None, json.dumps(value).encode())
    else:
        with pytest.raises(BadRecord) as caught:
            decode(key, value)
    assert reason in str(caught.value)


@settings(max_examples=300, deadline=None)
@given(st.integers(-(10**40), 10**40), st.integers(-5, 40))
def test_decimals_decode_to_their_exact_value(unscaled: int, scale: int) -> None:
    number = decimal_number(b64(unscaled), scale)
    text = number.text if isinstance(number, Number) else str(number)
    assert Decimal(text) == Decimal(unscaled).scaleb(-scale, Context(prec=100))
    if scale > 0:
        assert len(text.split(".")[1]) == scale  # the declared scale's digits, trailing zeros too


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.binary(max_size=200) | st.none())
def test_no_bytes_crash_the_adapter(key: bytes, value: bytes | None) -> None:
    with contextlib.suppress(BadRecord):
        DebeziumAdapter().decode(key, value)


class NotFound(Exception):
    http_status_code = 404


def wire(schema_id: int, schema: Any, record: Any) -> bytes:
    """``record`` in Confluent's wire format, its values as stored (logical types raw)."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(without_logical_types(schema)), record)
    return b"\x00" + schema_id.to_bytes(4, "big") + out.getvalue()


def test_avro_events_in_confluents_wire_format_read_as_their_json_twins() -> None:
    registry = {1: AVRO_KEY, 2: AVRO_VALUE}
    asked: list[int] = []

    def fetch(schema_id: int) -> str:
        asked.append(schema_id)
        if schema_id not in registry:
            raise NotFound
        return json.dumps(registry[schema_id])

    reader = WireReader(f"test-{uuid.uuid4()}", fetch)
    stored = {k: base64.b64decode(v) if k == "amount" else v for k, v in ROW.items()}
    stored["ratio"] = {"scale": 30, "value": base64.b64decode(ROW["ratio"]["value"])}
    source = {k: SOURCE[k] for k in ("connector", "ts_ms", "ts_us", "lsn", "sequence")}
    event = {**payload("u", after=stored, before=stored), "source": source}
    adapter = DebeziumAdapter(reader)
    change = adapter.decode(wire(1, AVRO_KEY, {"id": 7}), wire(2, AVRO_VALUE, event))
    assert change == Change(
        [7], TYPED, TYPED, "update", AT, None, ("771", 24023984), (24023800, 24023984)
    )
    adapter.decode(wire(1, AVRO_KEY, {"id": 7}), wire(2, AVRO_VALUE, event))
    assert asked == [1, 2]  # each writer schema fetched once
    with pytest.raises(BadRecord, match="name the registry"):
        DebeziumAdapter().decode(wire(1, AVRO_KEY, {"id": 7}), None)
    with pytest.raises(BadRecord, match="schema id 9 is not in the registry"):
        adapter.decode(wire(1, AVRO_KEY, {"id": 7}), b"\x00\x00\x00\x00\x09junk")
    with pytest.raises(BadRecord, match="Avro of schema id 2 cannot be read"):
        adapter.decode(wire(1, AVRO_KEY, {"id": 7}), wire(2, AVRO_VALUE, event)[:20])


def test_a_registry_out_of_reach_fails_the_batch_rather_than_judge_a_record_bad() -> None:
    """An outage is not the record's fault: nothing is dead-lettered for it."""
    record = wire(1, AVRO_KEY, {"id": 7})
    plan = replace(
        batch_plan(dlq=True),
        formats={SRC: "debezium"},
        registries={SRC: {"url": "http://127.0.0.1:9", "max.retries": 0}},  # no one there
    )
    with pytest.raises(SourceUnavailable, match="did not answer for schema id 1"):
        run(plan, arrow([(record, record)]))

    def fetch(_id: int) -> str:
        raise OSError("connection refused")

    with pytest.raises(SourceUnavailable, match="connection refused"):
        DebeziumAdapter(WireReader(f"test-{uuid.uuid4()}", fetch)).decode(record, record)


def restarted(lsns: list[int], orders: list[int], note: str = "v") -> list[tuple[bytes, bytes]]:
    """One key's changes of one transaction as Connect writes them: LSNs and Debezium's counts."""
    return [
        (
            json.dumps({"id": 1}).encode(),
            json.dumps(
                {**pg(lsn, order=order), "after": {"id": 1, "note": f"{note}{lsn}"}}
            ).encode(),
        )
        for lsn, order in zip(lsns, orders, strict=True)
    ]


def test_what_a_restarted_connector_sends_again_is_dropped_within_and_across_batches() -> None:
    """Kafka Connect killed after 30 and 40 were sent, resumed after 20 (its last flush)."""
    base = replace(batch_plan(dlq=True), formats={SRC: "debezium"})
    first = restarted([24_023_810, 24_023_820, 24_023_830], [1, 2, 3])
    again = restarted([24_023_830, 24_023_840, 24_023_850], [1, 2, 3])  # 30 sent twice
    records, result = run(base, arrow([*first, *again[:1]]))
    (seen,) = result.partitions
    assert (seen.emitted, seen.resent, seen.position[:3]) == (3, 1, (24_023_800, 24_023_830, -1))
    assert time_of(seen.position) == Hlc.parse(json.loads(records[-1]["value"])["updated"])
    # the next batch starts from the summary's position, as the driver hands it on
    plan2 = replace(base, positions={(SRC, 0): seen.position})
    more, result2 = run(plan2, arrow([again[0], *again[1:]], start=4))
    notes = [json.loads(r["value"])["after"]["note"] for r in [*records, *more]]
    assert notes == ["v24023810", "v24023820", "v24023830", "v24023840", "v24023850"]
    times = [json.loads(r["value"])["updated"] for r in [*records, *more]]
    assert times == sorted(times, key=Hlc.parse)  # one commit, in LSN order: never backwards
    assert (result2.resent, result2.partitions[0].position[:2]) == (1, (24_023_800, 24_023_850))
    # without the position handed on, the copy of 30 would come out after 30 again
    _, blind = run(base, arrow(again, start=4))
    assert blind.emitted == 3


def test_a_stream_s_first_transaction_sent_again_is_still_a_re_send() -> None:
    """Connect restarted from the offset its snapshot flushed: the first transaction again.

    Its events have no last commit (``[null, LSN]``); the transaction after it began earlier
    (its event's LSN 24_023_750 is below the first's 24_023_790) and committed later. Sent
    again, the first transaction's events are at or below what was read, though their LSN is
    above the last event read: they are dropped, and nothing else is.
    """
    base = replace(batch_plan(dlq=True), formats={SRC: "debezium"})

    def event(lsn: int, last: int | None, note: str) -> tuple[bytes, bytes]:
        change = pg(lsn, sequence=json.dumps([None if last is None else str(last), str(lsn)]))
        return json.dumps({"id": 1}).encode(), json.dumps(
            {**change, "after": {"note": note}}
        ).encode()

    sent = [event(24_023_780, None, "first 1"), event(24_023_790, None, "first 2")]
    sent.append(event(24_023_750, 24_023_800, "second"))  # after the commit at 24_023_800
    again = [
        *sent[:2],
        event(24_023_750, 24_023_800, "second"),
        event(24_023_900, 24_023_850, "new"),
    ]
    records, result = run(base, arrow([*sent, *again]))
    notes = [json.loads(r["value"])["after"]["note"] for r in records]
    assert notes == ["first 1", "first 2", "second", "new"]
    assert result.partitions[0].resent == 3


def test_the_stream_after_a_snapshot_done_again_is_news_though_placed_below_the_old_one() -> None:
    """Connect died before it flushed an offset, after streaming: it snapshots again.

    The new snapshot's reads, then its stream: the first transaction after the restart has no
    commit streamed before it (``sequence`` ``[null, LSN]``: placed ``(0, LSN)``), below the
    old stream's places (``(last commit, LSN)``) though later. Measured against the old
    stream it would be dropped as a re-send (the versions lost, seen in the chaos test);
    read on from the new snapshot's point it is news, and a re-send of it is still dropped.
    """
    base = replace(batch_plan(dlq=True), formats={SRC: "debezium"})
    old = restarted([24_023_810, 24_023_820], [1, 2], note="old")  # after the commit 24_023_800
    read = {**pg(24_100_000), "op": "r", "after": {"id": 1, "note": "read"}}
    read["source"] = {**read["source"], "snapshot": "true", "sequence": None}
    new = [
        (json.dumps({"id": 1}).encode(), json.dumps({**e, "after": {"id": 1, "note": n}}).encode())
        for e, n in [
            (pg(24_100_010, order=1, sequence=json.dumps([None, "24100010"])), "new 1"),
            (pg(24_100_020, order=2, sequence=json.dumps([None, "24100020"])), "new 2"),
            (pg(24_100_020, order=1, sequence=json.dumps([None, "24100020"])), "sent again"),
        ]
    ]
    snapshot = (json.dumps({"id": 1}).encode(), json.dumps(read).encode())
    records, result = run(base, arrow([*old, snapshot, *new]))
    notes = [json.loads(r["value"])["after"]["note"] for r in records]
    assert notes == ["old24023810", "old24023820", "read", "new 1", "new 2"]
    assert result.partitions[0].resent == 1  # the new stream's own re-send
    times = [Hlc.parse(json.loads(r["value"])["updated"]) for r in records]
    assert times == sorted(times)


def test_transactions_places_are_kept_only_for_a_source_whose_transaction_topic_is_read() -> None:
    """The summary carries each transaction's places only where the driver completes them.

    Without a transaction topic nothing reads them, and they are most of a Debezium summary's
    bytes (a place per change); the rows and times written are the same either way.
    """
    base = replace(batch_plan(), formats={SRC: "debezium"})
    changes = [(k, v) for k, v in restarted([24_023_810, 24_023_820], [1, 2])]
    counted, with_places = run(replace(base, counted=frozenset({SRC})), arrow(changes))
    uncounted, without = run(base, arrow(changes))
    assert [r["value"] for r in counted] == [r["value"] for r in uncounted]
    assert with_places.partitions[0].transactions == {
        "771": [
            [24_023_810, 24_023_820],
            *[Hlc.parse(json.loads(r["value"])["updated"]) for r in counted],
        ],
    }
    assert without.partitions[0].transactions == {}
    assert without.partitions[0].emitted == with_places.partitions[0].emitted == 2


def test_a_bad_change_sent_again_is_dropped_and_one_that_stops_the_walk_is_read_again() -> None:
    bad = {**pg(24_023_830), "after": [1]}  # 'after' is not an object
    record = (json.dumps({"id": 1}).encode(), json.dumps(bad).encode())
    good = restarted([24_023_820], [1])
    dlq = replace(batch_plan(dlq=True), formats={SRC: "debezium"})
    records, result = run(dlq, arrow([*good, record, record]))
    assert (result.bad, result.resent) == (1, 1)  # dead-lettered once, its copy dropped
    assert [r["topic"] for r in records] == ["out.orders", "dlq"]
    stop = replace(batch_plan(), formats={SRC: "debezium"})
    for bad_one in (record, *restarted([24_023_830], [2], note="x" * 2000)):  # too large out
        _, halted = run(replace(stop, max_record_bytes=1500), arrow([*good, bad_one]))
        (seen,) = halted.partitions
        assert (seen.bad, seen.next_offset) == (1, 1)  # the checkpoint resumes at it ...
        assert seen.position[:2] == (24_023_800, 24_023_820)  # ... not taking it for a re-send


def binlog_tx(pos: int, tx: str, note: str, offset_ms: int = 0) -> tuple[bytes, bytes]:
    """A MariaDB change at ``pos`` of transaction ``tx``, its statement ``offset_ms`` late."""
    event = binlog("binlog.000001", pos, 0, ts_ms=1_700_000_000_000 + offset_ms)
    event["source"]["ts_us"] = event["source"]["ts_ms"] * 1000
    event = {**event, "after": {"id": 1, "note": note}, "transaction": {**TX, "id": tx}}
    return json.dumps({"id": 1}).encode(), json.dumps(event).encode()


END = Hlc(1_700_000_002_000 * 10**6, 0)  # the transactions' END: two seconds after a statement


def test_a_binlog_change_is_timed_by_its_transactions_end_not_its_statement() -> None:
    """A binlog's event time is its statement's start: a later commit may carry an earlier one."""
    change = decode({"id": 1}, json.loads(binlog_tx(900, "0-1-7", "a")[1]))
    assert change.ts.wall == 1_700_000_000_000 * 10**6  # the statement's second
    assert change.order == 2**32 + 900  # the file number (1), the position
    plan = replace(batch_plan(), formats={SRC: "debezium"}, commits={SRC: {"0-1-7": END}})
    records, result = run(plan, arrow([binlog_tx(900, "0-1-7", "a"), binlog_tx(950, "0-1-7", "b")]))
    times = [Hlc.parse(json.loads(r["value"])["updated"]) for r in records]
    assert times == sorted(times)
    assert len(set(times)) == 2
    assert all(t > END and t.wall < END.wall + 10**6 for t in times)  # in the END's millisecond
    assert not result.rests


def test_a_binlog_change_before_its_end_defers_the_rest_of_its_partition() -> None:
    """The driver reads the END, then runs the rest again: nothing skipped, nothing twice."""
    # its transactions counted: a binlog's source has its transaction topic read
    base = replace(batch_plan(), formats={SRC: "debezium"}, counted=frozenset({SRC}))
    records = [
        binlog_tx(900, "0-1-7", "a"),
        binlog_tx(950, "0-1-8", "b"),  # its END not read yet
        binlog_tx(990, "0-1-7", "c"),  # after it on the partition: waits too
        binlog_tx(900, "0-1-7", "a"),  # a re-send, whose END is known or not: dropped
    ]
    first, result = run(replace(base, commits={SRC: {"0-1-7": END}}), arrow(records, start=10))
    assert [json.loads(r["value"])["after"]["note"] for r in first] == ["a"]
    (rest,) = result.rests
    # the position read last, with the time its END gave it (a binlog snapshot read's floor)
    a = in_commit(END, 2**32 + 900)
    assert (rest.start, rest.stop, rest.waits_for) == (11, 14, "0-1-8")
    assert rest.position == (1, 900, 0, -1, a.wall, a.logical)
    assert result.partitions[0].next_offset == 11  # a checkpoint resumes there
    later = Hlc(END.wall + 10**9, 0)
    again = rest_plan(replace(base, commits={SRC: {"0-1-7": END, "0-1-8": later}}), [rest])
    more, rest_result = run(again, arrow(records[1:], start=11))
    assert [json.loads(r["value"])["after"]["note"] for r in more] == ["b", "c"]
    whole = result.with_rests(rest_result)
    assert (whole.rests, whole.emitted, whole.resent) == ([], 3, 1)
    assert whole.partitions[0].next_offset == 14
    assert set(whole.partitions[0].transactions) == {"0-1-7", "0-1-8"}


def binlog_read(pos: int, note: str, ts_ms: int, key: int = 1) -> tuple[bytes, bytes]:
    """A MariaDB snapshot's read of ``key``: its snapshot began at ``pos``, its scan ``ts_ms``."""
    event = binlog("binlog.000001", pos, 0, ts_ms=ts_ms, snapshot="true")
    event["source"]["ts_us"] = ts_ms * 1000
    event = {**event, "op": "r", "after": {"id": key, "note": note}}
    return json.dumps({"id": key}).encode(), json.dumps(event).encode()


def test_a_binlog_snapshot_read_is_timed_between_the_changes_before_and_after_its_point() -> None:
    """Debezium times a read by its table's scan start, seconds after its snapshot's point.

    A change committed after the point (streamed after the read, its END a second after the
    change before) then carries an earlier time than the read: timed by ``ts_ms``, the read's
    stale row would come out after the newer version, and an applier would keep it. Timed by
    what its partition passed, the read lies between the changes before and after its point.
    """
    later = Hlc(END.wall + 10**9, 0)
    plan = replace(
        batch_plan(), formats={SRC: "debezium"}, commits={SRC: {"0-1-7": END, "0-1-9": later}}
    )
    scan_start = END.wall // 10**6 + 10_000  # ms: ten seconds after the first END
    records = [
        binlog_tx(900, "0-1-7", "before"),  # streamed before the (re-done) snapshot
        binlog_read(1000, "read", scan_start),  # the snapshot began at 1000
        binlog_read(1000, "other", scan_start, key=2),
        binlog_tx(1100, "0-1-9", "after"),  # committed after the point, before the scan
    ]
    out, result = run(plan, arrow(records))
    rows = [
        (json.loads(r["value"])["after"]["note"], json.loads(r["value"])["updated"]) for r in out
    ]
    assert [note for note, _ in rows] == ["before", "read", "other", "after"]
    times = [Hlc.parse(t) for _, t in rows]
    before = in_commit(END, 2**32 + 900)
    assert times[:3] == [before, before.next(), before.next().next()]  # each read above the last
    assert times[3] == in_commit(later, 2**32 + 1100) > times[2]
    assert times[1].wall < scan_start * 10**6  # not Debezium's
    assert result.partitions[0].position == (1, 1100, 0, -1, times[3].wall, times[3].logical)


def test_binlog_snapshot_reads_start_above_the_floor_and_below_it_are_duplicates() -> None:
    """A new partition's reads rise from its floor; a read Debezium timed at or below it is old."""
    floor = Hlc(1_600_000_000_000 * 10**6, 0)
    plan = replace(batch_plan(), formats={SRC: "debezium"}, thresholds={(SRC, 0): floor})
    records = [
        binlog_read(500, "old", floor.wall // 10**6 - 1000),  # before the changefeed's start
        binlog_read(700, "new", 1_700_000_000_000),
        binlog_read(700, "new too", 1_700_000_000_000, key=2),
    ]
    out, result = run(plan, arrow(records))
    rows = [
        (json.loads(r["value"])["after"]["note"], json.loads(r["value"])["updated"]) for r in out
    ]
    assert rows == [("new", str(floor.next())), ("new too", str(floor.next().next()))]
    assert result.duplicates == 1


def test_a_binlog_snapshot_read_without_its_point_is_a_bad_record() -> None:
    _, value = binlog_read(700, "x", 1_700_000_000_000)
    event = json.loads(value)
    del event["source"]["pos"]
    with pytest.raises(BadRecord, match="where its snapshot began"):
        decode({"id": 1}, event)


def pg_read(key: int, note: str) -> tuple[bytes, bytes]:
    """A PostgreSQL snapshot's read of ``key`` (its snapshot began at LSN 24_100_000)."""
    read = {**pg(24_100_000), "op": "r", "after": {"id": key, "note": note}}
    read["source"] = {**read["source"], "snapshot": "true", "sequence": None}
    return json.dumps({"id": key}).encode(), json.dumps(read).encode()


def test_the_summary_says_where_the_last_snapshot_read_lies_and_none_without_one() -> None:
    """The driver learns by it that the connector took a new snapshot (``resnapshots.py``).

    The offset of the partition's last read in the batch: across the Arrow batches of a task,
    and merged (the highest); a read dropped as older than the floor counts too (it lies there
    all the same). None without a read; a summary without the field (the JVM walk's, written
    before it had one) reads as None.
    """
    base = replace(batch_plan(dlq=True), formats={SRC: "debezium"}, counted=frozenset({SRC}))
    old = restarted([24_023_810, 24_023_820], [1, 2], note="old")  # streamed: offsets 0, 1
    new = restarted([24_100_010], [1], note="new")  # the stream after the snapshot
    reads = [pg_read(1, "read"), pg_read(2, "read")]  # offsets 2, 3
    records, result = run(base, arrow([*old, *reads, *new]))
    assert len(records) == 5
    assert result.partitions[0].reread == 3
    _, split = run(base, arrow([*old, reads[0]]), arrow([reads[1], *new], start=3))
    assert split.partitions[0].reread == 3
    _, first_only = run(base, arrow([*old, reads[0]]), arrow(new, start=3))
    assert first_only.partitions[0].reread == 2
    _, none = run(base, arrow([*old, *new]))
    assert none.partitions[0].reread is None
    floor = Hlc(1_600_000_000_000 * 10**6, 0)
    below = replace(base, thresholds={(SRC, 0): floor})
    _, dropped = run(below, arrow([binlog_read(500, "old", floor.wall // 10**6 - 1000)]))
    assert (dropped.duplicates, dropped.partitions[0].reread) == (1, 0)
    merged = result.partitions[0].merge(replace(result.partitions[0], reread=None))
    assert merged.reread == 3
    walk = json.loads(result.partitions[0].to_json())
    del walk["reread"]
    assert PartitionSeen.from_json(json.dumps(walk)).reread is None
