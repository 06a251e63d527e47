"""An embedded Iceberg REST catalog: Apache Iceberg's own server over a local warehouse.

The server is ``iceberg-open-api``'s runnable jar (``org.apache.iceberg.rest.RESTCatalogServer``,
fetched by ``highwater dev fetch-jars``): Iceberg's reference implementation of the REST
catalog protocol, which its REST compatibility kit tests clients against. It is configured by
environment variables only, each ``CATALOG_*`` one a catalog property (``CATALOG_REST_PORT``:
``rest.port``; ``CATALOG_WAREHOUSE``: ``warehouse``; ``CATALOG_URI``: ``uri``). Behind the
protocol it keeps the catalog in Iceberg's JDBC catalog; its default is an in-memory SQLite
database, so here it is a SQLite **file** in the warehouse folder (``rest-catalog.db``): the
tables and their history survive a restart of the server. Data and metadata files are written
under the warehouse by whoever writes (pyiceberg writes its own data files; the server writes
the metadata files).

A :class:`~pipeline.dev.service.LocalService` like the registry: a directory of its own with an
``iceberg-rest.json`` state file, ready when ``GET /v1/config`` answers. The port is the one
asked for, else the one the last start used (a restart keeps the catalog's URI), else a free
one. The server binds every interface (Iceberg 1.10's fixture takes a port, not a host); the
URI we hand out is 127.0.0.1's.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from pipeline.runtime.jars import iceberg_rest_jar
from schemas.errors import PlatformError

from .service import LocalService, free_port

log = logging.getLogger(__name__)

CATALOG_FILE = "rest-catalog.db"  # the server's JDBC catalog, in the warehouse folder


class IcebergRestError(PlatformError):
    """The embedded Iceberg REST catalog did not start or answer."""


@dataclass(frozen=True)
class IcebergRestInfo:
    """Where a running REST catalog listens, what process it is and where its warehouse is."""

    directory: str
    pid: int
    port: int
    warehouse: str

    @property
    def uri(self) -> str:
        """The catalog's base URI (what pyiceberg's ``uri`` takes)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def properties(self) -> dict[str, str]:
        """The catalog's properties for pyiceberg (``highwater apply --catalog KEY=VALUE`` each)."""
        return {"type": "rest", "uri": self.uri}


def config(uri: str) -> object:
    """``GET /v1/config``: the catalog's defaults and overrides (its readiness probe)."""
    with urllib.request.urlopen(f"{uri}/v1/config", timeout=5) as response:  # noqa: S310 - loopback
        return json.loads(response.read())


class EmbeddedIcebergRest(LocalService[IcebergRestInfo]):
    """Iceberg's REST catalog server in ``directory``, over ``warehouse`` (default inside it)."""

    name = "Iceberg REST catalog"
    state_file_name = "iceberg-rest.json"
    error = IcebergRestError
    info_type = IcebergRestInfo

    def __init__(
        self,
        directory: str | Path,
        *,
        warehouse: str | Path | None = None,
        port: int | None = None,
        heap: str = "512m",
        owned: bool = True,
    ) -> None:
        super().__init__(directory, owned=owned)
        self.warehouse = Path(warehouse).resolve() if warehouse else self.directory / "warehouse"
        self.port = port
        self.heap = heap

    def last_port(self) -> int | None:
        """The port the last start of this directory used (None: never started)."""
        if not self.state_file.is_file():
            return None
        return int(json.loads(self.state_file.read_text(encoding="utf-8"))["port"])

    def start(self, timeout: float = 120.0) -> IcebergRestInfo:
        """Start the server (or return the running one) once ``/v1/config`` answers."""
        running = self.status()
        if running is not None:
            return running
        self.directory.mkdir(parents=True, exist_ok=True)
        self.warehouse.mkdir(parents=True, exist_ok=True)
        port = self.port or self.last_port() or free_port()
        inherited = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
        env = {
            **inherited,  # a CATALOG_* of the caller's would become a catalog property
            "CATALOG_REST_PORT": str(port),
            "CATALOG_WAREHOUSE": self.warehouse.as_uri(),
            "CATALOG_URI": f"jdbc:sqlite:{self.warehouse / CATALOG_FILE}",
        }
        command = [
            "java",
            "-Xms64m",
            f"-Xmx{self.heap}",
            f"-Dhighwater.iceberg.dir={self.directory}",  # lets owns() recognise the process
            "-jar",
            str(iceberg_rest_jar()),
        ]
        process = self.spawn(command, "iceberg-rest.out", env)
        info = IcebergRestInfo(str(self.directory), process.pid, port, str(self.warehouse))
        self.record(info)
        self.wait_ready(process, lambda: config(info.uri) is not None, timeout)
        log.info("Iceberg REST catalog ready at %s (pid %s)", info.uri, info.pid)
        return info

    def log_files(self) -> list[str]:
        """The server's console output."""
        return ["iceberg-rest.out"]

    def __enter__(self) -> IcebergRestInfo:
        return self.start()
