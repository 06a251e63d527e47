"""JVM artifacts from Maven Central: broker, CLI tools, Connect, Spark's connector and more.

The schema registry (Apicurio) comes as an application archive, unpacked in place; Debezium's
PostgreSQL connector as its jars, for the Kafka Connect among the broker jars, with Apicurio's
Avro converter for Connect; Apache Iceberg's REST catalog server as its one runnable jar.

What running changefeeds needs (:func:`fetch_runtime`, ``highwater fetch-jars``): Spark's
Kafka connector and our own Java built against it (:class:`WalkJar`). The development tools'
sets (broker, registry, Debezium, Iceberg's REST catalog) come with :func:`fetch_all`
(``highwater dev fetch-jars``). Iceberg's Spark runtime, which only ``highwater apply --engine
spark`` puts on its classpath (:func:`iceberg_spark_jars`), comes with both: with
``highwater fetch-jars --iceberg`` and with :func:`fetch_all`.

Each fetch is idempotent: each jar set lands in its own folder with a stamp naming the
POM and versions it came from, and a second call with the same stamp does nothing (no Maven,
no network). Maven writes into a scratch folder that is renamed into place only when the copy
finished, so an interrupted fetch never leaves a half set behind.

Where: ``$HIGHWATER_JARS_DIR``, else ``.jars/`` in the source checkout (ignored by git),
else ``~/.cache/highwater/jars``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from schemas.errors import JarsError

log = logging.getLogger(__name__)

_JVM = Path(__file__).resolve().parent.parent / "jvm"
SPARK_CONNECTOR_ARTIFACTS = (
    "spark-sql-kafka-0-10_2.13",
    "spark-token-provider-kafka-0-10_2.13",
    "spark-avro_2.13",
)
_STAMP = ".highwater-stamp"
REGISTRY_VERSION = "3.0.9"
# Iceberg's REST catalog server (``iceberg-open-api``'s runnable jar): 1.10.0 runs on Java 17
# and is the Iceberg of the Spark runtime the platform notes name.
ICEBERG_REST_VERSION = "1.10.0"
# Iceberg's Spark runtime (``apply --engine spark``): the REST server's Iceberg, for Spark 4.0
ICEBERG_SPARK_RUNTIME = f"org.apache.iceberg:iceberg-spark-runtime-4.0_2.13:{ICEBERG_REST_VERSION}"


def jars_root() -> Path:
    """The folder holding every jar set."""
    configured = os.environ.get("HIGHWATER_JARS_DIR")
    if configured:
        return Path(configured)
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file():
        return checkout / ".jars"
    return Path.home() / ".cache" / "highwater" / "jars"


def pyspark_version() -> str:
    """The installed pyspark version, which the connector jars must match exactly."""
    import pyspark  # noqa: PLC0415 - keep Spark out of import time of the dev tools

    return str(pyspark.__version__)


def _stamped(directory: Path, stamp: str) -> bool:
    """Whether ``directory`` is a complete copy made from what ``stamp`` says."""
    path = directory / _STAMP
    return path.is_file() and path.read_text(encoding="utf-8").strip() == stamp


def _scratch(directory: Path) -> Path:
    """An empty folder beside ``directory`` to make its next copy in."""
    scratch = directory.with_name(directory.name + ".partial")
    shutil.rmtree(scratch, ignore_errors=True)
    return scratch


def _install(scratch: Path, directory: Path, stamp: str) -> None:
    """Stamp the finished ``scratch`` and put it in place of ``directory``."""
    (scratch / _STAMP).write_text(stamp + "\n", encoding="utf-8")
    shutil.rmtree(directory, ignore_errors=True)
    scratch.rename(directory)


@dataclass(frozen=True)
class JarSet:
    """One POM's dependencies, copied into ``root/<name>``."""

    name: str
    pom: Path
    properties: dict[str, str] = field(default_factory=dict)
    # One artifact to copy (``group:artifact:version:type:classifier``) instead of the POM's
    # dependencies; a .tar.gz is unpacked in place.
    artifact: str | None = None
    # Maven goals run after copying the POM's dependencies, into the same folder (e.g. a copy
    # of the artifactItems the POM configures, for artifacts Maven cannot resolve)
    goals: tuple[str, ...] = ()

    @property
    def directory(self) -> Path:
        """Where this set's jars live once fetched."""
        return jars_root() / self.name

    def stamp(self) -> str:
        """What the folder must have been fetched from to count as current."""
        digest = hashlib.sha256(self.pom.read_bytes()).hexdigest()[:16]
        props = ",".join(f"{k}={v}" for k, v in sorted(self.properties.items()))
        artifact = f"artifact={self.artifact}" if self.artifact else ""
        goals = f"goals={','.join(self.goals)}" if self.goals else ""
        parts = (self.pom.parent.name, f"pom={digest}", props, artifact, goals)
        return " ".join(p for p in parts if p)

    def is_current(self) -> bool:
        """True when the folder holds a complete copy from this very POM and properties."""
        return _stamped(self.directory, self.stamp())

    def jars(self) -> list[Path]:
        """The fetched jars, sorted; empty when not fetched."""
        return sorted(self.directory.glob("*.jar"))

    def fetch(self) -> bool:
        """Copy the POM's jars from Maven Central unless already there; True if it fetched."""
        if self.is_current():
            return False
        mvn = shutil.which("mvn")
        if mvn is None:
            raise JarsError("Maven ('mvn') is not on PATH; it is needed once to fetch the jars")
        scratch = _scratch(self.directory)
        goal = ["dependency:copy", f"-Dartifact={self.artifact}"] if self.artifact else []
        command = [
            mvn,
            "-B",
            "-q",
            "-f",
            str(self.pom),
            *(goal or ["dependency:copy-dependencies", *self.goals]),
            f"-DoutputDirectory={scratch}",
            *(f"-D{k}={v}" for k, v in sorted(self.properties.items())),
        ]
        log.info("fetching %s jars: %s", self.name, " ".join(command))
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        for archive in scratch.glob("*.tar.gz"):
            with tarfile.open(archive) as tar:
                tar.extractall(scratch, filter="data")
            archive.unlink()
        if result.returncode != 0 or not any(scratch.glob("*.jar")):
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
            raise JarsError(f"fetching the {self.name} jars with Maven failed:\n{tail}")
        _install(scratch, self.directory, self.stamp())
        return True


