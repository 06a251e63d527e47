"""Exactly-once delivery's driver side without a broker: names, slots, records, refusals."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from pipeline.config import parse_config
from pipeline.core.ledger.backfill import Backfill
from pipeline.core.ledger.frontier import Frontier, SourcePartition
from pipeline.core.ledger.records import ProgressRecord, decode
from pipeline.core.operators.status import JobStatus
from pipeline.core.progress.claim import Claim, progress_key, slot, transactional_id
from schemas.errors import ConfigError
from schemas.hlc import Hlc
from sinks.admin import TransactionState

RAW = {
    "changefeed_id": "orders",
    "kafka": {"bootstrap_servers": "b:9092"},
    "sources": [{"topic": "src", "table": "t"}],
    "delivery": "exactly_once",
}


def test_names_and_slots_are_the_java_sides() -> None:
    config = parse_config(RAW, env={})
    sp = SourcePartition("src", 0)
    assert transactional_id(config, sp) == "highwater-orders-rows-src-0"  # Delivery.java
    assert progress_key(sp) == "rows/src/0"
    # PiecesTest.the_slot_is_crc32_of_the_key_as_python_computes_it asserts the same numbers
    assert slot("rows/src/0", 4) == 2
    assert slot("rows/orders/11", 12) == 3
    assert config.effective_progress_topic == "_highwater_progress_orders"


def test_a_progress_record_as_pieces_java_writes_it_is_read_and_resumed_from() -> None:
    written = (  # Progress.value's bytes
        b'{"format_version":1,"topic":"src","partition":1,"next_offset":103,'
        b'"resolved":"5.0000000001","position":null,"generation":2}'
    )
    record = decode(ProgressRecord, written)
    assert (record.next_offset, record.resolved, record.generation) == (103, Hlc(5, 1), 2)
    frontier = Frontier([SourcePartition("src", 0), SourcePartition("src", 1)])
    frontier.forward(SourcePartition("src", 1), resolved=Hlc(9, 0), next_offset=200)
    claim = Claim(
        3,
        {
            SourcePartition("src", 0): record,
            SourcePartition("src", 1): record,  # behind the frontier: nothing moves back
            SourcePartition("other", 0): record,  # not a partition of this run
        },
        "_p",
        "highwater-orders",
    )
    # what it moves over is not read again (a Debezium transaction feed counts it again)
    assert claim.overlay(frontier) == [(SourcePartition("src", 0), None, 103)]
    progress = frontier.progress()
    assert (
        progress[SourcePartition("src", 0)].offset,
        progress[SourcePartition("src", 0)].resolved,
    ) == (103, Hlc(5, 1))
    assert (
        progress[SourcePartition("src", 1)].offset,
        progress[SourcePartition("src", 1)].resolved,
    ) == (200, Hlc(9, 0))
    assert SourcePartition("other", 0) not in frontier
    assert claim.options() == {
        "highwater.delivery": "exactly_once",
        "highwater.transactional.id.prefix": "highwater-orders",
        "highwater.progress.topic": "_p",
        "highwater.generation": "3",
        "highwater.piece.kind": "rows",
    }
    assert claim.options("scan", Hlc(7, 0))["highwater.scan.time"] == "7.0000000000"


def test_a_progress_record_must_say_its_generation() -> None:
    with pytest.raises(Exception, match="generation"):
        decode(ProgressRecord, b'{"format_version":1,"topic":"s","partition":1,"next_offset":1}')


@pytest.mark.parametrize(
    ("state", "problem"),
    [
        (TransactionState(1, 1, 1, None), None),
        (
            TransactionState(1, 3, 2, None),
            "transaction.state.log.replication.factor is 3 and the cluster has 1 broker(s): "
            "__transaction_state cannot be created",
        ),
        (TransactionState(3, 3, 2, {0: (1, 3), 1: (2, 2)}), None),
        (
            TransactionState(3, 3, 2, {0: (1, 3), 1: (-1, 0), 2: (-1, 0)}),
            "partitions [1, 2] of __transaction_state have no leader",
        ),
        (
            TransactionState(3, 3, 2, {0: (1, 1), 1: (2, 2)}),
            "partitions [0] of __transaction_state have fewer in-sync replicas than "
            "transaction.state.log.min.isr (2)",
        ),
    ],
)
def test_a_cluster_whose_transactions_cannot_work_is_named(
    state: TransactionState, problem: str | None
) -> None:
    assert state.problem() == problem


def test_the_delivery_is_checked_and_a_transactional_id_is_ours() -> None:
    assert parse_config({**RAW, "delivery": "at_least_once"}, env={}).delivery == "at_least_once"
    with pytest.raises((ConfigError, ValidationError), match="delivery"):
        parse_config({**RAW, "delivery": "exactly-once"}, env={})
    with pytest.raises((ConfigError, ValidationError), match=r"transactional\.id"):
        parse_config({**RAW, "sink": {"producer": {"transactional.id": "x"}}}, env={})


def test_the_status_says_the_delivery_and_the_run_generation() -> None:
    status = JobStatus("orders", "running", delivery="exactly_once", generation=4)
    record = json.loads(status.encode())
    assert (record["delivery"], record["generation"]) == ("exactly_once", 4)
    assert JobStatus.decode(status.encode()) == status
    older = JobStatus.decode(json.dumps({"changefeed_id": "o", "state": "running"}).encode())
    assert (older.delivery, older.generation) == (None, None)


def test_scan_chunks_committed_before_the_restart_are_done_and_their_ranges_not_read_again() -> (
    None
):
    a, b, c = (SourcePartition("src", p) for p in range(3))
    backfill = Backfill.of({a: 5, b: 0, c: 0}, {a: 40, b: 30, c: 20})
    committed = ProgressRecord(
        topic="src", partition=0, next_offset=40, generation=1, time=Hlc(7, 0)
    )
    short = ProgressRecord(topic="src", partition=1, next_offset=10, generation=1, time=Hlc(7, 0))
    other = ProgressRecord(topic="src", partition=2, next_offset=20, generation=1, time=Hlc(6, 0))
    claim = Claim(2, {}, "_p", "highwater-orders", scanned={a: committed, b: short, c: other})
    done, skipped = claim.scanned_chunks(backfill, Hlc(7, 0))
    # only a chunk committed whole at this snapshot's time: its range is not read again
    assert [chunk.partition for chunk in done.pending()] == [b, c]
    assert skipped == [(a, 5, 40)]
