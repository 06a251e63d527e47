"""A Spark standalone cluster on loopback, from pyspark's own jars: a master and N workers.

Each daemon is a :class:`~pipeline.dev.service.LocalService` (``spark-class`` of the
installed pyspark, its output in its directory): the master in ``spark-master/``, worker
``i`` in ``spark-worker-<i>/`` (one core each; executors' logs under its ``work/``). Ports
are chosen once and kept in ``spark.json``, so a worker killed and restarted comes back as
it was. A worker is ready when the master lists it ``ALIVE``.
"""

from __future__ import annotations

import json
import os
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from schemas.errors import PlatformError

from .service import LocalService, free_ports, kill, terminate_all

_LOG4J2 = Path(__file__).resolve().parent.parent / "jvm" / "spark-log4j2.properties"


@dataclass(frozen=True)
class SparkDaemonInfo:
    """A running master or worker: its process and where it listens."""

    directory: str
    pid: int
    port: int
    webui_port: int


def _spark_home() -> Path:
    import pyspark  # noqa: PLC0415 - Spark stays out of the CLI's start-up

    return Path(pyspark.__file__).resolve().parent


def master_state(webui_port: int) -> dict[str, Any]:
    """The master's state as its web UI serves it (``/json/``): workers, applications."""
    url = f"http://127.0.0.1:{webui_port}/json/"
    with urllib.request.urlopen(url, timeout=5) as response:
        state: dict[str, Any] = json.loads(response.read())
    return state


class SparkDaemon(LocalService[SparkDaemonInfo]):
    """A standalone master or worker (``spark-class <main class> <arguments>``)."""

    state_file_name = "daemon.json"
    info_type = SparkDaemonInfo

    def __init__(
        self,
        directory: str | Path,
        main_class: str,
        arguments: list[str],
        ports: tuple[int, int],
        *,
        ready: Any,
        owned: bool = True,
        hide: tuple[Path, ...] = (),
    ) -> None:
        super().__init__(directory, owned=owned)
        self.name = f"Spark {main_class.rsplit('.', 1)[-1].lower()}"
        self.main_class, self.arguments = main_class, arguments
        self.ports, self.ready, self.hide = ports, ready, hide

    def start(self, timeout: float = 120.0) -> SparkDaemonInfo:
        """Start the daemon (or return the running one) once ``ready(info)`` says so."""
        running = self.status()
        if running is not None:
            return running
        self.directory.mkdir(parents=True, exist_ok=True)
        home = _spark_home()
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))},
            "SPARK_HOME": str(home),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "512m",
            # the directory on the command line: LocalService.owns() finds the daemon by it
            "SPARK_DAEMON_JAVA_OPTS": f"-Dlog4j2.configurationFile={_LOG4J2} "
            f"-Dhighwater.daemon.dir={self.directory}",
        }
        command = [str(home / "bin" / "spark-class"), self.main_class, *self.arguments]
        if self.hide:
            command = self._hiding(home, command, env)
        process = self.spawn(command, "daemon.out", env=env)
        info = SparkDaemonInfo(str(self.directory), process.pid, *self.ports)
        self.record(info)
        self.wait_ready(process, lambda: bool(self.ready(info)), timeout)
        return info

    def _hiding(self, home: Path, command: list[str], env: dict[str, str]) -> list[str]:
        """``command`` in a mount namespace of its own where :attr:`hide` is empty.

        A worker that shares nothing with the submitter, on one machine: the directories
        hidden (the submitter's virtualenv and the interpreter it links to) are empty to it
        and to its executors; its Spark is the same pyspark, bound at a path outside them.
        """
        spark_home = self.directory / "spark-home"
        spark_home.mkdir(exist_ok=True)
        env["SPARK_HOME"] = str(spark_home)
        command[0] = str(spark_home / "bin" / "spark-class")
        mounts = [f"mount --bind {home} {spark_home}"]
        mounts += [f"mount -t tmpfs highwater-hidden {path}" for path in self.hide]
        script = " && ".join([*mounts, 'exec "$@"'])
        return [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
            *command,
        ]

    def log_files(self) -> list[str]:
        """The daemon's output (Spark logs to it)."""
        return ["daemon.out"]


@dataclass(frozen=True)
class SparkClusterInfo:
    """A running standalone cluster: its master URL and daemons."""

    master_url: str
    webui_url: str
    master: SparkDaemonInfo
    workers: tuple[SparkDaemonInfo, ...]


