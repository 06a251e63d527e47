"""The Python side reaches our Java through one module, ``pipeline/core/batch/jvm.py``."""

import ast
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


def _java(name: str) -> Path:
    return SOURCES / (name.replace(".", "/") + ".java")


def entry_points() -> set[tuple[str, str, int]]:
    """Every call the facade makes into our Java: (class, static method, arguments).

    Read from ``jvm.py`` itself: a function's ``x = _class(spark, CLASS)``, then ``x.method(…)``.
    """
    tree = ast.parse(FACADE.read_text(encoding="utf-8"))
    calls = set()
    for function in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        classes = {}
        for node in ast.walk(function):
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name)
                and node.value.func.id == "_class"
            ):
                target, named = node.targets[0], node.value.args[1]
                assert isinstance(target, ast.Name)
                assert isinstance(named, ast.Name)
                classes[target.id] = getattr(jvm, named.id)
        for node in ast.walk(function):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in classes
            ):
                calls.add((classes[node.func.value.id], node.func.attr, len(node.args)))
    return calls


def _parameters(source: str, method: str) -> list[int]:
    """How many parameters each ``public static`` method ``method`` of ``source`` takes."""
    counts = []
    for found in re.finditer(rf"public static [^(;=]*?\b{method}\(([^)]*)\)", source):
        declared = found.group(1)
        while "<" in declared:  # generics' commas are not parameters'
            declared = re.sub(r"<[^<>]*>", "", declared)
        counts.append(len([p for p in declared.split(",") if p.strip()]))
    return counts


def test_every_class_the_facade_names_is_one_of_our_java_sources() -> None:
    named = {v for k, v in vars(jvm).items() if k.isupper() and isinstance(v, str)}
    assert named == {jvm.SINK, jvm.WALK, jvm.SCAN, jvm.PLACEMENT, jvm.EXTRA_HEADERS}
    for name in named:
        assert _java(name).is_file(), name
    # and each one is called, but the interceptor Kafka's producer makes from its settings
    assert {name for name, _, _ in entry_points()} == named - {jvm.EXTRA_HEADERS}


def test_every_entry_point_the_facade_calls_is_a_public_static_method_of_it() -> None:
    calls = entry_points()
    assert {(name, method) for name, method, _ in calls} == {
        (jvm.SINK, "write"),
        (jvm.WALK, "write"),
        (jvm.WALK, "walk"),
        (jvm.SCAN, "write"),
        (jvm.SCAN, "rows"),
        (jvm.PLACEMENT, "inPlace"),
    }
    for name, method, arguments in calls:
        source = _java(name).read_text(encoding="utf-8")
        assert arguments in _parameters(source, method), (name, method, arguments)
