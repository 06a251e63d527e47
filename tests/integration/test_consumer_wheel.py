"""The consumer library alone: its wheel, in a fresh virtualenv with no Spark, reads windows.

``highwater-consumer`` (``consumer/``) is built to a wheel and installed with no index into a
virtualenv outside the checkout. Its dependencies reach that virtualenv through a folder of
links to exactly the installed files of what its wheel requires (its ``Requires-Dist``,
resolved recursively through this interpreter's distributions; no extra), named by a path
line in a ``.pth`` file: pyspark, FastAPI, uvicorn, psycopg and Highwater's own pipeline are
not importable there. A changefeed (real Spark, the test broker) writes its output; a script
run by that virtualenv's Python finds it by the changefeed id and prints its windows.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
import zipfile
from email.parser import HeaderParser
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from pipeline.dev.generator import GeneratorSpec, write
from schemas.hlc import Hlc
from tests.integration.test_consumer import json_changefeed
from tests.support.kafka import consume_all
from tests.support.wheels import build_wheels, fresh_venv

ROOT = Path(__file__).resolve().parents[2]
CONSUMER = ROOT / "consumer"

# Reads every window up to R (argv: bootstrap, changefeed id, R, group); prints a line per row
# and per window's end, then which modules it loaded and where from.
SCRIPT = """
import json, sys

import highwater_consumer, schemas
from highwater_consumer import ChangefeedConsumer, Output
from schemas.hlc import Hlc

bootstrap, changefeed, until, group = sys.argv[1:5]
consumer = ChangefeedConsumer(Output.of_changefeed(bootstrap, changefeed), group)
with consumer:  # the broker is reached here, not by the constructor
    for window in consumer.windows(until=Hlc.parse(until), idle=60):
        for row in window.rows:
            line = {"key": row.key.decode(), "updated": str(row.updated), "table": row.table}
            print(json.dumps({**line, "value": row.value.decode()}))
        if window.last:
            print(json.dumps({"resolved": str(window.resolved)}))
        consumer.ack(window)
loaded = [m for m in ("pyspark", "pipeline", "encoders", "sinks", "psycopg") if m in sys.modules]
print(json.dumps({"loaded": loaded, "files": [highwater_consumer.__file__, schemas.__file__]}))
"""


def closure(requirements: list[str]) -> list[metadata.Distribution]:
    """The installed distributions ``requirements`` need, recursively (extras they name)."""
    found: dict[str, metadata.Distribution] = {}
    pending = [(Requirement(r), "") for r in requirements]
    while pending:
        requirement, extra = pending.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
            continue
        dist = metadata.distribution(requirement.name)  # missing here: the test cannot run
        key = f"{dist.metadata['Name'].lower()}[{','.join(sorted(requirement.extras))}]"
        if key in found:
            continue
        found[key] = dist
        pending += [(Requirement(r), "") for r in dist.requires or []]
        for wanted in requirement.extras:
            pending += [(Requirement(r), wanted) for r in dist.requires or []]
    return list({d.metadata["Name"]: d for d in found.values()}.values())


def link_installed(dists: list[metadata.Distribution], folder: Path) -> set[str]:
    """Links in ``folder`` to each distribution's top-level files and its metadata."""
    folder.mkdir()
    for dist in dists:
        tops = {f.parts[0] for f in dist.files or [] if f.parts[0] != ".."}
        for top in tops - {"__pycache__"}:
            source = Path(str(dist.locate_file(top)))
            if source.exists() and not (folder / top).exists():
                (folder / top).symlink_to(source)
    return {p.name for p in folder.iterdir()}


