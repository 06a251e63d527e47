"""Whole-database sources: a Debezium capture's table topics found by name, new tables held.

A ``databases`` entry takes each ``<prefix>.<schema>.<table>`` topic whose collection its
patterns include and do not exclude; sources listed by hand stay theirs; two topics of one
table name are refused. A table created later, named by an END of the transaction topic, is
counted there before the run reads its topic: the transaction waits, so no resolved time
passes it (the negative control: without the watch it would), and the log names the table.
"""

from __future__ import annotations

from typing import Any

import pytest

from pipeline.config import parse_config, with_tables
from pipeline.config.databases import follows
from pipeline.core.resolved.new_tables import NewTables
from pipeline.core.resolved.transactions import TransactionLog
from schemas.errors import ConfigError
from schemas.hlc import Hlc
from tests.unit.test_config import problems

TOPICS = [
    "dbz.public.orders",
    "dbz.public.audit_log",
    "dbz.inventory.items",
    "dbz.transaction",  # the capture's own
    "dbz.public",  # no table
    "dbz.public.a.b",  # not schema.table
    "dbz.public.bad-name",  # no table name Highwater takes
    "other.public.orders",  # another capture
]


def config(**database: Any) -> Any:
    raw = {
        "changefeed_id": "cf",
        "kafka": {"bootstrap_servers": "broker:9092"},
        "databases": [{"prefix": "dbz", "transactions": "dbz.transaction"} | database],
    }
    return parse_config(raw, env={})


def test_each_table_topic_the_patterns_take_is_a_source() -> None:
    expanded = with_tables(config(exclude=["public.audit_*"]), TOPICS)
    assert [(s.topic, s.table, s.collection, s.schema_name) for s in expanded.sources] == [
        ("dbz.inventory.items", "items", "inventory.items", "inventory"),
        ("dbz.public.orders", "orders", "public.orders", "public"),
    ]
    assert {s.transactions for s in expanded.sources} == {"dbz.transaction"}
    assert expanded.transaction_topics == {
        "dbz.transaction": {
            "inventory.items": "dbz.inventory.items",
            "public.orders": "dbz.public.orders",
        }
    }
    only = with_tables(config(include=["inventory.*"]), TOPICS)
    assert [s.topic for s in only.sources] == ["dbz.inventory.items"]
    # the checkpoint's shape names the tables: one added later is an added table on resume
    assert only.fingerprint != with_tables(config(include=["inventory.*"]), TOPICS[:1]).fingerprint


def test_a_database_with_no_table_yet_still_watches_its_transaction_topic() -> None:
    empty = with_tables(config(), [])
    assert empty.sources == []
    assert empty.transaction_topics == {"dbz.transaction": {}}
    assert follows(empty.databases, "dbz.transaction", "public.new_table")
    assert not follows(empty.databases, "dbz.transaction", "public.new-table")
    assert not follows(empty.databases, "other.transaction", "public.new_table")


def test_sources_listed_by_hand_stay_theirs_and_one_table_name_twice_is_refused() -> None:
    raw = {
        "changefeed_id": "cf",
        "kafka": {"bootstrap_servers": "broker:9092"},
        "sources": [
            {"topic": "dbz.public.orders", "table": "orders_by_hand", "format": "debezium"}
        ],
        "initial_scan": "no",
        "databases": [
            {"prefix": "dbz", "transactions": "dbz.transaction", "exclude": ["public.audit_*"]}
        ],
    }
    expanded = with_tables(parse_config(raw, env={}), TOPICS)
    assert [s.table for s in expanded.sources] == ["orders_by_hand", "items"]


def test_one_table_name_in_two_schemas_is_refused_naming_both() -> None:
    with pytest.raises(ConfigError, match=r"'dbz\.inventory\.items' and 'dbz\.public\.items'"):
        with_tables(config(), ["dbz.public.items", "dbz.inventory.items"])


def test_config_errors_name_their_key() -> None:
    bare = {"changefeed_id": "cf", "kafka": {"bootstrap_servers": "b:9092"}}
    assert "a source topic or a databases entry" in problems(bare)["sources"]
    # named beside the other problems of the same document, as a required key is
    assert {"sources", "kafka"} <= problems({"changefeed_id": "cf", "sources": []}).keys()
    found = problems(bare | {"databases": [{"prefix": "dbz"}]})
    assert "databases[0].transactions" in found
    found = problems(
        bare | {"databases": [{"prefix": "dbz", "transactions": "t", "format": "canal-json"}]}
    )
    assert "databases[0].topics" in found  # canal-json's own key, not Debezium's
    query = problems(
        bare
        | {"databases": [{"prefix": "dbz", "transactions": "t"}], "encoder": {"select": ["id"]}}
    )
    assert "a CDC query works on one table" in query["encoder.select"]


T1, T2 = Hlc(1_700_000_000_001_000_000, 0), Hlc(1_700_000_000_002_000_000, 0)
FOLLOWED = {"public.orders": "dbz.public.orders"}


@pytest.mark.parametrize("watched", [True, False], ids=["watched", "negative-control"])
def test_a_table_created_later_holds_the_resolved_time_until_it_is_read(watched: bool) -> None:
    """An END counting a new table's changes: the transaction waits for them (watched)."""
    new = NewTables.of(config(), "dbz.transaction", {})
    log = TransactionLog(FOLLOWED, started=True)
    log.ended("1:1", {"public.orders": 1}, T1, 0)
    log.saw("1:1", [1], Hlc(T1.wall, 1), Hlc(T1.wall, 1))
    counts = {"public.orders": 1, "public.created_later": 2, "public.audit-x": 3}
    if watched:
        new.meet(counts, log)  # as the reader does before each END
    log.ended("2:2", counts, T2, 1)
    log.saw("2:2", [1], Hlc(T2.wall, 1), Hlc(T2.wall, 1))  # the followed table's change read
    if not watched:  # the two unread changes of the new table would be passed: the bug
        assert log.resolved({}) == Hlc(T2.wall, 1)
        return
    assert log.resolved({}) == Hlc(T1.wall, 1)  # held below the new table's transaction
    assert new.names == {"public.created_later"}  # (a name no table takes is not one)
    assert log.collections["public.created_later"] == "dbz.public.created_later"
    # the checkpoint keeps it: a run after a kill still knows the table appeared mid-run
    record = {**log.record(), "appeared": sorted(new.names)}
    again = NewTables.of(config(), "dbz.transaction", record)
    assert again.names == {"public.created_later"}
    # the next run follows it (its topic listed): not new any more; the END read again
    # from where the record says, the new table's changes complete the transaction
    followed = {**FOLLOWED, "public.created_later": "dbz.public.created_later"}
    expanded = with_tables(config(), followed.values())
    assert NewTables.of(expanded, "dbz.transaction", record).names == set()
    restored = TransactionLog.restore(followed, record)
    assert restored.offset == 1
    restored.ended("2:2", counts, T2, 1)
    assert restored.resolved({}) == Hlc(T1.wall, 1)
    restored.saw("2:2", [2, 3], Hlc(T2.wall, 2), Hlc(T2.wall, 3))
    assert restored.resolved({}) == Hlc(T2.wall, 3)
