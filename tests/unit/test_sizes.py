"""No module over 500 lines, no class over 250 and no function over 60 in the product's packages.

``pipeline/dev`` (development tools) aside. An exception is named in the layout page's "Size
limits" (``docs/develop/layout.md``), ``path::Qualified.name — reason``; the test holds the
page to it:
every exception named there must still exist and still be over its limit (a list that
outlives its reasons is noise), and every one over a limit must be named there.
"""

import ast
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
LAYOUT = "docs/develop/layout.md"  # its "Size limits" name the exceptions
SCOPE = ("pipeline", "encoders", "sinks", "schemas", "highwater_consumer")
LEFT_OUT = ("pipeline/dev/",)
MAX_MODULE, MAX_CLASS, MAX_FUNCTION = 500, 250, 60
# Over a limit and being split by another change under way (issue 51's size rule): each entry
# leaves this list with the change that brings it under its limit. A module by its path, a
# class or function as ``path::Qualified.name``.
EXCEPTION = re.compile(r"^- `(?P<path>[\w/]+\.py)::(?P<name>[\w.]+)` — (?P<reason>\S.{20,})$")


def sizes() -> dict[str, tuple[str, int]]:
    """``path::Qualified.name`` -> (kind, lines) of every class and function in scope."""
    found: dict[str, tuple[str, int]] = {}

    def visit(node: ast.AST, path: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                kind = "class" if isinstance(child, ast.ClassDef) else "function"
                assert child.end_lineno is not None
                found[f"{path}::{name}"] = (kind, child.end_lineno - child.lineno + 1)
                visit(child, path, name + ".")
            else:
                visit(child, path, prefix)

    for package in SCOPE:
        for file in sorted((ROOT / package).rglob("*.py")):
            path = file.relative_to(ROOT).as_posix()
            if not path.startswith(LEFT_OUT):
                visit(ast.parse(file.read_text(encoding="utf-8")), path, "")
    return found


def module_sizes() -> dict[str, int]:
    """``path`` -> lines of every module in scope."""
    return {
        file.relative_to(ROOT).as_posix(): len(file.read_text(encoding="utf-8").splitlines())
        for package in SCOPE
        for file in sorted((ROOT / package).rglob("*.py"))
        if not file.relative_to(ROOT).as_posix().startswith(LEFT_OUT)
    }


def over(kind: str, lines: int) -> bool:
    limit = {"module": MAX_MODULE, "class": MAX_CLASS}.get(kind, MAX_FUNCTION)
    return lines > limit


def named_exceptions() -> dict[str, str]:
    """The exceptions the layout page names, with their reasons."""
    section = (ROOT / LAYOUT).read_text(encoding="utf-8")
    assert "Size limits" in section, f"{LAYOUT} lost its size limits"
    return {
        f"{m['path']}::{m['name']}": m["reason"]
        for m in map(EXCEPTION.match, section.splitlines())
        if m is not None
    }


def test_the_measure_sees_classes_functions_and_methods() -> None:
    found = sizes()
    assert found["pipeline/core/coordinator/changefeed.py::Changefeed"][0] == "class"
    assert found["pipeline/core/coordinator/changefeed.py::Changefeed._process"][0] == "function"
    assert found["pipeline/core/coordinator/changefeed.py::run"][0] == "function"
    assert not any(path.startswith("pipeline/dev/") for path in found)


def test_no_module_over_500_lines() -> None:
    offenders = {
        f"{path} ({lines} lines)" for path, lines in module_sizes().items() if over("module", lines)
    }
    assert not offenders, (
        f"modules over {MAX_MODULE} lines (give a concern that grew inside one its own "
        f"module): {sorted(offenders)}"
    )


def test_no_class_over_250_lines_and_no_function_over_60() -> None:
    allowed = set(named_exceptions())
    offenders = {
        f"{name} ({kind}, {lines} lines)"
        for name, (kind, lines) in sizes().items()
        if over(kind, lines) and name not in allowed
    }
    assert not offenders, (
        "over the size limits (split it, or name it with its reason in the layout page's "
        f"'Size limits'): {sorted(offenders)}"
    )


def test_every_named_exception_is_still_one() -> None:
    found = sizes()
    for name in named_exceptions():
        assert name in found, f"{LAYOUT} names {name} as a size exception; it is gone"
        assert over(*found[name]), f"{name} is within the limits now: drop it from {LAYOUT}"
