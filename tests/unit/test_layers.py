"""The layering is a contract: every arrow between our packages and wings points down.

=====================  =====================================================================
``schemas/``           nothing of ours; no Spark
``encoders/``          ``schemas``; no Spark
``sinks/``             ``schemas``, ``encoders``
``pipeline/config.py`` ``schemas``, ``encoders``
``pipeline/core/``     the above
``pipeline/runtime/``  the above and ``core``
``pipeline/control/``  the above and ``runtime``
``pipeline/cli.py``,   everything but ``pipeline/dev/`` (which plugs into the command through
``pipeline/job.py``    an entry point)
``pipeline/dev/``      everything; nothing of the product imports it
``highwater_consumer`` ``schemas`` (the consumer library: no Spark, no pipeline, no encoders)
=====================  =====================================================================

Two distributions: ``highwater-consumer`` (``consumer/``: ``schemas`` and
``highwater_consumer``) and ``highwater`` (the rest), which requires it. The consumer's
packages import nothing but each other, the standard library and the consumer's declared
dependencies, so an application reading windows installs no Spark.
"""

import ast
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONSUMER = ROOT / "consumer"  # the highwater-consumer distribution's pyproject
# each package of ours -> the folder holding it (all at the top: the layout users asked for)
PACKAGES = dict.fromkeys(("schemas", "highwater_consumer", "encoders", "sinks", "pipeline"), ROOT)
ENTRY_POINTS = {"pipeline.cli", "pipeline.job"}
# a part of the tree -> the parts of ours it must never import (prefixes of module names)
FORBIDDEN = {
    "schemas": {"encoders", "sinks", "pipeline", "pyspark"},
    "encoders": {"sinks", "pipeline", "pyspark"},
    "sinks": {"pipeline"},
    "pipeline.config": {"pipeline", "sinks"},
    "pipeline.core": {"pipeline.runtime", "pipeline.control", "pipeline.dev", *ENTRY_POINTS},
    "pipeline.runtime": {"pipeline.control", "pipeline.dev", *ENTRY_POINTS},
    "pipeline.control": {"pipeline.dev", *ENTRY_POINTS},
    "pipeline.cli": {"pipeline.dev", "pipeline.job"},
    "pipeline.job": {"pipeline.dev", "pipeline.cli"},
    "highwater_consumer": {"pipeline", "sinks", "encoders", "pyspark"},
}
ALLOWED_WITHIN = {"pipeline.config": {"pipeline.config"}}


