"""An embedded Kafka broker: one KRaft node (broker and controller) the project starts itself.

A :class:`~pipeline.dev.service.LocalService`: a directory of its own (storage, config, logs
and a ``broker.json`` state file), free ports on 127.0.0.1, several side by side. It counts as
ready when an AdminClient answers.
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

from .service import LocalService, free_port

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


class EmbeddedKafka(LocalService[BrokerInfo]):
    """A single-node KRaft Kafka in ``directory``."""

    name = "Kafka broker"
    state_file_name = "broker.json"
    error = BrokerError
    info_type = BrokerInfo

    def __init__(self, directory: str | Path, *, heap: str = "768m", owned: bool = True) -> None:
        super().__init__(directory, owned=owned)
        self.heap = heap

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
        self.directory.mkdir(parents=True, exist_ok=True)
        classpath = broker_classpath()
        last_error: BrokerError | None = None
        for _attempt in range(3):  # a free port can be taken between probe and bind
            port, controller = free_port(), free_port()
            self._write_config(port, controller)
            self._format(classpath)
            try:
                return self._launch(classpath, port, controller, timeout)
            except BrokerError as exc:
                last_error = exc
                if "Address already in use" not in str(exc):
                    raise
        raise last_error or BrokerError("Kafka broker did not start")

    def _write_config(self, port: int, controller: int) -> None:
        data = self.directory / "data"
        lines = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{controller}",
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(data),
            "num.partitions": "1",
            # Highwater creates every topic it writes; auto-creation would hide a missing step.
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "num.network.threads": "2",
            "num.io.threads": "4",
            "log.cleaner.backoff.ms": "1000",
        }
        text = "".join(f"{k}={v}\n" for k, v in lines.items())
        self._config_file.write_text(text, encoding="utf-8")

    def _format(self, classpath: str) -> None:
        if (self.directory / "data" / "meta.properties").is_file():
            return  # formatted by an earlier start: keep its topics
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
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

    def _launch(self, classpath: str, port: int, controller: int, timeout: float) -> BrokerInfo:
        log_file = self.directory / "logs" / "server.log"
        command = [
            "java",
            "-cp",
            classpath,
            *self._jvm_flags("server.log"),
            "kafka.Kafka",
            str(self._config_file),
        ]
        process = self.spawn(command, "broker.out")
        info = BrokerInfo(str(self.directory), process.pid, port, controller, str(log_file))
        self.record(info)
        self.wait_ready(process, lambda: self._answers(info), timeout)
        log.info(
            "Kafka broker ready at %s (pid %s, dir %s)",
            info.bootstrap_servers,
            info.pid,
            self.directory,
        )
        return info

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
