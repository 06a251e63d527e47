"""The package a user installs: the wheel, in a fresh virtualenv, fetches its jars and runs.

The wheel (and highwater-consumer's, which it requires: ``schemas`` and the consumer library)
is built from the project's sources and installed with no index into a virtualenv
outside the checkout. It gets its dependencies (pyspark, confluent-kafka, …) from this test
run's own site-packages through a plain path line in a ``.pth`` file (tests/support/wheels.py:
the project's editable installs there do not leak in). Then, from a folder outside the
checkout, the installed ``highwater fetch-jars`` fetches Spark's connector and builds our Java
from the sources the wheel carries, and the installed ``highwater run`` carries a few source
changes to the output topic on the test broker.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.changefeed import read_output
from tests.support.wheels import build_wheels, fresh_venv

ROOT = Path(__file__).resolve().parents[2]
# consumer/: highwater-consumer's pyproject, whose packages (schemas, highwater_consumer) sit at
# the top beside the others
PACKAGES = ("pipeline", "encoders", "sinks", "schemas", "highwater_consumer", "consumer")
T = "1700000000000000{:03d}.0000000000"


@dataclass(frozen=True)
class Installed:
    """A fresh virtualenv with the wheel installed."""

    venv: Path
    wheel: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def highwater(self) -> Path:
        return self.venv / "bin" / "highwater"

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a user of this virtualenv (nothing pointing at the checkout)."""
        base = {
            k: v
            for k, v in os.environ.items()
            if k not in {"PYTHONPATH", "HIGHWATER_JARS_DIR", "VIRTUAL_ENV"}
            and not k.startswith("PYSPARK_")
        }
        path = os.pathsep.join([str(self.venv / "bin"), base.get("PATH", "")])
        return {**base, "PATH": path, **extra}

    def run(self, *argv: str | Path, cwd: Path, timeout: float, **extra: str) -> str:
        """Run a command of the virtualenv; its output, once it succeeded."""
        result = subprocess.run(
            [str(a) for a in argv],
            cwd=cwd,
            env=self.env(**extra),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
        return result.stdout


def site_packages() -> str:
    """The running interpreter's site-packages (where the dependencies are), on its sys.path."""
    purelib = sysconfig.get_paths()["purelib"]
    assert purelib in sys.path, (purelib, sys.path)
    return purelib


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The wheel built from a copy of the sources, installed in a fresh virtualenv."""
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"  # a copy: the build leaves nothing behind in the checkout
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for package in PACKAGES:
        shutil.copytree(
            ROOT / package,
            source / package,
            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"),
        )
    dist = work / "dist"
    build_wheels(dist, source / "consumer", source)
    (wheel,) = dist.glob("highwater-*.whl")
    (consumer,) = dist.glob("highwater_consumer-*.whl")
    venv = work / "venv"
    fresh_venv(venv, [consumer, wheel], Path(site_packages()))
    return Installed(venv, wheel)


def test_the_installed_package_is_the_wheels_and_keeps_its_jars_in_the_users_cache(
    installed: Installed, tmp_path: Path
) -> None:
    probe = (
        "import json, pipeline, pyspark, schemas\n"
        "from pipeline.runtime import jars\n"
        "print(json.dumps([pipeline.__file__, schemas.__file__, str(jars.jars_root()), "
        "str(jars.WalkJar().module)]))"
    )
    home = tmp_path / "home"
    out = installed.run(installed.python, "-c", probe, cwd=tmp_path, timeout=60, HOME=str(home))
    module, contract, root, walk = json.loads(out)
    for found in (module, contract):  # both wheels' packages, from the virtualenv
        assert Path(found).is_relative_to(installed.venv)
        assert not Path(found).is_relative_to(ROOT)
    assert Path(root) == home / ".cache" / "highwater" / "jars"
    sources = sorted(p.relative_to(walk).as_posix() for p in Path(walk).rglob("*.*"))
    expected = sorted(
        p.relative_to(ROOT / "pipeline/jvm/walk").as_posix()
        for p in (ROOT / "pipeline/jvm/walk").rglob("*.*")
        if "src/test" not in p.as_posix()
    )
    assert sources == expected  # the POM and every main source; not the JUnit tests
    assert "pom.xml" in sources


def produce(bootstrap: str, topic: str, records: list[tuple[int, bytes | None, bytes]]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for partition, key, value in records:
        producer.produce(topic, value, key, partition=partition)
    assert producer.flush(30) == 0


def test_the_installed_command_fetches_the_jars_and_runs_a_changefeed(
    installed: Installed, kafka_bootstrap: str, unique_name, tmp_path: Path
) -> None:
    jars = tmp_path / "jars"
    started = time.monotonic()
    out = installed.run(
        installed.highwater, "fetch-jars", cwd=tmp_path, timeout=600, HIGHWATER_JARS_DIR=str(jars)
    )
    fetched = time.monotonic() - started
    assert out.splitlines() == [
        f"spark jars: fetched into {jars / 'spark'}",
        f"walk jars: fetched into {jars / 'walk'}",
    ]
    assert (jars / "walk" / "highwater-walk.jar").is_file()
    assert not (jars / "broker").exists()  # the development tools' jars are not fetched

    source = unique_name("src")
    changes = {
        (0, b"[1]"): b'{"after":{"id":1,"name":"caf\\u00e9 \xc3\xa9"},"updated":"'
        + T.format(1).encode()
        + b'"}',
        (0, b"[2]"): b'{"after":{"id":2,"n":-0.50e+3},"updated":"' + T.format(2).encode() + b'"}',
        (1, b"[3]"): b'{"after":null,"updated":"' + T.format(3).encode() + b'"}',
    }
    resolved = T.format(9)
    marker = json.dumps({"resolved": resolved}).encode()
    produce(
        kafka_bootstrap,
        source,
        [*((p, k, v) for (p, k), v in changes.items()), (0, None, marker), (1, None, marker)],
    )
    changefeed_id = unique_name("cf")
    config = tmp_path / "cf.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "changefeed_id": changefeed_id,
                "kafka": {"bootstrap_servers": kafka_bootstrap},
                "sources": [{"topic": source, "table": "orders"}],
                "sink": {"topic_prefix": changefeed_id + ".", "partitions": 2},
                "cursor": "0.0000000000",
                "encoder": {"updated": True},
                "resolved": {"interval": "0s"},
                "spark": {
                    "master": "local[1]",
                    "conf": {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "1"},
                    "trigger": {"available_now": True},
                },
            }
        ),
        encoding="utf-8",
    )
    started = time.monotonic()
    installed.run(
        installed.highwater,
        "run",
        "--config",
        config,
        cwd=tmp_path,
        timeout=600,
        HIGHWATER_JARS_DIR=str(jars),
        HIGHWATER_STATE_DIR=str(tmp_path / "state"),
    )
    ran = time.monotonic() - started
    print(f"fetch-jars {fetched:.1f} s, run {ran:.1f} s")

    output = read_output(kafka_bootstrap, changefeed_id + ".orders")
    # the values pass on byte for byte (numbers, escapes, UTF-8 as they came); keys compact
    assert sorted((m.key, m.value) for m in output.rows) == sorted(
        (k, v) for (_, k), v in changes.items()
    )
    assert sorted(json.loads(m.value)["resolved"] for m in output.markers) == [resolved] * 2
    assert sorted(m.partition for m in output.markers) == [0, 1]
