"""A local Kafka cluster: three KRaft nodes (each broker and controller) on loopback.

What a replicated production cluster is, at the size of one machine: topics Highwater
creates get 3 copies (``replication_factor: auto``), ``acks=all`` writes are acknowledged
once 2 of them have the data (``min.insync.replicas=2``), and one node may be killed and
restarted while the others go on. The layout (ports, cluster id) is chosen once and kept
in ``cluster.json``: a node restarted after a crash must come back at the address the
others' quorum names. Each node is an :class:`~pipeline.dev.broker.EmbeddedKafka` in
``kafka-<id>/`` with its logs there.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from schemas.errors import BrokerError

from .broker import BrokerInfo, EmbeddedKafka, KafkaNode, new_cluster_id
from .service import free_ports, kill, terminate_all

log = logging.getLogger(__name__)

COPIES = 3  # what each node keeps of Kafka's own topics, and Highwater's "auto" gives


@dataclass(frozen=True)
class KafkaClusterInfo:
    """A running cluster: its nodes (in node-id order) and how clients reach it."""

    directory: str
    cluster_id: str
    nodes: tuple[BrokerInfo, ...]

    @property
    def bootstrap_servers(self) -> str:
        """Every node's address: clients find the cluster through whichever answers."""
        return ",".join(node.bootstrap_servers for node in self.nodes)


class KafkaCluster:
    """``brokers`` KRaft nodes in ``directory`` (static quorum, fixed ports)."""

    def __init__(
        self, directory: str | Path, *, brokers: int = 3, heap: str = "512m", owned: bool = True
    ) -> None:
        self.directory = Path(directory).resolve()
        self.brokers = brokers
        self.heap = heap
        self.owned = owned

    @property
    def layout_file(self) -> Path:
        """``cluster.json``: the cluster id and every node's ports, kept across restarts."""
        return self.directory / "cluster.json"

    def layout(self) -> list[KafkaNode]:
        """The nodes, as chosen at the first start (chosen now if this is the first)."""
        if self.layout_file.is_file():
            saved = json.loads(self.layout_file.read_text(encoding="utf-8"))
            return [KafkaNode(**node) for node in saved["nodes"]]
        picked = free_ports(2 * self.brokers)
        ports = list(zip(picked[::2], picked[1::2], strict=True))
        voters = ",".join(f"{i}@127.0.0.1:{c}" for i, (_, c) in enumerate(ports, 1))
        copies = min(COPIES, self.brokers)
        cluster_id = new_cluster_id()
        nodes = [
            KafkaNode(i, port, controller, voters, copies, cluster_id)
            for i, (port, controller) in enumerate(ports, 1)
        ]
        self.directory.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"nodes": [asdict(node) for node in nodes]}, indent=2)
        self.layout_file.write_text(text, encoding="utf-8")
        return nodes

    def node(self, node_id: int) -> EmbeddedKafka:
        """Node ``node_id`` (1-based) as a service of its own: started, stopped or killed."""
        spec = self.layout()[node_id - 1]
        return EmbeddedKafka(
            self.directory / f"kafka-{node_id}", heap=self.heap, owned=self.owned, node=spec
        )

    def start(self, timeout: float = 180.0) -> KafkaClusterInfo:
        """Start the nodes not running (all launched before waiting on any); their info."""
        nodes = [self.node(spec.node_id) for spec in self.layout()]
        launched = []
        for node in nodes:  # from this thread: an owned node dies with the thread that forked it
            if node.status() is None:
                assert node.node is not None  # noqa: S101 - a cluster's nodes have their spec
                launched.append((node, *node.launch(node.node)))
        for node, process, info in launched:
            node.wait(process, info, timeout)
        return self._info(nodes)

    def running(self) -> list[bool]:
        """For each node in id order: whether its process runs."""
        return [self.node(spec.node_id).status() is not None for spec in self.layout()]

    def exists(self) -> bool:
        """Whether the cluster was ever laid out in its directory."""
        return self.layout_file.is_file()

    def kill(self, node_id: int) -> None:
        """SIGKILL one node (a crash: no clean shutdown); :meth:`start` brings it back."""
        info = self.node(node_id).status()
        if info is None:
            raise BrokerError(f"node {node_id} of {self.directory} is not running")
        kill([info.pid])
        log.info("killed Kafka node %d (pid %d)", node_id, info.pid)

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop every node; True if any ran."""
        if not self.exists():
            return False
        infos = [self.node(spec.node_id).status() for spec in self.layout()]
        running = [info.pid for info in infos if info is not None]
        terminate_all(running, timeout)  # one by one, a node left without a quorum waits
        log.info("Kafka cluster %s stopped", self.directory)
        return bool(running)

    def _info(self, nodes: list[EmbeddedKafka]) -> KafkaClusterInfo:
        infos = [node.status() for node in nodes]
        if any(info is None for info in infos):
            raise BrokerError(f"a node of the Kafka cluster in {self.directory} is not running")
        cluster_id = self.layout()[0].cluster_id
        return KafkaClusterInfo(str(self.directory), cluster_id, tuple(i for i in infos if i))
