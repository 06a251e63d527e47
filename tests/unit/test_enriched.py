"""`envelope: enriched` in JSON: CockroachDB's envelope, its source block Highwater's knowledge.

The value's members in CockroachDB's order (``after``, ``before`` with diff, ``key`` with
key_in_value, ``op``, ``source`` with ``enriched_properties: [source]``, ``ts_ns``), the key
an object of the key's columns; ``op`` as the source said it; the source block naming the
changefeed, the table, the source record and the database's own position and transaction;
the consumer library reads such records back (the commit time: ``source.ts_hlc``). Config
errors name their key.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest

from encoders.base import ChangeRow, Context, Origin
from encoders.enriched import EnrichedJsonEncoder, op_of
from highwater_consumer.decoding import JsonDecoder
from pipeline.config import EncoderConfig
from schemas import source_block
from schemas.errors import EncodingError
from schemas.hlc import Hlc
from tests.unit.test_batch import SRC, T, arrow, row, run
from tests.unit.test_batch import plan as batch_plan
from tests.unit.test_config import minimal, problems
from tests.unit.test_scan import STATEMENT, scan_plan, sorted_arrow, walk
from tests.unit.test_sources_debezium import restarted

CTX = Context("out.orders")
TS = Hlc(1_700_000_000_000_000_000, 3)
MVCC = Hlc(1_700_000_000_000_000_000, 1)
ENRICHED = EncoderConfig(
    envelope="enriched",
    enriched_properties=["source"],
    updated=True,
    diff=True,
    key_in_value=True,
    mvcc_timestamp=True,
)
ORIGIN = Origin("src.orders", 2, 41, (24_023_800, 24_023_984), "771", ("region", "id"))


def change(op: str | None, after: dict | None, before: dict | None) -> ChangeRow:
    return ChangeRow("orders", ["eu", 7], after, before, TS, MVCC, None, op, ORIGIN)


def test_the_value_has_cockroachdbs_members_and_highwaters_source() -> None:
    encoder = EnrichedJsonEncoder(ENRICHED, "cf-1")
    row = change("update", {"region": "eu", "id": 7, "n": 1.50}, {"region": "eu", "id": 7})
    started = time.time_ns()
    value = json.loads(encoder.value(row, CTX))
    assert list(value) == ["after", "before", "key", "op", "source", "ts_ns"]
    assert (value["after"], value["before"]) == (row.after, row.before)
    assert (value["key"], value["op"]) == ({"region": "eu", "id": 7}, "u")
    assert started <= value["ts_ns"] <= time.time_ns()  # when it was written, as CockroachDB's
    assert value["source"] == {
        "changefeed_sink": "kafka",
        "db_position": [24_023_800, 24_023_984],
        "job_id": "cf-1",
        "mvcc_timestamp": str(MVCC),
        "origin": "highwater",
        "primary_keys": ["region", "id"],
        "source_offset": 41,
        "source_partition": 2,
        "source_topic": "src.orders",
        "table_name": "orders",
        "transaction_id": "771",
        "ts_hlc": str(TS),
        "ts_ns": TS.wall,
    }
    assert list(value["source"]) == sorted(value["source"])  # CockroachDB's order
    # the block every schema of it describes (Avro's, Kafka Connect's): one table of fields
    assert list(value["source"]) == [name for name, _, _ in source_block.FIELDS]
    assert encoder.key(row, CTX) == b'{"region":"eu","id":7}'
    # numbers as the source wrote them, as every envelope keeps them
    assert b'"n":1.50' in encoder.value(row._replace(after={"n": _number("1.50")}), CTX)


def _number(text: str) -> object:
    from schemas.jsontext import Number  # noqa: PLC0415

    return Number(text)


def test_the_bare_options_give_after_op_and_ts_ns_alone() -> None:
    encoder = EnrichedJsonEncoder(EncoderConfig(envelope="enriched"), "cf")
    value = json.loads(encoder.value(change("delete", None, {"region": "eu", "id": 7}), CTX))
    assert list(value) == ["after", "op", "ts_ns"]
    assert (value["after"], value["op"]) == (None, "d")
    # without updated the source block has no commit time; without mvcc_timestamp none either
    sourced = EnrichedJsonEncoder(
        EncoderConfig(envelope="enriched", enriched_properties=["source"]), "cf"
    )
    block = json.loads(sourced.value(change("insert", {"id": 7}, None), CTX))["source"]
    assert not {"ts_hlc", "ts_ns", "mvcc_timestamp"} & set(block)
    # an initial scan's row: no source record position, no transaction
    scanned = change("insert", {"id": 7}, None)._replace(origin=Origin(None, None, None))
    block = json.loads(sourced.value(scanned, CTX))["source"]
    assert (block["source_topic"], block["db_position"], block["primary_keys"]) == (
        None,
        None,
        None,
    )


@pytest.mark.parametrize(
    ("op", "after", "before", "expected"),
    [
        ("insert", {"id": 1}, None, "c"),
        ("update", {"id": 1}, None, "u"),  # the source said so, before or not
        ("delete", None, {"id": 1}, "d"),
        ("upsert", {"id": 1}, None, "c"),  # a native upsert: no version before it
        ("upsert", {"id": 1}, {"id": 1}, "u"),
        (None, {"id": 1}, None, "c"),
        (None, None, None, "d"),
    ],
)
def test_op_is_what_the_source_said_or_whether_a_version_preceded(
    op: str | None, after: dict | None, before: dict | None, expected: str
) -> None:
    assert op_of(change(op, after, before)) == expected


def test_a_key_whose_names_are_unknown_is_a_bad_record_and_key_column_keys_by_its_object() -> None:
    encoder = EnrichedJsonEncoder(ENRICHED, "cf")
    nameless = change("insert", {"id": 7}, None)._replace(origin=ORIGIN._replace(key_names=None))
    with pytest.raises(EncodingError, match="names of 2 key value"):
        encoder.key(nameless, CTX)
    keyed = EncoderConfig(envelope="enriched", key_column="status", unordered=True)
    row = change("update", {"id": 7, "status": "new"}, {"id": 7, "status": "old"})
    assert EnrichedJsonEncoder(keyed, "cf").key(row, CTX) == b'{"status":"new"}'


def test_the_consumer_reads_the_commit_time_from_the_source_block() -> None:
    encoder = EnrichedJsonEncoder(ENRICHED, "cf")
    row = change("update", {"region": "eu", "id": 7}, {"region": "eu", "id": 7})
    key, value = encoder.key(row, CTX), encoder.value(row, CTX)
    decoder = JsonDecoder()
    assert decoder.read(key, value) == TS.packed()
    read = decoder.change(key, value)
    assert (read.updated, read.key, read.after) == (TS, {"region": "eu", "id": 7}, row.after)
    timeless = EnrichedJsonEncoder(EncoderConfig(envelope="enriched"), "cf")
    with pytest.raises(ValueError, match="enriched_properties: \\[source\\]"):
        decoder.read(key, timeless.value(row, CTX))
    assert decoder.read(None, encoder.resolved(TS, CTX)).resolved == TS  # type: ignore[union-attr]


def test_the_loop_gives_debezium_rows_their_op_position_transaction_and_key_names() -> None:
    plan = replace(
        batch_plan(),
        formats={SRC: "debezium"},
        encoders={SRC: EnrichedJsonEncoder(ENRICHED, "cf-dbz")},
    )
    records, result = run(plan, arrow(restarted([24_023_810, 24_023_820], [1, 2])))
    assert result.emitted == 2
    values = [json.loads(r["value"]) for r in records]
    assert [json.loads(r["key"]) for r in records] == [{"id": 1}, {"id": 1}]
    assert [v["op"] for v in values] == ["u", "u"]
    first = values[0]["source"]
    assert (first["source_topic"], first["source_partition"], first["source_offset"]) == (SRC, 0, 0)
    assert first["db_position"][:2] == [24_023_800, 24_023_810]
    assert (first["transaction_id"], first["primary_keys"], first["job_id"]) == (
        "771",
        ["id"],
        "cf-dbz",
    )
    assert Hlc.parse(first["ts_hlc"]).wall == first["ts_ns"]


def test_the_config_names_what_enriched_cannot_take() -> None:
    assert (
        "only used with envelope: enriched"
        in problems(minimal(encoder={"enriched_properties": ["source"]}))[
            "encoder.enriched_properties"
        ]
    )
    avro = {"envelope": "enriched", "format": "avro", "enriched_properties": ["schema"]}
    assert (
        not {"encoder.envelope", "encoder.enriched_properties"}
        & problems(minimal(encoder=avro)).keys()
    )  # in Avro, the registry holds the schema
    assert (
        "cannot be used with envelope 'enriched'"
        in problems(minimal(encoder={"envelope": "enriched", "topic_in_value": True}))[
            "encoder.topic_in_value"
        ]
    )
    assert (
        "'row' has no Avro form"
        in problems(minimal(encoder={"envelope": "row", "format": "avro"}))["encoder.envelope"]
    )
    # a native source's key names no columns: its primary key must be declared
    found = problems(minimal(encoder={"envelope": "enriched"}))
    assert "is needed with enriched (with table_schema)" in found["sources[0].primary_key"]


def test_an_initial_scans_snapshot_row_is_a_create_and_its_later_changes_keep_their_op() -> None:
    """The snapshot's row (at the statement time) is ``c``, whatever it was.

    A later change is what its source said; both name their source record and the declared
    key's names.
    """
    encoder = EnrichedJsonEncoder(
        EncoderConfig(envelope="enriched", enriched_properties=["source"], updated=True), "cf"
    )
    plan = scan_plan()
    plan = replace(
        plan,
        batch=replace(plan.batch, encoders={SRC: encoder}, key_names={SRC: ("order_id",)}),
    )
    records, _ = walk(plan, sorted_arrow([(0, row(1, 2, True)), (1, row(1, 5, True))]))
    values = [json.loads(r["value"]) for r in records]
    assert [v["op"] for v in values] == ["c", "u"]  # both carry a version before: a scan's c
    assert [r["key"] for r in records] == [b'{"order_id":1}'] * 2
    assert [v["source"]["source_offset"] for v in values] == [0, 1]
    assert [v["source"]["ts_hlc"] for v in values] == [T[STATEMENT], T[5]]
    assert values[0]["source"]["primary_keys"] == ["order_id"]


@pytest.mark.parametrize(
    ("properties", "updated", "refused"),
    [
        (["source"], True, False),
        ([], True, True),  # no source block: no commit time to window by
        (["source"], False, True),  # a source block without ts_hlc
    ],
)
def test_the_consumer_library_windows_an_enriched_output_only_with_its_commit_time(
    monkeypatch: pytest.MonkeyPatch, properties: list[str], updated: bool, refused: bool
) -> None:
    from highwater_consumer import output as module  # noqa: PLC0415

    said = {
        "envelope": "enriched",
        "enriched_properties": properties,
        "updated": updated,
        "format": "json",
        "topics": {"orders": "out.orders"},
    }
    status = {b"cf": json.dumps({"output": said}).encode()}
    monkeypatch.setattr(module, "read_compacted", lambda *_: status)
    if refused:
        with pytest.raises(module.ConsumerError, match="enriched with updated: true"):
            module.Output.of_changefeed("broker:9092", "cf")
    else:
        assert module.Output.of_changefeed("broker:9092", "cf").topics == {"orders": "out.orders"}
