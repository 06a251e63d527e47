"""Fixtures: a Kafka broker, a schema registry, an Iceberg REST catalog, unique topics, Spark.

The broker is, in order of preference: ``KAFKA_BOOTSTRAP_SERVERS`` when set; testcontainers'
Kafka when a Docker engine answers; otherwise the project's own embedded KRaft broker. It is
session-scoped, so the suite pays for one start.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

# Property tests draw the same examples on every run of the suite (CI included): a failure is
# one anyone can run again, not a draw of that day. Exploring new draws is a run of its own:
# HIGHWATER_HYPOTHESIS=explore (random draws, failures kept in .hypothesis/ and replayed).
settings.register_profile("suite", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HIGHWATER_HYPOTHESIS", "suite"))

# The suite's Spark JVMs (the in-process session and every spark-submit a test starts; not
# the brokers, nor a cluster's executors) compile with C1 alone: a test's JVM lives seconds to
# a minute, and C2's compiler threads were a third of its CPU on two cores (measured: two
# single-run tests 68 -> 46 s of CPU; tests/spark 182 -> 146 s). Semantics are the JVM's either
# way; benchmarks and users keep Spark's defaults. A value already set is kept. They also
# share a class-data archive of Spark's classes (tests/support/spark_cds.py), made by
# pytest_configure before the first JVM starts.
SPARK_JVM = "-XX:TieredStopAtLevel=1"


def pytest_configure(config: pytest.Config) -> None:
    """The Spark JVMs' options: the first process of a run makes the CDS archive if missing."""
    from tests.support import spark_cds  # noqa: PLC0415

    if "SPARK_SUBMIT_OPTS" in os.environ:
        return  # set by the caller (or by the controller, which xdist's workers inherit)
    controller = not hasattr(config, "workerinput")
    shared = spark_cds.options(build=controller)
    os.environ["SPARK_SUBMIT_OPTS"] = f"{SPARK_JVM} {shared}".strip()


_TIER_BY_FOLDER = {"unit": "unit", "integration": "integration", "spark": "spark"}


# Seconds each test file took in a full run (``make durations`` writes it again): the suite's
# workers take the longest files first, so none is left running one alone at the end.
_DURATIONS = Path(__file__).with_name("durations.json")
_UNKNOWN_FILE_SECONDS = {"integration": 60, "spark": 20}  # a file not timed yet


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests are marked by the folder they live in: tests/unit, tests/spark, tests/integration.

    And ordered longest file first (a file's tests keep their order): with ``make test``'s
    ``--dist loadfile --no-loadscope-reorder`` the workers take files in this order.
    """
    tiers = set(_TIER_BY_FOLDER.values())
    for item in items:
        folder = Path(str(item.fspath)).parent.name
        tier = _TIER_BY_FOLDER.get(folder)
        # a test (or a parameter of one) marked with a tier of its own keeps it: the REST
        # catalog's variant of a unit test is an integration test (it runs a server)
        if tier and not any(m.name in tiers for m in item.iter_markers()):
            item.add_marker(getattr(pytest.mark, tier))
    timed = json.loads(_DURATIONS.read_text(encoding="utf-8")) if _DURATIONS.exists() else {}

    def seconds(item: pytest.Item) -> float:
        path = item.nodeid.split("::", 1)[0]
        folder = Path(path).parent.name
        return float(timed.get(path, _UNKNOWN_FILE_SECONDS.get(folder, 0)))

    items.sort(key=lambda item: -seconds(item))  # stable: a file's tests stay in order


def _docker_answers() -> bool:
    try:
        import docker  # noqa: PLC0415

        client = docker.from_env(timeout=3)
        client.ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``bootstrap.servers`` of a real Kafka broker for the whole test session."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external:
        yield external
        return
    if _docker_answers():
        from testcontainers.kafka import KafkaContainer  # noqa: PLC0415

        with KafkaContainer().with_kraft() as container:
            yield container.get_bootstrap_server()
        return
    from pipeline.dev.broker import EmbeddedKafka  # noqa: PLC0415

    with EmbeddedKafka(tmp_path_factory.mktemp("kafka")) as info:
        yield info.bootstrap_servers


@pytest.fixture(scope="session")
def schema_registry_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Confluent-compatible schema registry for the whole test session.

    ``SCHEMA_REGISTRY_URL`` when set, else the project's embedded Apicurio (global
    compatibility BACKWARD).
    """
    external = os.environ.get("SCHEMA_REGISTRY_URL")
    if external:
        yield external
        return
    from pipeline.dev.registry import EmbeddedRegistry  # noqa: PLC0415

    with EmbeddedRegistry(tmp_path_factory.mktemp("registry")) as info:
        yield info.url


@pytest.fixture(scope="session")
def iceberg_rest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """An Iceberg REST catalog for the whole session: its pyiceberg properties.

    ``ICEBERG_REST_URI`` when set, else the project's embedded one (Apache Iceberg's own REST
    catalog server over a warehouse in a temporary folder).
    """
    external = os.environ.get("ICEBERG_REST_URI")
    if external:
        yield {"type": "rest", "uri": external}
        return
    from pipeline.dev.iceberg_rest import EmbeddedIcebergRest  # noqa: PLC0415

    with EmbeddedIcebergRest(tmp_path_factory.mktemp("iceberg-rest")) as info:
        yield info.properties


@pytest.fixture(params=["sqlite", pytest.param("rest", marks=pytest.mark.integration)])
def iceberg_catalog(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    """A test's Iceberg catalog (its properties), once per kind the applier is tested on.

    ``sqlite``: the embedded catalog in tmp_path. ``rest``: the session's REST catalog,
    emptied after the test (every table and namespace dropped), so each test starts with none.
    """
    if request.param == "sqlite":
        yield {"warehouse": str(tmp_path / "warehouse")}
        return
    properties: dict[str, str] = request.getfixturevalue("iceberg_rest")
    yield properties
    from tests.support.iceberg import empty  # noqa: PLC0415

    empty(properties)


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Any:
    """A factory of topic names unique to this test: ``unique_name("src")``."""
    base = re.sub(r"[^A-Za-z0-9._-]", "-", request.node.name)[:60]

    def make(role: str) -> str:
        return f"{base}.{role}.{uuid.uuid4().hex[:8]}"

    return make


@pytest.fixture(scope="module")
def postgres() -> Iterator[Any]:
    """An embedded PostgreSQL server for a test module (the appliers' target), removed after."""
    from pipeline.dev.postgres import EmbeddedPostgres  # noqa: PLC0415 - integration tests only

    folder = Path(tempfile.mkdtemp(prefix="highwater-postgres-"))
    folder.chmod(0o755)  # the postgres user reaches it (pytest's own folders are root's)
    server = EmbeddedPostgres(folder / "pg")
    try:
        yield server.start()
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A local SparkSession built by the project's own session factory."""
    from pipeline.config import SparkConfig  # noqa: PLC0415
    from pipeline.runtime.session import build_session  # noqa: PLC0415

    session = build_session(
        SparkConfig(
            master="local[2]",
            conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"},
        ),
        "highwater-tests",
    )
    yield session
    session.stop()
