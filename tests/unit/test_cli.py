import argparse
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

import schemas
from pipeline.cli import build_parser, main
from pipeline.runtime.submit import package_zip

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_validate_prints_every_problem_by_key_and_exits_non_zero(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["validate", "--config", str(EXAMPLES / "invalid.yaml")])
    err = capsys.readouterr().err
    assert code == 2
    lines = [line.strip() for line in err.splitlines()[1:]]
    assert len(lines) == 3
    assert any(line.startswith("sink.partitons: unknown key") for line in lines)
    assert any(line.startswith("sink.replication_factor: ") for line in lines)
    assert any(line.startswith("encoder.diff: cannot be used") for line in lines)


def test_validate_accepts_the_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--config", str(EXAMPLES / "orders.yaml")]) == 0
    assert "ok" in capsys.readouterr().out


def test_validate_says_a_whole_database_is_followed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--config", str(EXAMPLES / "whole-database.yaml")]) == 0
    assert "every table of pg.* (databases)" in capsys.readouterr().out
    assert main(["validate", "--config", str(EXAMPLES / "whole-database-canal.yaml")]) == 0
    assert "every table of tidb_shop_* (databases)" in capsys.readouterr().out


def test_run_dry_run_builds_the_spark_submit_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run", "--config", str(EXAMPLES / "orders.yaml"), "--dry-run"]) == 0
    printed = shlex.split(capsys.readouterr().err)
    # the environment spark-submit needs first, so it runs as printed without the virtualenv
    # (tests/integration/test_spark_end_to_end.py runs it so)
    assert printed[0] == "env"
    n = next(i for i, word in enumerate(printed) if i > 0 and "=" not in word)
    settings = dict(word.split("=", 1) for word in printed[1:n])
    assert settings["PYSPARK_PYTHON"] == settings["PYSPARK_DRIVER_PYTHON"] == sys.executable
    assert Path(settings["SPARK_HOME"], "bin", "spark-class").is_file()
    command = printed[n:]
    assert command[0].endswith("spark-submit")
    jars = command[command.index("--jars") + 1].split(",")
    assert any("spark-sql-kafka-0-10_2.13-" in j for j in jars)
    assert len(jars) == 6  # the connector's five and the walk's (pipeline/jvm/walk)
    assert jars[-1].endswith("highwater-walk.jar")
    assert command[-3].endswith("pipeline/job.py")
    assert command[-2:] == ["--config", str((EXAMPLES / "orders.yaml").resolve())]


def test_the_executors_zip_holds_our_packages_schemas_from_the_consumer(tmp_path: Path) -> None:
    with zipfile.ZipFile(package_zip(tmp_path)) as archive:
        names = set(archive.namelist())
    tops = {n.split("/")[0] for n in names}
    assert tops == {"pipeline", "encoders", "sinks", "schemas"}  # not the consumer library
    here = Path(schemas.__file__).parent
    assert {f"schemas/{p.name}" for p in here.glob("*.py")} <= names
    assert "pipeline/job.py" in names
    # the protobuf messages' source, registered by the driver: read from the zip
    assert "schemas/highwater_changefeed.proto" in names
    code = "import schemas.protobuf as p; print(p.__file__); print(p.proto_text()[:30])"
    found = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(tmp_path / "highwater-py.zip")},
        cwd=tmp_path,  # not the checkout: -c puts the working folder first
        capture_output=True,
        text=True,
        check=True,
    )
    module, text = found.stdout.splitlines()
    assert "highwater-py.zip" in module  # imported from the zip, not the checkout
    assert text.startswith("// Highwater's protobuf output")


def test_kafka_cli_without_a_broker_says_how_to_start_one(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("HIGHWATER_STATE_DIR", str(tmp_path))
    assert main(["dev", "kafka-cli", "--name", "nope", "topics", "--list"]) == 1
    assert "highwater dev kafka start --name nope" in capsys.readouterr().err


def test_the_printed_command_never_shows_a_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = "hunter2-not-for-logs"  # noqa: S105 - the probe this test looks for
    path = tmp_path / "cf.yaml"
    raw = yaml.safe_load((EXAMPLES / "orders.yaml").read_text(encoding="utf-8"))
    raw.setdefault("spark", {}).setdefault("conf", {})["spark.kafka.sasl.jaas.config"] = (
        f"org.apache.kafka.common.security.plain.PlainLoginModule required password='{secret}';"
    )
    raw["spark"]["conf"]["spark.executor.memory"] = "1g"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    assert main(["run", "--config", str(path), "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert secret not in err
    assert "spark.kafka.sasl.jaas.config=**********" in err
    assert "spark.executor.memory=1g" in err


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--schema-registry", "http://registry:8080"], "is only used with --format debezium"),
        (["--format", "debezium", "--schema-registry", "registry:8080"], "should match"),
    ],
)
def test_gc_refuses_a_registry_it_cannot_use_naming_the_option(
    extra: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Checked before any broker is reached (none is, at this address)."""
    gc = ["gc", "run", "--once", "--topic", "t", "--bootstrap-servers", "127.0.0.1:9", *extra]
    assert main(gc) == 2
    err = capsys.readouterr().err
    assert "--schema-registry" in err
    assert says in err


def test_every_help_reads_as_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    """No reST markup (double backquotes, roles) in any command's --help."""
    parser = build_parser()
    pages = [parser.format_help()]
    stack = [parser]
    while stack:
        for action in stack.pop()._actions:  # argparse keeps the sub-commands there
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    pages.append(sub.format_help())
                    stack.append(sub)
    assert len(pages) > 20, "the sub-commands' pages were found"
    marked = [p.splitlines()[0] for p in pages if "``" in p or ":data:" in p or ":func:" in p]
    assert marked == []
