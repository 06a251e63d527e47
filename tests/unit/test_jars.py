import shutil
from pathlib import Path

import pytest

from pipeline.runtime import jars
from schemas.errors import JarsError


def fake_spark_set(root: Path, version: str) -> None:
    folder = root / "spark"
    folder.mkdir(parents=True)
    for artifact in jars.SPARK_CONNECTOR_ARTIFACTS:
        (folder / f"{artifact}-{version}.jar").write_bytes(b"")
    (folder / "kafka-clients-3.9.0.jar").write_bytes(b"")


def test_missing_jars_say_how_to_fetch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HIGHWATER_JARS_DIR", str(tmp_path))
    with pytest.raises(JarsError, match="highwater fetch-jars"):
        jars.spark_jars()


def test_connector_of_another_spark_version_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HIGHWATER_JARS_DIR", str(tmp_path))
    fake_spark_set(tmp_path, "3.5.1")
    with pytest.raises(JarsError) as caught:
        jars.spark_jars()
    message = str(caught.value)
    assert f"pyspark is {jars.pyspark_version()}" in message
    assert "spark-sql-kafka-0-10_2.13-3.5.1.jar" in message


def test_matching_connector_and_a_current_walk_are_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    connector = jars.spark_jar_set().directory  # the fetched one: the walk compiles against it
    monkeypatch.setenv("HIGHWATER_JARS_DIR", str(tmp_path))
    with pytest.raises(JarsError, match="Spark's Kafka connector: fetch it first"):
        jars.WalkJar().fetch()
    shutil.copytree(connector, tmp_path / "spark")
    with pytest.raises(JarsError, match="the walk's jar"):
        jars.spark_jars()
    walk = jars.WalkJar()
    assert walk.fetch() is True  # javac, against pyspark's own jars
    assert walk.fetch() is False  # built from these very sources: nothing to do
    found = jars.spark_jars()
    assert found == [*sorted((tmp_path / "spark").glob("*.jar")), walk.jar]


def test_fetch_is_a_no_op_when_the_stamp_matches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HIGHWATER_JARS_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", "/nonexistent")  # no Maven: a fetch attempt would fail
    jar_set = jars.broker_jars()
    with pytest.raises(JarsError, match="Maven"):
        jar_set.fetch()
    jar_set.directory.mkdir(parents=True)
    (jar_set.directory / ".highwater-stamp").write_text(jar_set.stamp(), encoding="utf-8")
    assert jar_set.fetch() is False


def test_stamp_changes_with_the_spark_version() -> None:
    assert jars.spark_jar_set("4.0.0").stamp() != jars.spark_jar_set("4.0.1").stamp()


def test_the_debezium_set_copies_apicurios_converter_after_the_poms_dependencies() -> None:
    debezium = jars.debezium_jars()
    assert debezium.goals == ("org.apache.maven.plugins:maven-dependency-plugin:2.8:copy",)
    assert debezium.stamp().endswith(" goals=" + debezium.goals[0])  # a new goal fetches again
    assert "apicurio-registry-utils-converter" in debezium.pom.read_text(encoding="utf-8")


def test_the_iceberg_rest_catalog_is_one_runnable_jar_and_says_how_to_fetch_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rest = jars.iceberg_rest_jars()
    assert rest.artifact == f"org.apache.iceberg:iceberg-open-api:{jars.ICEBERG_REST_VERSION}:jar"
    assert rest.pom.parent.name == rest.name == "iceberg-rest"
    monkeypatch.setenv("HIGHWATER_JARS_DIR", str(tmp_path))
    with pytest.raises(JarsError, match=r"REST catalog server is not in .*dev fetch-jars"):
        jars.iceberg_rest_jar()


def test_the_run_time_fetch_is_the_connector_then_the_walk() -> None:
    assert [s.name for s in jars.runtime_sets()] == ["spark", "walk"]


def test_the_walk_is_rebuilt_when_its_pom_or_main_sources_change_not_its_tests(
    tmp_path: Path,
) -> None:
    walk = jars.WalkJar()
    module = tmp_path / "walk"
    shutil.copytree(walk.module, module, ignore=shutil.ignore_patterns("target"))
    walk.module = module
    stamps = [walk.stamp()]
    test = next((module / "src" / "test").rglob("*.java"))
    test.write_text(test.read_text() + "\n", encoding="utf-8")
    assert walk.stamp() == stamps[-1]
    for changed in (module / "pom.xml", next((module / "src" / "main").rglob("*.java"))):
        changed.write_text(changed.read_text() + "\n", encoding="utf-8")
        stamps.append(walk.stamp())
    assert len(set(stamps)) == 3


def test_the_classpath_manifest_keeps_its_lines_within_72_bytes() -> None:
    entries = [f"../../some/where/jar-{n:03d}.jar" for n in range(40)]
    text = jars._manifest(entries).decode("ascii")
    assert text.endswith("\r\n\r\n")
    lines = text.split("\r\n")
    assert all(len(line) <= 72 for line in lines)
    header, *rest = [line for line in lines if line]
    assert header == "Manifest-Version: 1.0"
    value = rest[0] + "".join(line[1:] for line in rest[1:])  # continuations: one space
    assert value == "Class-Path: " + " ".join(entries)