def broker_jars() -> JarSet:
    """The Kafka broker (KRaft), kafka-tools and a log4j2 binding."""
    return JarSet("broker", _JVM / "broker" / "pom.xml")


def spark_jar_set(version: str | None = None) -> JarSet:
    """Spark's Kafka connector, token provider and spark-avro at the pyspark version."""
    return JarSet(
        "spark", _JVM / "spark" / "pom.xml", {"spark.version": version or pyspark_version()}
    )


def registry_app() -> JarSet:
    """Apicurio Registry's runnable application (``*-runner.jar`` and its ``lib/``)."""
    return JarSet(
        "registry",
        _JVM / "registry" / "pom.xml",
        artifact=f"io.apicurio:apicurio-registry-app:{REGISTRY_VERSION}:tar.gz:all",
    )


def iceberg_rest_jars() -> JarSet:
    """Apache Iceberg's REST catalog server: ``iceberg-open-api``'s runnable (shaded) jar."""
    return JarSet(
        "iceberg-rest",
        _JVM / "iceberg-rest" / "pom.xml",
        artifact=f"org.apache.iceberg:iceberg-open-api:{ICEBERG_REST_VERSION}:jar",
    )


def iceberg_spark_set() -> JarSet:
    """Apache Iceberg's Spark runtime: its one shaded jar (catalogs, SQL extensions, REST)."""
    return JarSet(
        "iceberg-spark", _JVM / "iceberg-spark" / "pom.xml", artifact=f"{ICEBERG_SPARK_RUNTIME}:jar"
    )


def debezium_jars() -> JarSet:
    """Debezium's PostgreSQL and MariaDB connectors for the broker jars' Kafka Connect.

    With Apicurio's Avro converter: its artifacts, whose parent POM is not on Maven Central,
    are the POM's ``artifactItems``, copied by maven-dependency-plugin 2.8 (newer ones read
    that parent first and fail).
    """
    return JarSet(
        "debezium",
        _JVM / "debezium" / "pom.xml",
        goals=("org.apache.maven.plugins:maven-dependency-plugin:2.8:copy",),
    )


