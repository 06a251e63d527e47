"""The Python side reaches our Java through one module, ``pipeline/core/batch/jvm.py``."""

import re
from pathlib import Path

from pipeline.core.batch import jvm

ROOT = Path(__file__).resolve().parents[2]
FACADE = ROOT / "pipeline" / "core" / "batch" / "jvm.py"
SOURCES = ROOT / "pipeline" / "jvm" / "walk" / "src" / "main" / "java"


def python_modules() -> list[Path]:
    return sorted(
        p
        for d in ("pipeline", "encoders", "sinks", "schemas", "highwater_consumer")
        for p in (ROOT / d).rglob("*.py")
    )


def test_only_the_facade_names_our_java_or_the_py4j_gateway() -> None:
    # our packages by name, attribute chains through the gateway, the gateway itself
    pattern = re.compile(r"dev\.highwater\.|\bjvm\.dev\b|\._jvm\b")
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in python_modules()
        if path != FACADE
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert offenders == []
    assert pattern.search(FACADE.read_text(encoding="utf-8"))


def test_the_classes_the_facade_calls_are_our_java_sources() -> None:
    for name in (jvm.SINK, jvm.WALK):
        assert (SOURCES / (name.replace(".", "/") + ".java")).is_file(), name
    for name, method in ((jvm.SINK, "write"), (jvm.WALK, "write"), (jvm.WALK, "walk")):
        source = (SOURCES / (name.replace(".", "/") + ".java")).read_text(encoding="utf-8")
        assert re.search(rf"public static \S+(<[^>]*>)? {method}\(", source), (name, method)