def module_name(path: Path) -> str:
    base = next(f for p, f in PACKAGES.items() if path.is_relative_to(f / p))
    parts = path.relative_to(base).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, relative imports resolved, at any depth in the file."""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            if node.module:
                found.add(module)
            else:  # from . import x: x is a module of that package
                found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def rule_for(module: str) -> tuple[str, set[str]] | None:
    """The most specific rule that covers ``module``."""
    matches = [part for part in FORBIDDEN if module == part or module.startswith(part + ".")]
    if not matches:
        return None
    part = max(matches, key=len)
    return part, FORBIDDEN[part]


def covered(module: str, prefixes: set[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def our_files() -> list[Path]:
    return sorted(p for package, base in PACKAGES.items() for p in (base / package).rglob("*.py"))


def test_every_module_of_ours_is_covered_by_a_rule_or_is_dev() -> None:
    loose = [
        module_name(p)
        for p in our_files()
        if rule_for(module_name(p)) is None
        and not covered(module_name(p), {"pipeline.dev", "pipeline"})
    ]
    assert not loose
    # pipeline/ itself holds only the config, the two entry points and the wings
    top = {p.name for p in (ROOT / "pipeline").glob("*.py")}
    assert top == {"__init__.py", "config.py", "cli.py", "job.py"}


@pytest.mark.parametrize("path", our_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down(path: Path) -> None:
    module = module_name(path)
    rule = rule_for(module)
    if rule is None:
        return  # pipeline/dev/ and pipeline/__init__.py
    part, forbidden = rule
    allowed = ALLOWED_WITHIN.get(part, set())
    bad = sorted(
        m for m in imported_modules(path) if covered(m, forbidden) and not covered(m, allowed)
    )
    assert not bad, f"{path.relative_to(ROOT)} ({part}) imports {bad}"


def test_nothing_of_the_product_imports_the_dev_tools() -> None:
    for path in our_files():
        if covered(module_name(path), {"pipeline.dev"}):
            continue
        dev = sorted(m for m in imported_modules(path) if covered(m, {"pipeline.dev"}))
        assert not dev, f"{path.relative_to(ROOT)} imports {dev}"


def test_the_rules_see_relative_imports() -> None:
    # a check of the checker: core/changefeed.py imports its neighbours relatively
    imports = imported_modules(ROOT / "pipeline" / "core" / "changefeed.py")
    assert {"pipeline.core.policy", "pipeline.core.faults", "pipeline.config"} <= imports
    consumer = imported_modules(ROOT / "highwater_consumer" / "consumer.py")
    assert {"highwater_consumer.windows", "schemas.hlc"} <= consumer


def test_importing_the_pure_layers_and_the_command_does_not_load_spark() -> None:
    code = (
        "import sys, schemas.errors, schemas.hlc, encoders, sinks.partitioning, "
        "pipeline.config, pipeline.core.policy, pipeline.cli, highwater_consumer; "
        "print('pyspark' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "False"


def pyproject(folder: Path) -> dict:  # type: ignore[type-arg]
    tomllib = pytest.importorskip("tomllib")
    return tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))


def project(folder: Path) -> dict:  # type: ignore[type-arg]
    return pyproject(folder)["project"]


def shipped(folder: Path) -> set[str]:
    """The top-level packages the distribution at ``folder`` ships (its find's includes)."""
    find = pyproject(folder)["tool"]["setuptools"]["packages"]["find"]
    return {pattern.rstrip("*") for pattern in find["include"]}


def requirement_name(requirement: str) -> str:
    name = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert name is not None, requirement
    return re.sub(r"[-_.]+", "-", name.group()).lower()


def test_the_consumer_distribution_imports_only_itself_and_what_it_declares() -> None:
    """What highwater-consumer's modules import is theirs, the standard library's or declared.

    A module of a package of ours the distribution does not ship (pipeline, encoders, sinks)
    or of a library it does not require (pyspark, pydantic, …) would fail where the consumer
    is installed alone; tests/integration/test_consumer_wheel.py installs it so.
    """
    consumer = project(CONSUMER)
    declared = {requirement_name(r) for r in consumer["dependencies"]}
    extras = {requirement_name(r) for rs in consumer["optional-dependencies"].values() for r in rs}
    ours = shipped(CONSUMER)
    owners = metadata.packages_distributions()
    undeclared = {}
    for path in our_files():
        if module_name(path).split(".")[0] not in ours:
            continue
        for module in imported_modules(path):
            top = module.split(".")[0]
            if top in ours or top in sys.stdlib_module_names or top == "__future__":
                continue
            dists = {requirement_name(d) for d in owners.get(top, [])}
            if not dists & (declared | extras):
                undeclared[f"{module_name(path)}: {module}"] = sorted(dists)
    assert undeclared == {}


def test_the_two_distributions_ship_apart_and_the_pipeline_requires_the_consumer() -> None:
    consumer, pipeline = project(CONSUMER), project(ROOT)
    assert shipped(CONSUMER) == {"schemas", "highwater_consumer"}
    assert shipped(ROOT) == {"pipeline", "encoders", "sinks"}  # together: every package of ours
    assert shipped(CONSUMER) | shipped(ROOT) == set(PACKAGES)
    # exactly the consumer's version: the two are built from this repository together
    wanted = [r for r in pipeline["dependencies"] if requirement_name(r) == "highwater-consumer"]
    assert wanted == [f"highwater-consumer[postgres]=={consumer['version']}"]
    # an application that reads windows installs none of these (psycopg: the [postgres] extra)
    heavy = {"pyspark", "fastapi", "uvicorn", "psycopg", "pydantic"}
    assert not {requirement_name(r) for r in consumer["dependencies"]} & heavy
    assert [requirement_name(r) for r in consumer["optional-dependencies"]["postgres"]] == [
        "psycopg"
    ]