class WalkJar:
    """Our own Java (``pipeline/jvm/walk``, a Maven module), built here with its POM.

    Compiled against the installed pyspark's own jars and Spark's Kafka connector (whose
    producer pool the walk writes through), so it always matches the Spark it runs in: the POM
    takes them from a classpath jar written here (:meth:`classpath_jar`), nothing of Spark is
    downloaded. Rebuilt when a source file, the POM or the pyspark version changes; the build
    skips the JUnit tests (:meth:`test` runs them: ``make test``).
    """

    name = "walk"
    module = _JVM / "walk"

    @property
    def directory(self) -> Path:
        """Where the built jar lives."""
        return jars_root() / self.name

    @property
    def jar(self) -> Path:
        """The built jar."""
        return self.directory / "highwater-walk.jar"

    def sources(self) -> list[Path]:
        """What the jar is built from: the POM and the main sources (not the tests)."""
        return [self.module / "pom.xml", *sorted((self.module / "src" / "main").rglob("*.java"))]

    def stamp(self) -> str:
        """The sources and the Spark version the jar must have been built from."""
        digest = hashlib.sha256()
        for source in self.sources():
            digest.update(source.relative_to(self.module).as_posix().encode())
            digest.update(source.read_bytes())
        return f"walk sources={digest.hexdigest()[:16]} spark={pyspark_version()}"

    def is_current(self) -> bool:
        """True when the jar was built from these very sources for this Spark."""
        return self.jar.is_file() and _stamped(self.directory, self.stamp())

    def classpath_jar(self, build: Path) -> Path:
        """A jar in ``build`` whose manifest lists pyspark's jars and the connector's.

        The POM's one system-scope dependency (``spark.classpath``): javac and the test JVM
        follow the manifest's ``Class-Path`` (paths relative to the jar, as the format wants).
        """
        import pyspark  # noqa: PLC0415 - keep Spark out of import time of the dev tools

        connector = spark_jar_set()
        if not connector.is_current():
            raise JarsError(
                "the walk is built against Spark's Kafka connector: fetch it first "
                "('highwater fetch-jars')"
            )
        build.mkdir(parents=True, exist_ok=True)
        folders = (Path(pyspark.__file__).parent / "jars", connector.directory)
        jars = [jar for folder in folders for jar in sorted(folder.glob("*.jar"))]
        manifest = _manifest([quote(os.path.relpath(j, build)) for j in jars])
        path = build / "spark-classpath.jar"
        if path.is_file():  # unchanged, it leaves Maven's incremental build alone
            with zipfile.ZipFile(path) as old:
                if old.read("META-INF/MANIFEST.MF") == manifest:
                    return path
        with zipfile.ZipFile(path, "w") as out:
            out.writestr("META-INF/MANIFEST.MF", manifest)
        return path

    def maven(self, goal: str, build: Path) -> list[str]:
        """``mvn`` running ``goal`` on the walk's POM, building in ``build``."""
        mvn = shutil.which("mvn")
        if mvn is None:
            raise JarsError("Maven ('mvn') is not on PATH; it is needed once to build the walk")
        return [
            mvn,
            "-B",
            "-q",
            "-f",
            str(self.module / "pom.xml"),
            goal,
            f"-Dspark.classpath={self.classpath_jar(build)}",
            f"-Dwalk.build={build}",
        ]

    def fetch(self) -> bool:
        """Build the jar unless it is current; True if it built."""
        if self.is_current():
            return False
        scratch = _scratch(self.directory)
        build = scratch / "build"
        command = [*self.maven("package", build), "-Dmaven.test.skip=true"]
        log.info("building the walk: %s", " ".join(command))
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        built = build / self.jar.name
        if result.returncode != 0 or not built.is_file():
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-30:])
            raise JarsError(f"building the walk with Maven failed:\n{tail}")
        built.rename(scratch / self.jar.name)
        shutil.rmtree(build)
        _install(scratch, self.directory, self.stamp())
        return True

    def test(self) -> int:
        """Run the walk's JUnit tests (Maven's output on the terminal); Maven's exit status."""
        command = self.maven("test", jars_root() / "walk.test")
        log.info("testing the walk: %s", " ".join(command))
        return subprocess.run(command, check=False).returncode


