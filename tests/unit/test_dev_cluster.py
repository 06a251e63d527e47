"""The local cluster's layout (``pipeline/dev/cluster.py``): what makes a restarted node rejoin."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.dev.cluster import KafkaCluster

pytestmark = pytest.mark.unit


def properties(path: Path) -> dict[str, str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def test_three_nodes_share_one_quorum_and_keep_their_ports(tmp_path: Path) -> None:
    nodes = KafkaCluster(tmp_path).layout()
    assert [n.node_id for n in nodes] == [1, 2, 3]
    ports = [p for n in nodes for p in (n.port, n.controller_port)]
    assert len(set(ports)) == 6
    assert {n.voters for n in nodes} == {
        ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in nodes)
    }
    assert len({n.cluster_id for n in nodes}) == 1
    assert KafkaCluster(tmp_path).layout() == nodes  # a restart finds the same addresses


def test_a_node_keeps_three_copies_and_needs_two_in_sync(tmp_path: Path) -> None:
    cluster = KafkaCluster(tmp_path)
    node = cluster.node(2)
    node.write_config(cluster.layout()[1])
    written = properties(node.directory / "server.properties")
    assert written["node.id"] == "2"
    assert written["advertised.listeners"] == f"PLAINTEXT://127.0.0.1:{cluster.layout()[1].port}"
    for key in (
        "default.replication.factor",
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
    ):
        assert written[key] == "3", key
    assert written["min.insync.replicas"] == "2"
    assert written["transaction.state.log.min.isr"] == "2"
    assert written["unclean.leader.election.enable"] == "false"


def test_a_lone_broker_keeps_one_copy(tmp_path: Path) -> None:
    cluster = KafkaCluster(tmp_path, brokers=1)
    node = cluster.node(1)
    node.write_config(cluster.layout()[0])
    written = properties(node.directory / "server.properties")
    assert written["default.replication.factor"] == "1"
    assert written["min.insync.replicas"] == "1"
