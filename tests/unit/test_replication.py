"""How many copies the topics Highwater creates keep, and what it warns of (``sinks/admin``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from sinks.admin import DurabilityWatch, durability, replication_for

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("wanted", "brokers", "factor"),
    [("auto", 1, 1), ("auto", 2, 2), ("auto", 3, 3), ("auto", 5, 3), (1, 3, 1), (5, 5, 5)],
)
def test_auto_keeps_three_copies_where_the_cluster_has_the_brokers(
    wanted: int | str, brokers: int, factor: int
) -> None:
    assert replication_for(wanted, brokers) == factor  # type: ignore[arg-type]


def cluster(brokers: int, **topics: list[tuple[int, list[int], list[int]]]) -> SimpleNamespace:
    """Metadata as confluent-kafka's ``list_topics()`` gives it: (leader, replicas, isrs)."""
    return SimpleNamespace(
        brokers=dict.fromkeys(range(brokers)),
        topics={
            name.replace("_", "."): SimpleNamespace(
                error=None,
                partitions={
                    i: SimpleNamespace(id=i, leader=leader, replicas=replicas, isrs=isrs)
                    for i, (leader, replicas, isrs) in enumerate(parts)
                },
            )
            for name, parts in topics.items()
        },
    )


def durability_warnings(metadata: SimpleNamespace, topics: list[str]) -> list[str]:
    return [w for d in durability(metadata, topics) for w in d.warnings()]


def test_a_healthy_topic_gets_no_warning() -> None:
    healthy = [(1, [1, 2, 3], [1, 2, 3]), (2, [2, 3, 1], [2, 3, 1])]
    assert durability_warnings(cluster(3, out_t=healthy), ["out.t", "missing"]) == []
    assert durability_warnings(cluster(1, out_t=[(0, [0], [0])]), ["out.t"]) == []


def test_fewer_copies_than_the_cluster_could_keep_is_named() -> None:
    found = durability_warnings(cluster(3, cp=[(1, [1], [1])]), ["cp"])
    assert found == [
        "topic cp has replication factor 1 on a cluster of 3 brokers: one broker's loss "
        "can lose its records"
    ]


def test_partitions_out_of_sync_or_without_a_leader_are_named() -> None:
    parts = [
        (1, [1, 2, 3], [1, 2, 3]),
        (2, [2, 3, 1], [2, 1]),
        (-1, [3, 1, 2], [3]),
        (1, [1, 2, 3], [1]),
    ]
    found = durability_warnings(cluster(3, out_t=parts), ["out.t"])
    assert found == [
        "topic out.t: partitions [2] have no leader",
        "topic out.t: partitions [1, 3] are under-replicated (a replica is out of sync)",
    ]


def test_the_watch_rereads_each_cluster_once_per_interval_and_keeps_what_it_found() -> None:
    healthy = cluster(3, out_t=[(1, [1, 2, 3], [1, 2, 3])], cp=[(2, [2, 3, 1], [2, 3, 1])])
    broker_down = cluster(3, out_t=[(1, [1, 2, 3], [1, 2])], cp=[(2, [2, 3, 1], [2, 1])])
    now, answers, asked = [100.0], [broker_down, healthy], []

    def describe(client: dict[str, str]) -> SimpleNamespace:
        asked.append(client["bootstrap.servers"])
        return answers.pop(0)

    watch = DurabilityWatch(
        [({"bootstrap.servers": "a:9092"}, ["out.t", "cp"])],
        30.0,
        clock=lambda: now[0],
        describe=describe,
    )
    watch.check([healthy])  # what the start read
    assert watch.warnings() == []
    assert not watch.due()
    now[0] += 29.9
    assert not watch.due()
    now[0] += 0.1
    assert watch.due()
    found = watch.check()
    assert asked == ["a:9092"]
    assert not watch.due()
    assert [(d.topic, d.under_replicated) for d in found] == [("cp", 1), ("out.t", 1)]
    assert watch.warnings() == [
        "topic cp: partitions [0] are under-replicated (a replica is out of sync)",
        "topic out.t: partitions [0] are under-replicated (a replica is out of sync)",
    ]
    now[0] += 30
    assert [d.under_replicated for d in watch.check()] == [0, 0]
    assert watch.warnings() == []


def test_an_interval_of_zero_keeps_what_the_start_found() -> None:
    watch = DurabilityWatch([], 0.0, clock=lambda: 1e9)
    assert not watch.due()
