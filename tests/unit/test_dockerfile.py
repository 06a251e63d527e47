"""docker/Dockerfile in step with the project: what it installs, copies and runs.

No Docker engine here builds it, so its parts are checked: a JDK (javac) and Maven for
``highwater fetch-jars``, every package the wheel is made of, the wheel installed and the
run-time fetch command the CLI has.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import setuptools

from pipeline import cli

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "docker" / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` of each instruction, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text(encoding="utf-8"))
    found = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            found.append((op.upper(), rest.strip()))
    return found


def run_commands() -> list[list[str]]:
    """Each command of each RUN (split at ``&&``)."""
    return [
        shlex.split(command)
        for op, rest in instructions()
        if op == "RUN"
        for command in rest.split("&&")
    ]


def test_it_installs_a_jdk_with_javac_at_the_walks_release_and_maven() -> None:
    packages = {
        arg
        for argv in run_commands()
        if argv[:2] == ["apt-get", "install"]
        for arg in argv[2:]
        if not arg.startswith("-")
    }
    jdks = [p for p in packages if re.fullmatch(r"openjdk-\d+-jdk(-headless)?", p)]
    assert jdks, f"no JDK (javac) among {sorted(packages)}: a JRE cannot build the walk"
    assert not [p for p in packages if "-jre" in p]
    pom = (ROOT / "pipeline" / "jvm" / "walk" / "pom.xml").read_text(encoding="utf-8")
    release = re.search(r"<maven.compiler.release>(\d+)<", pom)
    assert release is not None
    for jdk in jdks:
        assert int(re.findall(r"\d+", jdk)[0]) >= int(release.group(1)), jdk
    assert "maven" in packages


def test_it_copies_every_package_the_wheels_are_made_of() -> None:
    tomllib = pytest.importorskip("tomllib")
    copied = {
        source.rstrip("/")
        for op, rest in instructions()
        if op == "COPY"
        for source in rest.split()[:-1]
    }

    def is_copied(path: str) -> bool:  # itself, or a folder holding it
        parts = path.split("/")
        return any("/".join(parts[:n]) in copied for n in range(1, len(parts) + 1))

    made_of = {}
    for folder in (ROOT, ROOT / "consumer"):  # highwater, highwater-consumer
        project = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))
        include = project["tool"]["setuptools"]["packages"]["find"]["include"]
        found = setuptools.find_packages(str(ROOT), include=include)  # all at the top
        made_of[project["project"]["name"]] = {p.split(".")[0] for p in found}
        prefix = "" if folder == ROOT else f"{folder.name}/"
        wanted = list(made_of[project["project"]["name"]])
        wanted += [f"{prefix}pyproject.toml", f"{prefix}{project['project']['readme']}"]
        assert all(map(is_copied, wanted)), f"not copied: {[w for w in wanted if not is_copied(w)]}"
    assert made_of == {
        "highwater": {"pipeline", "encoders", "sinks"},
        "highwater-consumer": {"schemas", "highwater_consumer"},
    }
    builds = [c for c in run_commands() if c[:2] == ["pip", "wheel"]]
    assert [c[-2:] for c in builds] == [["./consumer", "."]]  # both wheels, one build


def test_it_installs_the_wheel_then_fetches_the_run_time_jars() -> None:
    commands = run_commands()
    wheel = next(i for i, c in enumerate(commands) if c[:3] == ["pip", "wheel", "--no-cache-dir"])
    install = next(i for i, c in enumerate(commands) if c[:2] == ["pip", "install"])
    dist = commands[wheel][commands[wheel].index("-w") + 1]
    assert commands[install][-1].endswith(".whl")
    assert commands[install][-1].startswith(dist)
    assert f"{dist}/highwater_consumer-*.whl" in commands[install]  # highwater requires it
    fetches = [(i, c) for i, c in enumerate(commands) if c[0] == "highwater"]
    assert [c for _, c in fetches] == [["highwater", "fetch-jars"]]
    assert wheel < install < fetches[0][0]
    # the command exists in the run-time CLI (not the dev tools') and is its fetch
    args = cli.build_parser().parse_args(fetches[0][1][1:])
    assert args.handler is cli._fetch_jars
