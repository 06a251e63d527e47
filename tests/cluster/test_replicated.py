"""A changefeed on a replicated Kafka: three KRaft nodes, one killed and restarted.

``make cluster-test`` runs it (not ``make test``: a three-node cluster does not fit the
suite's time on two cores). What is asserted is what operators and consumers see: the
replicas and in-sync replicas of every topic the changefeed relies on (Kafka's own
metadata), the job status ``highwater changefeed query`` prints, and the output rows.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from pipeline.cli import main as highwater
from pipeline.core.setup import relied_on
from pipeline.dev.cluster import KafkaCluster, KafkaClusterInfo
from pipeline.dev.generator import GeneratorSpec, write
from tests.support.changefeed import changefeed_config, read_output, run_to_end

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(
        not os.environ.get("HIGHWATER_CLUSTER_TESTS"), reason="make cluster-test runs it"
    ),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    kafka = KafkaCluster(tmp_path_factory.mktemp("cluster"))
    kafka.start()
    yield kafka
    kafka.stop()


def replicas(bootstrap: str, topics: list[str]) -> dict[str, list[tuple[int, int]]]:
    """Per topic, each partition's (replicas, in-sync replicas), as Kafka reports them."""
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30)
    return {
        topic: [
            (len(p.replicas), len(p.isrs))
            for _, p in sorted(metadata.topics[topic].partitions.items())
        ]
        for topic in topics
    }


def query(changefeed_id: str, bootstrap: str, capsys: Any) -> str:
    capsys.readouterr()
    assert highwater(["changefeed", "query", changefeed_id, "--bootstrap-servers", bootstrap]) == 0
    return str(capsys.readouterr().out)


def orders(bootstrap: str, seed: int, first_id: int) -> int:
    """600 generated changes on 3 partitions (the topic made with Highwater's defaults)."""
    spec = GeneratorSpec(
        topic="orders",
        rows=600,
        partitions=3,
        resolved_every=100,
        seed=seed,
        first_order_id=first_id,
    )
    return write(spec, {"bootstrap.servers": bootstrap}).total


def test_three_copies_of_everything_and_a_lost_node_is_reported_while_the_feed_goes_on(
    cluster: KafkaCluster, spark: Any, capsys: Any, tmp_path: Path
) -> None:
    info: KafkaClusterInfo = cluster.start()
    bootstrap = info.bootstrap_servers
    written = orders(bootstrap, seed=1, first_id=1)
    config = changefeed_config(
        bootstrap, "cf", [("orders", "orders")], encoder={"updated": True}, on_error="dlq"
    )
    run_to_end(config, spark)
    on_sink, on_source = relied_on(config)
    relied = sorted({*on_sink, *on_source})
    assert set(relied) >= {"cf.orders", "cf.checkpoints", "_highwater_dlq_cf", "orders"}
    assert replicas(bootstrap, relied) == {
        topic: [(3, 3)] * len(parts) for topic, parts in replicas(bootstrap, relied).items()
    }
    assert "replica" not in query("cf", bootstrap, capsys)  # (retention is warned of)

    # Node 2 lost: 2 of 3 copies stay in sync (min.insync.replicas=2), so acks=all writes,
    # checkpoints and markers go on; the status names what is under-replicated.
    cluster.kill(2)
    written += orders(bootstrap, seed=2, first_id=10_000)
    run_to_end(config, spark)
    status = query("cf", bootstrap, capsys)
    assert "WARNING: topic cf.orders: partitions [0, 1, 2] are under-replicated" in status
    assert "WARNING: topic cf.checkpoints: partitions [0] are under-replicated" in status

    # Node 2 back at its address: it catches up, and the next run's status is clean.
    cluster.start()
    deadline = time.monotonic() + 120
    while any(isr < 3 for parts in replicas(bootstrap, relied).values() for _, isr in parts):
        assert time.monotonic() < deadline, replicas(bootstrap, relied)
        time.sleep(1)
    run_to_end(config, spark)
    assert "replica" not in query("cf", bootstrap, capsys)

    rows = read_output(bootstrap, "cf.orders").rows
    assert len({(m.key, m.value) for m in rows}) == written  # every change, none lost
