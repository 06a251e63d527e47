"""The layering is a contract: schemas and encoders stay free of Spark and of the pipeline."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# package -> packages of ours it must never import
FORBIDDEN = {
    "schemas": {"encoders", "sinks", "pipeline", "pyspark"},
    "encoders": {"sinks", "pipeline", "pyspark"},
    "sinks": {"pipeline"},
}


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_respect_the_layers(package: str) -> None:
    for path in sorted((ROOT / package).rglob("*.py")):
        bad = imported_roots(path) & FORBIDDEN[package]
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_importing_the_pure_layers_does_not_load_spark() -> None:
    code = (
        "import sys, schemas.errors, schemas.hlc, encoders, sinks.partitioning, "
        "pipeline.config; print('pyspark' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "False"
