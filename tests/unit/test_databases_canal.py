"""Whole TiCDC schemas: canal-json table topics found by TiCDC's topic expression, new ones listed.

A ``databases`` entry of format canal-json takes each topic its expression names for the
schema whose table the patterns take. A table created later is found by listing the topics
after the watermarks moved the frontier (TiCDC creates a table's topic before a watermark
passes its first change): until the listing clears a high-water mark, no marker can pass it,
and once a new topic is listed the frontier stays where the last listing left it (the
negative control: the in-stream resolver alone lets the watermarks pass the new table's
changes). The run's checkpoint names the topic and keeps that mark, where the next run starts
the table.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pipeline.config import parse_config, with_tables
from pipeline.core.coordinator.start import created_since
from pipeline.core.ledger import Checkpoint, Frontier, SourcePartition
from pipeline.core.ledger.checkpoint import decode
from pipeline.core.resolved import InStream, Listed, Resolver
from schemas.errors import SourceError
from schemas.hlc import Hlc
from tests.unit.test_config import problems

EXPRESSION = "tidb_{schema}_{table}"
TOPICS = [
    "tidb_shop_orders",
    "tidb_shop_order_items",  # an underscore in the table's name: the schema is known
    "tidb_shop_tmp_import",
    "tidb_other_orders",  # another schema
    "tidb_shop_bad-name",  # no table name Highwater takes
    "tidb_shop_",  # none at all
    "shop_orders",
]
T0, T1, T2, T3 = (Hlc(1_700_000_000_000_000_000 + k * 1_000_000, 0) for k in range(4))
BASE = {"changefeed_id": "cf", "kafka": {"bootstrap_servers": "broker:9092"}}


def config(**database: Any) -> Any:
    entry = {"format": "canal-json", "topics": EXPRESSION, "database": "shop"} | database
    return parse_config(BASE | {"databases": [entry]}, env={})


def test_each_table_topic_of_the_schema_the_patterns_take_is_a_source() -> None:
    expanded = with_tables(config(exclude=["shop.tmp_*"]), TOPICS)
    assert [(s.topic, s.table, s.format, s.database) for s in expanded.sources] == [
        ("tidb_shop_order_items", "order_items", "canal-json", "shop"),
        ("tidb_shop_orders", "orders", "canal-json", "shop"),
    ]
    assert expanded.transaction_topics == {}  # nothing beside the stream resolves them
    # an expression without the schema, with a suffix
    plain = with_tables(config(topics="{table}.cdc"), ["orders.cdc", "orders", "x.cdc.cdc"])
    assert [s.table for s in plain.sources] == ["orders"]
    assert config().databases[0].describe() == "tidb_shop_*"
    # the config found is the config given, validated again: every option as it was
    timed = parse_config(
        BASE
        | {
            "databases": [{"format": "canal-json", "topics": EXPRESSION, "database": "shop"}],
            "cursor": "1700000000000000000.0000000001",
            "end_time": "1800000000000000000.0000000000",
            "resolved": {"interval": "250ms"},
        },
        env={},
    )
    found = with_tables(timed, TOPICS)
    assert (found.cursor, found.end_time, found.resolved) == (
        timed.cursor,
        timed.end_time,
        timed.resolved,
    )


def test_config_errors_name_their_key() -> None:
    entry = {"format": "canal-json", "topics": EXPRESSION, "database": "shop"}

    def found(**changed: Any) -> dict[str, str]:
        changed_entry = {k: v for k, v in (entry | changed).items() if v is not None}
        return problems(BASE | {"databases": [changed_entry]})

    assert "is needed with format: canal-json" in found(topics=None)["databases[0].topics"]
    assert "the schema" in found(database=None)["databases[0].database"]
    for bad in ("tidb_{schema}", "{table}_{table}", "{table}_{schema}", "a b {table}"):
        assert "TiCDC topic expression" in found(topics=bad)["databases[0].topics"], bad
    assert "not used with format: canal-json" in found(prefix="dbz")["databases[0].prefix"]
    assert "not used" in found(transactions="t")["databases[0].transactions"]
    registry = found(schema_registry={"url": "http://r:8080"})
    assert "not used" in registry["databases[0].schema_registry"]
    # Debezium's own keys are still needed with it
    debezium = problems(BASE | {"databases": [{"prefix": "dbz"}]})
    assert "is needed with format: debezium" in debezium["databases[0].transactions"]
    assert (
        "not used"
        in problems(
            BASE | {"databases": [{"prefix": "dbz", "transactions": "t", "topics": EXPRESSION}]}
        )["databases[0].topics"]
    )


class Cluster:
    """The source cluster's topics, as a test lists them; or a failure to list."""

    def __init__(self, topics: list[str]) -> None:
        self.topics = topics
        self.failing = False
        self.listed = 0

    def __call__(self) -> list[str]:
        self.listed += 1
        if self.failing:
            raise RuntimeError("broker unreachable")
        return list(self.topics)


def watermarks(frontier: Frontier, time: Hlc, offset: int) -> None:
    """A batch that read a watermark at ``time`` on every partition the run reads."""
    for sp in frontier.progress():
        frontier.forward(sp, resolved=time, next_offset=offset)


