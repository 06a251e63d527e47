"""A local JVM service the project starts itself: the Kafka broker, the schema registry.

Each service lives in a directory of its own (config, data, logs and a JSON state file),
binds only to 127.0.0.1 on free ports, so several can run side by side (a demo and a test
run), and counts as ready when a probe answers. The state file lets another process (the
``highwater dev … stop`` commands) find and stop it. ``owned=True`` ties the service's life
to this Python process (tests): if the process dies, the kernel sends it SIGTERM.
``owned=False`` detaches it (the CLI).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from schemas.errors import PlatformError

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


class _Running(Protocol):
    @property
    def pid(self) -> int: ...


Info = TypeVar("Info", bound=_Running)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` different TCP ports on 127.0.0.1 that nothing listens on right now."""
    with contextlib.ExitStack() as held:  # each held open until all are picked: no repeats
        socks = [
            held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            for _ in range(count)
        ]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def _kill_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie child of ours is reaped and counts as gone)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def terminate(pid: int, timeout: float) -> None:
    """SIGTERM, then SIGKILL after ``timeout``; returns once the process is gone."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.2)
    if alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        while alive(pid):
            time.sleep(0.1)


def terminate_all(pids: list[int], timeout: float) -> None:
    """:func:`terminate` several at once (SIGTERM to all first: a cluster stops together)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    for pid in pids:
        terminate(pid, timeout)


def kill(pids: list[int]) -> None:
    """SIGKILL (a crash: no clean shutdown); returns once every one is gone."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for pid in pids:
        while alive(pid):
            time.sleep(0.05)


class LocalService(Generic[Info]):
    """The life cycle shared by the project's local services; subclasses say what to run.

    ``Info`` is a dataclass with at least ``pid``; it is written to the state file.
    """

    name = "service"
    state_file_name = "service.json"
    error: type[PlatformError] = PlatformError
    info_type: Callable[..., Info]

    def __init__(self, directory: str | Path, *, owned: bool = True) -> None:
        self.directory = Path(directory).resolve()
        self.owned = owned

    # -- state ---------------------------------------------------------------------------

    @property
    def state_file(self) -> Path:
        """The JSON file naming the running process and where it listens."""
        return self.directory / self.state_file_name

    def status(self) -> Info | None:
        """The running service of this directory, or None."""
        if not self.state_file.is_file():
            return None
        info = self.info_type(**json.loads(self.state_file.read_text(encoding="utf-8")))
        return info if self.owns(info.pid) else None

    def owns(self, pid: int) -> bool:
        """True if ``pid`` is this directory's service (its command line names the directory)."""
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return False
        return str(self.directory).encode() in cmdline

    # -- running ---------------------------------------------------------------------------

    def start(self, timeout: float = 120.0) -> Info:
        """Start the service (or return the running one) once it answers."""
        raise NotImplementedError

    def spawn(
        self, command: list[str], output: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start ``command`` in the directory, its output appended to ``output``."""
        with (self.directory / output).open("ab") as out:
            return subprocess.Popen(
                command,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.directory,
                start_new_session=not self.owned,
                preexec_fn=_kill_with_parent if self.owned else None,  # noqa: PLW1509
            )

    def record(self, info: Info) -> None:
        """Write the state file."""
        self.state_file.write_text(json.dumps(asdict(info)), encoding="utf-8")  # type: ignore[call-overload]

    def wait_ready(
        self, process: subprocess.Popen[bytes], probe: Callable[[], bool], timeout: float
    ) -> None:
        """Poll ``probe`` until it answers True.

        A clear error if the process dies or time runs out (the process is then stopped).
        """
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if process.poll() is not None:
                    raise self.error(
                        f"{self.name} exited with {process.returncode}:\n{self.tail()}"
                    )
                with contextlib.suppress(Exception):
                    if probe():
                        return
                time.sleep(0.3)
            raise self.error(f"{self.name} not ready after {timeout:.0f}s:\n{self.tail()}")
        except PlatformError:
            terminate(process.pid, 10)
            raise

    def log_files(self) -> list[str]:
        """Files (relative to the directory) whose last lines explain a failure."""
        return []

    def tail(self, lines: int = 30) -> str:
        """The last lines of the service's logs."""
        texts: list[str] = []
        for name in self.log_files():
            path = self.directory / name
            if path.is_file():
                texts.extend(path.read_text(encoding="utf-8", errors="replace").splitlines())
        return "\n".join(texts[-lines:])

    # -- stop ----------------------------------------------------------------------------

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the service cleanly (SIGTERM, then SIGKILL after ``timeout``); True if it ran."""
        info = self.status()
        if info is None:
            return False
        terminate(info.pid, timeout)
        log.info("%s %s stopped", self.name, self.directory)
        return True

    def __exit__(self, *_exc: Any) -> None:
        self.stop()