def _manifest(class_path: list[str]) -> bytes:
    """A jar manifest naming ``class_path`` (lines of at most 72 bytes, as the format wants)."""
    line = "Class-Path: " + " ".join(class_path)
    lines = [line[:72], *(" " + line[i : i + 71] for i in range(72, len(line), 71))]
    return ("Manifest-Version: 1.0\r\n" + "\r\n".join(lines) + "\r\n\r\n").encode("ascii")


def runtime_sets() -> tuple[JarSet | WalkJar, ...]:
    """What running changefeeds needs: Spark's Kafka connector, then the walk built on it."""
    return (spark_jar_set(), WalkJar())


def fetch_runtime() -> dict[str, bool]:
    """Fetch (or build) the run-time jars that are missing or stale; report which were."""
    return {s.name: s.fetch() for s in runtime_sets()}


def fetch_all() -> dict[str, bool]:
    """Fetch (or build) every jar set, the development tools' too; report which were."""
    sets = (
        broker_jars(),
        registry_app(),
        debezium_jars(),
        iceberg_rest_jars(),
        iceberg_spark_set(),
        *runtime_sets(),
    )
    return {s.name: s.fetch() for s in sets}


def registry_runner() -> Path:
    """The registry's runner jar; a clear error when it was not fetched."""
    jar_set = registry_app()
    runners = sorted(jar_set.directory.glob("*-runner.jar"))
    if not jar_set.is_current() or not runners:
        raise JarsError(
            f"the schema registry is not in {jar_set.directory}: run 'highwater dev fetch-jars'"
        )
    return runners[0]


def iceberg_rest_jar() -> Path:
    """The REST catalog server's jar; a clear error when it was not fetched."""
    jar_set = iceberg_rest_jars()
    found = jar_set.jars()
    if not jar_set.is_current() or not found:
        raise JarsError(
            f"Iceberg's REST catalog server is not in {jar_set.directory}: "
            "run 'highwater dev fetch-jars'"
        )
    return found[0]


def iceberg_spark_jars() -> list[Path]:
    """Iceberg's Spark runtime jar, for ``spark.jars`` beside :func:`spark_jars`.

    Raises :class:`JarsError` naming the fix when it was not fetched.
    """
    jar_set = iceberg_spark_set()
    found = jar_set.jars()
    if not jar_set.is_current() or not found:
        raise JarsError(
            f"Iceberg's Spark runtime ({ICEBERG_SPARK_RUNTIME}) is not in {jar_set.directory}: "
            "run 'highwater fetch-jars --iceberg'"
        )
    return found


def spark_jars() -> list[Path]:
    """The connector jars and the walk's for ``spark.jars``, checked against pyspark.

    Raises :class:`JarsError` when they are missing or were made for another Spark.
    """
    version = pyspark_version()
    jar_set = spark_jar_set(version)
    jars = jar_set.jars()
    if not jars:
        raise JarsError(
            f"Spark's Kafka connector jars are not in {jar_set.directory}: "
            "run 'highwater fetch-jars'"
        )
    for artifact in SPARK_CONNECTOR_ARTIFACTS:
        found = [j.name for j in jars if j.name.startswith(artifact + "-")]
        expected = f"{artifact}-{version}.jar"
        if expected not in found:
            have = ", ".join(found) or "none"
            raise JarsError(
                f"pyspark is {version} but the connector jar {artifact} is {have}: the "
                "connector must match Spark exactly; run 'highwater fetch-jars' again"
            )
    walk = WalkJar()
    if not walk.is_current():
        raise JarsError(
            f"the walk's jar in {walk.directory} is missing or was built from other sources or "
            "for another Spark: run 'highwater fetch-jars'"
        )
    return [*jars, walk.jar]


def broker_classpath() -> str:
    """A Java classpath with the broker and the Kafka CLI tools."""
    return _classpath(broker_jars(), "Kafka broker jars")


def debezium_classpath() -> str:
    """A Java classpath entry with Debezium's connector (beside :func:`broker_classpath`)."""
    return _classpath(debezium_jars(), "Debezium's jars")


def _classpath(jar_set: JarSet, what: str) -> str:
    """``<folder>/*`` of a fetched jar set; an error naming the fix when it is not there."""
    if not jar_set.jars():
        raise JarsError(f"{what} are not in {jar_set.directory}: run 'highwater dev fetch-jars'")
    return str(jar_set.directory / "*")
