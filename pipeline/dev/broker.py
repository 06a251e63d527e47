"""An embedded Kafka broker: one KRaft node (broker and controller) the project starts itself.

Each broker lives in a directory of its own (storage, config, logs and a ``broker.json``
state file), binds only to 127.0.0.1 on free ports, and so several can run side by side: a
demo and a test run, or two tests. It counts as ready when an AdminClient answers. The state
file lets another process (``highwater dev kafka stop``) find and stop it.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import logging
import os
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from schemas.errors import BrokerError

from .jars import broker_classpath

log = logging.getLogger(__name__)

_LOG4J2 = Path(__file__).resolve().parent.parent / "jvm" / "log4j2.properties"
_STATE = "broker.json"
_PR_SET_PDEATHSIG = 1


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


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _kill_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class EmbeddedKafka:
    """A single-node KRaft Kafka in ``directory``.

    ``owned=True`` ties the broker's life to this Python process (tests): if the process
    dies, the kernel sends the broker SIGTERM. ``owned=False`` detaches it (the CLI).
    """

    def __init__(self, directory: str | Path, *, heap: str = "768m", owned: bool = True) -> None:
        self.directory = Path(directory).resolve()
        self.heap = heap
        self.owned = owned

    # -- state ---------------------------------------------------------------------------

    @property
    def _state_file(self) -> Path:
        return self.directory / _STATE

    @property
    def _config_file(self) -> Path:
        return self.directory / "server.properties"

    def status(self) -> BrokerInfo | None:
        """The running broker of this directory, or None."""
        if not self._state_file.is_file():
            return None
        info = BrokerInfo(**json.loads(self._state_file.read_text(encoding="utf-8")))
        return info if self._is_ours(info.pid) else None

    def _is_ours(self, pid: int) -> bool:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        return str(self._config_file).encode() in cmdline

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
        with (self.directory / "broker.out").open("ab") as out:
            process = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.directory,
                start_new_session=not self.owned,
                preexec_fn=_kill_with_parent if self.owned else None,  # noqa: PLW1509
            )
        info = BrokerInfo(str(self.directory), process.pid, port, controller, str(log_file))
        self._state_file.write_text(json.dumps(asdict(info)), encoding="utf-8")
        try:
            self._wait_ready(info, process, timeout)
        except BrokerError:
            self._terminate(process.pid, 10)
            raise
        log.info(
            "Kafka broker ready at %s (pid %s, dir %s)",
            info.bootstrap_servers,
            info.pid,
            self.directory,
        )
        return info

    def _wait_ready(
        self, info: BrokerInfo, process: subprocess.Popen[bytes], timeout: float
    ) -> None:
        from confluent_kafka.admin import AdminClient  # noqa: PLC0415

        probe_log: Any = logging.getLogger("highwater.broker.probe")
        admin = AdminClient(
            {"bootstrap.servers": info.bootstrap_servers, "log_level": 0, "logger": probe_log}
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise BrokerError(f"Kafka broker exited with {process.returncode}:\n{self._tail()}")
            try:
                metadata = admin.list_topics(timeout=2)
            except Exception:
                time.sleep(0.3)
                continue
            if metadata.brokers:
                return
        raise BrokerError(f"Kafka broker not ready after {timeout:.0f}s:\n{self._tail()}")

    def _tail(self, lines: int = 30) -> str:
        texts = []
        for name in ("broker.out", "logs/server.log"):
            path = self.directory / name
            if path.is_file():
                texts.extend(path.read_text(encoding="utf-8", errors="replace").splitlines())
        return "\n".join(texts[-lines:])

    # -- stop ----------------------------------------------------------------------------

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the broker cleanly (SIGTERM, then SIGKILL after ``timeout``); True if it ran."""
        info = self.status()
        if info is None:
            return False
        self._terminate(info.pid, timeout)
        log.info("Kafka broker %s stopped", self.directory)
        return True

    def _terminate(self, pid: int, timeout: float) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self._alive(pid):
            time.sleep(0.2)
        if self._alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            while self._alive(pid):
                time.sleep(0.1)

    @staticmethod
    def _alive(pid: int) -> bool:
        # Reap our own child if it is one, so that it does not linger as a zombie.
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
        except OSError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] != "Z"

    # -- context manager -----------------------------------------------------------------

    def __enter__(self) -> BrokerInfo:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
