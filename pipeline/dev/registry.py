"""An embedded schema registry: Apicurio Registry 3 with its Confluent-compatible API.

A :class:`~pipeline.dev.service.LocalService` like the broker: a directory of its own with a
``registry.json`` state file, a free port on 127.0.0.1, in-memory storage (schemas live as
long as the process). Ready when ``GET /apis/ccompat/v7/subjects`` answers. At start the
global compatibility rule is set to ``BACKWARD``, the default of Confluent's registry, so a
schema change that existing consumers could not read is refused here as it would be there.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from pipeline.runtime.jars import registry_runner
from schemas.errors import PlatformError

from .service import LocalService, free_port

log = logging.getLogger(__name__)

CCOMPAT = "/apis/ccompat/v7"


class RegistryError(PlatformError):
    """The embedded schema registry did not start or answer."""


@dataclass(frozen=True)
class RegistryInfo:
    """Where a running registry listens and what process it is."""

    directory: str
    pid: int
    port: int

    @property
    def url(self) -> str:
        """The Confluent-compatible base URL (what ``schema_registry.url`` takes)."""
        return f"http://127.0.0.1:{self.port}{CCOMPAT}"


def _request(url: str, method: str = "GET", body: object = None) -> object:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(  # noqa: S310 - a loopback http URL we built
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
        return json.loads(response.read() or b"null")


class EmbeddedRegistry(LocalService[RegistryInfo]):
    """Apicurio Registry in ``directory``."""

    name = "schema registry"
    state_file_name = "registry.json"
    error = RegistryError
    info_type = RegistryInfo

    def __init__(self, directory: str | Path, *, heap: str = "512m", owned: bool = True) -> None:
        super().__init__(directory, owned=owned)
        self.heap = heap

    def start(self, timeout: float = 120.0) -> RegistryInfo:
        """Start the registry (or return the running one) once its API answers."""
        running = self.status()
        if running is not None:
            return running
        self.directory.mkdir(parents=True, exist_ok=True)
        runner = registry_runner()
        port = free_port()
        command = [
            "java",
            "-Xms64m",
            f"-Xmx{self.heap}",
            f"-Dhighwater.registry.dir={self.directory}",  # lets owns() recognise the process
            f"-Dquarkus.http.port={port}",
            "-Dquarkus.http.host=127.0.0.1",
            "-Dquarkus.http.access-log.enabled=false",
            "-jar",
            str(runner),
        ]
        process = self.spawn(command, "registry.out")
        info = RegistryInfo(str(self.directory), process.pid, port)
        self.record(info)
        self.wait_ready(process, lambda: _request(info.url + "/subjects") is not None, timeout)
        _request(info.url + "/config", "PUT", {"compatibility": "BACKWARD"})
        log.info("schema registry ready at %s (pid %s)", info.url, info.pid)
        return info

    def log_files(self) -> list[str]:
        """The registry's console output."""
        return ["registry.out"]

    def __enter__(self) -> RegistryInfo:
        return self.start()