@pytest.mark.parametrize("listed", [True, False], ids=["listed", "negative-control"])
def test_a_table_created_later_holds_the_frontier_where_the_topics_were_last_listed(
    listed: bool,
) -> None:
    run = with_tables(config(), ["tidb_shop_orders"])
    frontier = Frontier([SourcePartition("tidb_shop_orders", p) for p in (0, 1)], start=T0)
    cluster = Cluster(["tidb_shop_orders", "tidb_other_orders"])
    resolver: Resolver = Listed(InStream(), run, cluster, frontier) if listed else InStream()
    watermarks(frontier, T1, 10)
    resolver.advance(frontier)
    assert frontier.high_water() == T1  # listed after the watermarks: nothing new
    # TiCDC creates the new table's topic (its CREATE TABLE at T1 + 1), then sends T2
    cluster.topics.append("tidb_shop_later")
    watermarks(frontier, T2, 20)
    resolver.advance(frontier)
    if not listed:  # the bug: a marker at T2 would pass the new table's changes
        assert frontier.high_water() == T2
        return
    assert frontier.high_water() == T1
    assert resolver.appeared() == {"tidb_shop_later"}
    watermarks(frontier, T3, 30)  # the rest of the run: held, listed no more
    before = cluster.listed
    resolver.advance(frontier)
    assert (frontier.high_water(), cluster.listed) == (T1, before)
    assert frontier[SourcePartition("tidb_shop_orders", 0)].resolved == T3  # its own time
    # the checkpoint keeps the held mark and names the topic; the next run starts it there
    record = Checkpoint.of("cf", frontier, last_marker=T1, appeared=resolver.appeared())
    restored = decode(record.encode(1_000_000))
    assert (restored.high_water, restored.appeared) == (T1, ("tidb_shop_later",))
    assert json.loads(record.encode(1_000_000))["appeared"] == ["tidb_shop_later"]


def test_a_failed_listing_holds_the_markers_until_one_succeeds() -> None:
    run = with_tables(config(), ["tidb_shop_orders"])
    frontier = Frontier([SourcePartition("tidb_shop_orders", 0)], start=T0)
    cluster = Cluster(["tidb_shop_orders"])
    resolver = Listed(InStream(), run, cluster, frontier)
    cluster.failing = True
    watermarks(frontier, T1, 10)
    resolver.advance(frontier)
    assert frontier.high_water() == T0
    cluster.failing = False
    resolver.advance(frontier)  # a tick: listed again
    assert frontier.high_water() == T1
    assert resolver.appeared() == set()
    quiet = cluster.listed
    resolver.advance(frontier)  # nothing rose: not listed
    assert cluster.listed == quiet


def test_a_table_created_while_the_snapshot_was_taken_stops_the_start() -> None:
    run = with_tables(config(), ["tidb_shop_orders"])
    frontier = Frontier([SourcePartition("tidb_shop_orders", 0)], start=T0)
    cluster = Cluster(["tidb_shop_orders", "tidb_shop_later"])
    with pytest.raises(SourceError, match="tidb_shop_later were created while the changefeed"):
        Listed(InStream(), run, cluster, frontier).check_snapshot(T1, frontier)


def test_only_a_config_with_a_tidb_schema_lists_topics() -> None:
    inner = InStream()
    debezium = parse_config(
        BASE | {"databases": [{"prefix": "dbz", "transactions": "dbz.tx"}]}, env={}
    )
    frontier = Frontier([SourcePartition("t", 0)])
    assert Listed.around(inner, debezium, Cluster([]), frontier) is inner
    assert isinstance(Listed.around(inner, config(), Cluster([]), frontier), Listed)


def test_a_run_killed_before_its_record_named_a_new_table_still_reads_it_from_its_start() -> None:
    """The record names each database the run listed; a topic of one it lacks was created since.

    The kill falls between the listing that met ``tidb_shop_later`` and the record that
    would name it in ``appeared``: the last record covers ``tidb_shop_orders`` alone. The
    next run's database is configured as that run's was, so the new topic is one created
    since, read from its start above the record's high-water mark (its changes are all above
    it: the listings held the mark below them), not an added table started now (with
    ``initial_scan: no``, the changes it had before now would be lost).
    """
    run = with_tables(config(), ["tidb_shop_orders"])
    frontier = Frontier([SourcePartition("tidb_shop_orders", 0)], start=T1)
    listed = [d.identity for d in run.databases]
    record = Checkpoint.of("cf", frontier, topics=("tidb_shop_orders",), listed=listed)
    restored = decode(record.encode(1_000_000))
    assert restored.listed == tuple(listed)
    assert json.loads(record.encode(1_000_000))["listed"] == listed
    added = ("tidb_shop_later", "orders_by_hand")
    assert created_since(config(), restored, added) == {"tidb_shop_later"}
    # the negative controls: a record without the list (a run before it) knows nothing of the
    # kind; a widened pattern's table may have existed all along (an added table, scanned)
    older = decode(Checkpoint.of("cf", frontier, topics=("tidb_shop_orders",)).encode(10**6))
    assert created_since(config(), older, added) == set()
    assert created_since(config(include=["shop.*", "other.*"]), restored, added) == set()
    # what decides the topics decides the identity, the registry's secrets do not
    assert config().databases[0].identity != config(exclude=["shop.x"]).databases[0].identity
    debezium = {"prefix": "pg", "transactions": "pg.transaction"}
    registries = [{"url": "http://r", "basic_auth_user_info": a} for a in ("me:one", "me:two")]
    secrets = [
        parse_config(BASE | {"databases": [debezium | {"schema_registry": r}]}, env={}).databases[0]
        for r in registries
    ]
    assert secrets[0].identity == secrets[1].identity