class SparkCluster:
    """A master and ``workers`` workers (``cores`` and ``memory`` each) in ``directory``."""

    def __init__(
        self,
        directory: str | Path,
        *,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1536m",
        owned: bool = True,
        hide: tuple[Path, ...] = (),
    ) -> None:
        self.directory = Path(directory).resolve()
        self.workers, self.cores, self.memory, self.owned = workers, cores, memory, owned
        self.hide = hide  # directories the workers must not see (SparkDaemon._hiding)

    @property
    def layout_file(self) -> Path:
        """``spark.json``: the daemons' ports, kept across restarts."""
        return self.directory / "spark.json"

    def layout(self) -> dict[str, Any]:
        """Ports of the master and each worker (chosen at the first start)."""
        if self.layout_file.is_file():
            saved: dict[str, Any] = json.loads(self.layout_file.read_text(encoding="utf-8"))
            return saved
        picked = free_ports(2 + 2 * self.workers)
        ports = {
            "master": picked[:2],
            "workers": [picked[i : i + 2] for i in range(2, len(picked), 2)],
        }
        self.directory.mkdir(parents=True, exist_ok=True)
        self.layout_file.write_text(json.dumps(ports), encoding="utf-8")
        return ports

    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:<port>``: what ``spark.master`` names."""
        return f"spark://127.0.0.1:{self.layout()['master'][0]}"

    def master(self) -> SparkDaemon:
        """The master daemon."""
        port, webui = self.layout()["master"]
        arguments = ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(webui)]
        return SparkDaemon(
            self.directory / "spark-master",
            "org.apache.spark.deploy.master.Master",
            arguments,
            (port, webui),
            ready=lambda _info: master_state(webui).get("status") == "ALIVE",
            owned=self.owned,
        )

    def worker(self, number: int) -> SparkDaemon:
        """Worker ``number`` (1-based)."""
        port, webui = self.layout()["workers"][number - 1]
        directory = self.directory / f"spark-worker-{number}"
        arguments = [
            self.master_url,
            *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(webui)),
            *("--cores", str(self.cores), "--memory", self.memory),
            *("--work-dir", str(directory / "work")),
        ]
        return SparkDaemon(
            directory,
            "org.apache.spark.deploy.worker.Worker",
            arguments,
            (port, webui),
            ready=lambda _info: self._alive(port),
            owned=self.owned,
            hide=self.hide,
        )

    def _alive(self, worker_port: int) -> bool:
        """Whether the master lists the worker at ``worker_port`` as ALIVE."""
        webui = self.layout()["master"][1]
        return any(
            w.get("port") == worker_port and w.get("state") == "ALIVE"
            for w in master_state(webui).get("workers", [])
        )

    def start(self, timeout: float = 120.0) -> SparkClusterInfo:
        """Start the master, then the workers not running; once each is registered."""
        master = self.master().start(timeout)
        workers = [self.worker(i).start(timeout) for i in range(1, self.workers + 1)]
        webui = f"http://127.0.0.1:{master.webui_port}"
        return SparkClusterInfo(self.master_url, webui, master, tuple(workers))

    def exists(self) -> bool:
        """Whether the cluster was ever laid out in its directory."""
        return self.layout_file.is_file()

    def running(self) -> dict[str, bool]:
        """Each daemon by name (``master``, ``worker-<i>``): whether it runs."""
        found = {"master": self.master().status() is not None}
        for i in range(1, len(self.layout()["workers"]) + 1):
            found[f"worker-{i}"] = self.worker(i).status() is not None
        return found

    def kill_worker(self, number: int) -> None:
        """SIGKILL worker ``number`` and its executors: a machine lost with its tasks.

        :meth:`start` restarts the worker; the master gives it executors again.
        """
        info = self.worker(number).status()
        if info is None:
            raise PlatformError(f"Spark worker {number} of {self.directory} is not running")
        kill([info.pid, *self.executors(number)])

    def kill_executors(self, number: int) -> list[int]:
        """SIGKILL the executors of worker ``number`` (it lives, and launches new ones)."""
        executors = self.executors(number)
        kill(executors)
        return executors

    def executors(self, number: int) -> list[int]:
        """The pids of the executors worker ``number`` launched (each names it in --worker-url)."""
        info = self.worker(number).status()
        if info is None:
            return []
        mark = f"Worker@127.0.0.1:{info.port}".encode()
        return [
            int(entry.name)
            for entry in Path("/proc").iterdir()
            if entry.name.isdigit() and mark in _cmdline(entry)
        ]

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the workers, then the master; True if any ran."""
        if not self.exists():
            return False
        daemons = [self.worker(i) for i in range(1, len(self.layout()["workers"]) + 1)]
        infos = [d.status() for d in [*daemons, self.master()]]
        pids = [info.pid for info in infos if info is not None]
        terminate_all(pids, timeout)
        return bool(pids)


def _cmdline(process: Path) -> bytes:
    try:
        return (process / "cmdline").read_bytes()
    except OSError:
        return b""
