"""An embedded Kafka broker: one KRaft node (broker and controller) the project starts itself.

A :class:`~pipeline.dev.service.LocalService`: a directory of its own (storage, config, logs
and a ``broker.json`` state file), on 127.0.0.1, several side by side. It counts as ready
when an AdminClient answers. Alone, it is its own quorum on free ports picked at each start;
as a node of a cluster (:mod:`pipeline.dev.cluster`) it is given a :class:`KafkaNode`: fixed
ports, the quorum's voters, and 3 copies of Kafka's own topics.
"""

from __future__ import annotations

import base64
import logging
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.runtime.jars import broker_classpath
from schemas.errors import BrokerError

from .service import LocalService, free_ports

log = logging.getLogger(__name__)

_LOG4J2 = Path(__file__).resolve().parent.parent / "jvm" / "log4j2.properties"


@dataclass(frozen=True)
class BrokerInfo:
    """Where a running broker listens and what process it is."""

    directory: str
    pid: int
    port: int
    controller_port: int
    log_file: str

    @property
    def bootstrap_servers(self) -> str:
        """The ``bootstrap.servers`` string clients use."""
        return f"127.0.0.1:{self.port}"


@dataclass(frozen=True)
class KafkaNode:
    """One KRaft node (broker and controller) and its place in its cluster."""

    node_id: int
    port: int
    controller_port: int
    voters: str  # controller.quorum.voters: every node's id@host:controller_port, on every node
    replication: int  # copies of the topics Kafka itself creates (3 in a cluster, else 1)
    cluster_id: str  # what the node's storage is formatted with (first start only)


def new_cluster_id() -> str:
    """A KRaft cluster id: a random UUID, base64url without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def lone_node(port: int, controller_port: int) -> KafkaNode:
    """A one-node cluster: its own quorum, one copy of everything."""
    voters = f"1@127.0.0.1:{controller_port}"
    return KafkaNode(1, port, controller_port, voters, 1, new_cluster_id())


class EmbeddedKafka(LocalService[BrokerInfo]):
    """A single-node KRaft Kafka in ``directory``."""

    name = "Kafka broker"
    state_file_name = "broker.json"
    error = BrokerError
    info_type = BrokerInfo

    def __init__(
        self,
        directory: str | Path,
        *,
        heap: str = "768m",
        owned: bool = True,
        node: KafkaNode | None = None,
    ) -> None:
        super().__init__(directory, owned=owned)
        self.heap = heap
        self.node = node  # None: a lone node on free ports, picked at each start

    @property
    def _config_file(self) -> Path:
        return self.directory / "server.properties"

    # -- start ---------------------------------------------------------------------------

    def start(self, timeout: float = 120.0) -> BrokerInfo:
        """Format (first time only) and start the broker; return once an AdminClient answers.

        Starting a broker that already runs returns its info.
        """
        running = self.status()
        if running is not None:
            return running
        if self.node is not None:  # a cluster's node: its ports are its place in the quorum
            return self.wait(*self.launch(self.node), timeout)
        last_error: BrokerError | None = None
        for _attempt in range(3):  # a free port can be taken between probe and bind
            try:
                return self.wait(*self.launch(lone_node(*free_ports(2))), timeout)
            except BrokerError as exc:
                last_error = exc
                if "Address already in use" not in str(exc):
                    raise
        raise last_error or BrokerError("Kafka broker did not start")

    def launch(self, node: KafkaNode) -> tuple[subprocess.Popen[bytes], BrokerInfo]:
        """Write the node's config, format its storage (first time only), start its JVM.

        Returns at once; :meth:`wait` waits for it to answer. A cluster launches all its
        nodes before waiting on any (a lone voter cannot elect a controller).
        """
        classpath = broker_classpath()
        self.write_config(node)
        self._format(classpath, node.cluster_id)
        command = [
            "java",
            "-cp",
            classpath,
            *self._jvm_flags("server.log"),
            "kafka.Kafka",
            str(self._config_file),
        ]
        process = self.spawn(command, "broker.out")
        log_file = str(self.directory / "logs" / "server.log")
        info = BrokerInfo(
            str(self.directory), process.pid, node.port, node.controller_port, log_file
        )
        self.record(info)
        return process, info

    def wait(
        self, process: subprocess.Popen[bytes], info: BrokerInfo, timeout: float
    ) -> BrokerInfo:
        """Return ``info`` once the launched broker answers (a clear error if it does not)."""
        self.wait_ready(process, lambda: self._answers(info), timeout)
        log.info(
            "Kafka broker ready at %s (pid %s, dir %s)",
            info.bootstrap_servers,
            info.pid,
            self.directory,
        )
        return info

    def write_config(self, node: KafkaNode) -> None:
        """``server.properties`` for ``node``: its listeners, quorum and replication."""
        self.directory.mkdir(parents=True, exist_ok=True)
        data = self.directory / "data"
        copies, in_sync = node.replication, min(2, node.replication)
        lines = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": node.voters,
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}"
            ),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{node.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(data),
            "num.partitions": "1",
            # Highwater creates every topic it writes; auto-creation would hide a missing step.
            "auto.create.topics.enable": "false",
            # A cluster keeps 3 copies and acknowledges acks=all writes once 2 have them: one
            # broker may be lost without losing a write (the same on every node).
            "default.replication.factor": str(copies),
            "min.insync.replicas": str(in_sync),
            "unclean.leader.election.enable": "false",
            "offsets.topic.replication.factor": str(copies),
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": str(copies),
            "transaction.state.log.min.isr": str(in_sync),
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": str(copies),
            "share.coordinator.state.topic.min.isr": str(in_sync),
            "group.initial.rebalance.delay.ms": "0",
            "num.network.threads": "2",
            "num.io.threads": "4",
            "log.cleaner.backoff.ms": "1000",
        }
        text = "".join(f"{k}={v}\n" for k, v in lines.items())
        self._config_file.write_text(text, encoding="utf-8")

    def _format(self, classpath: str, cluster_id: str) -> None:
        if (self.directory / "data" / "meta.properties").is_file():
            return  # formatted by an earlier start: keep its topics (and its cluster id)
        command = [
            "java",
            "-cp",
            classpath,
            *self._jvm_flags("format.log"),
            "kafka.tools.StorageTool",
            "format",
            # "=" form: a base64 id may start with "-", which argparse would take for a flag
            f"--cluster-id={cluster_id}",
            "-c",
            str(self._config_file),
            "--ignore-formatted",
        ]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise BrokerError(f"formatting Kafka storage failed:\n{result.stdout}{result.stderr}")

    def _jvm_flags(self, log_name: str) -> list[str]:
        return [
            "-Xms128m",
            f"-Xmx{self.heap}",
            "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={_LOG4J2}",
            f"-Dhighwater.log.file={self.directory / 'logs' / log_name}",
        ]

    def _answers(self, info: BrokerInfo) -> bool:
        from confluent_kafka.admin import AdminClient  # noqa: PLC0415

        probe_log: Any = logging.getLogger("highwater.broker.probe")
        admin = AdminClient(
            {"bootstrap.servers": info.bootstrap_servers, "log_level": 0, "logger": probe_log}
        )
        return bool(admin.list_topics(timeout=2).brokers)

    def log_files(self) -> list[str]:
        """The launcher's output and the broker's log."""
        return ["broker.out", "logs/server.log"]

    def __enter__(self) -> BrokerInfo:
        return self.start()