@pytest.fixture(scope="module")
def alone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Python of a fresh virtualenv holding the consumer's wheel and what it requires."""
    work = tmp_path_factory.mktemp("consumer-wheel")
    source = work / "source"  # a copy: the build leaves nothing behind in the checkout
    for folder in ("consumer", "schemas", "highwater_consumer"):  # its packages sit beside it
        shutil.copytree(
            ROOT / folder,
            source / folder,
            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "*.so"),
        )
    dist = work / "dist"
    build_wheels(dist, source / "consumer")
    (wheel,) = dist.glob("highwater_consumer-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        tops = {n.split("/")[0] for n in archive.namelist() if "dist-info" not in n}
        wheel_metadata = HeaderParser().parsestr(archive.read(name).decode())
    assert tops == {"highwater_consumer", "schemas"}
    with zipfile.ZipFile(wheel) as archive:  # the protobuf messages' source, as registered
        assert "schemas/highwater_changefeed.proto" in archive.namelist()
    # the columnar reader's C extension, built with the wheel (a C compiler is a system need)
    with zipfile.ZipFile(wheel) as archive:
        assert [n for n in archive.namelist() if n.startswith("highwater_consumer/_rdbatch.")]

    # what an application that reads windows installs: nothing of Spark, the server or psycopg
    declared = [Requirement(r) for r in wheel_metadata.get_all("Requires-Dist") or []]
    plain = {r.name.lower() for r in declared if r.marker is None}
    assert plain == {"confluent-kafka", "fastavro", "orjson", "protobuf"}
    assert not plain & {"pyspark", "fastapi", "uvicorn", "psycopg", "highwater"}
    extras = sorted((r.name, str(r.marker)) for r in declared if r.marker is not None)
    assert extras == [
        ("psycopg", 'extra == "postgres"'),
        ("pyarrow", 'extra == "arrow"'),
        ("pyarrow", 'extra == "iceberg"'),
        ("pyarrow", 'extra == "postgres"'),
        ("pyiceberg", 'extra == "iceberg"'),
    ]

    dists = closure([str(r) for r in declared if r.marker is None])
    linked = link_installed(dists, work / "deps")
    assert {"confluent_kafka", "fastavro", "orjson"} <= linked
    assert not linked & {"pyspark", "fastapi", "uvicorn", "psycopg", "pipeline", "pydantic"}
    return fresh_venv(work / "venv", [wheel], work / "deps")


def run(python: Path, *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python`` as a user of its virtualenv runs it: nothing of the checkout on its path."""
    return subprocess.run(
        [str(python), *argv],
        cwd=cwd,
        env={"PATH": f"{python.parent}:/usr/bin:/bin", "HOME": str(cwd)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_wheel_alone_has_no_spark_and_its_requirements_hold(
    alone: Path, tmp_path: Path
) -> None:
    for module in ("pyspark", "pipeline", "encoders", "psycopg", "fastapi"):
        missing = run(alone, "-c", f"import {module}", cwd=tmp_path)
        assert missing.returncode == 1, module
        assert f"No module named '{module}'" in missing.stderr, missing.stderr
    # every installed distribution's requirements are there (pip reads what the links carry)
    check = run(alone, "-m", "pip", "check", cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    # the applier needs its extra: a clear ImportError, nothing at import of the library
    probe = "import highwater_consumer, highwater_consumer.cli; import highwater_consumer.postgres"
    postgres = run(alone, "-c", probe, cwd=tmp_path)
    assert "No module named 'psycopg'" in postgres.stderr, postgres.stderr
    # the C reader loads without pyarrow; columnar windows need the [arrow] extra, and say so
    native = run(alone, "-c", "import highwater_consumer._rdbatch", cwd=tmp_path)
    assert native.returncode == 0, native.stderr
    columnar = run(alone, "-c", "import highwater_consumer.columnar", cwd=tmp_path)
    assert "No module named 'pyarrow'" in columnar.stderr, columnar.stderr


def test_the_wheel_alone_reads_a_changefeeds_windows(
    alone: Path, kafka_bootstrap: str, unique_name: Any, spark: Any, tmp_path: Path
) -> None:
    source = unique_name("src")
    spec = GeneratorSpec(topic=source, rows=300, partitions=2, resolved_every=100, seed=51)
    write(spec, {"bootstrap.servers": kafka_bootstrap})
    changefeed = json_changefeed(kafka_bootstrap, unique_name("cf"), source, spark)
    topic = f"{changefeed}.orders"
    records = consume_all(kafka_bootstrap, topic)
    written = {(m.key.decode(), json.loads(m.value)["updated"]): m.value for m in records if m.key}
    markers = {json.loads(m.value)["resolved"] for m in records if m.key is None}
    last = max(markers, key=Hlc.parse)

    script = tmp_path / "read_windows.py"
    script.write_text(SCRIPT, encoding="utf-8")
    group = f"wheel-{uuid.uuid4().hex[:8]}"
    out = run(alone, str(script), kafka_bootstrap, changefeed, last, group, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-4000:]
    *lines, modules = [json.loads(line) for line in out.stdout.splitlines()]

    assert modules["loaded"] == []  # no pyspark, pipeline, encoders, sinks or psycopg
    venv = alone.parent.parent
    assert all(Path(f).is_relative_to(venv) for f in modules["files"]), modules["files"]
    rows = [line for line in lines if "resolved" not in line]
    resolved = [line["resolved"] for line in lines if "resolved" in line]
    assert resolved, "no window"
    assert resolved == sorted(resolved, key=Hlc.parse)
    assert resolved[-1] == last
    assert set(resolved) <= markers  # each window's R is a marker the changefeed wrote
    # each change once, as written, in commit order, in the first window whose R covers it
    assert {(r["key"], r["updated"]): r["value"].encode() for r in rows} == written
    assert len(rows) == len(written)
    order = [(Hlc.parse(r["updated"]), r["table"], r["key"]) for r in rows]
    assert order == sorted(order)
    ends = iter(Hlc.parse(r) for r in resolved)
    below, above = next(ends), None
    for line in lines:
        if "resolved" in line:
            above, below = below, next(ends, below)
            continue
        updated = Hlc.parse(line["updated"])
        assert updated <= below
        assert above is None or updated > above
