"""The layering is a contract: every arrow between our packages and wings points down.

=====================  =====================================================================
``schemas/``           nothing of ours; no Spark
``encoders/``          ``schemas``; no Spark
``sinks/``             ``schemas``, ``encoders``
``pipeline/config/`` ``schemas``, ``encoders``
``pipeline/core/``     the above; inside it, rooms (below)
``pipeline/runtime/``  the above and ``core``
``pipeline/control/``  the above and ``runtime``
``pipeline/iceberg/``  the above but ``control``: the Spark engine of ``highwater apply``
``pipeline/cli.py``,   everything but ``pipeline/dev/`` (which plugs into the command through
``pipeline/job.py``    an entry point)
``pipeline/dev/``      everything; nothing of the product imports it
``highwater_consumer`` ``schemas`` (the consumer library: no Spark, no pipeline, no encoders)
=====================  =====================================================================

``pipeline/core/`` is rooms, sub-packages named for what they own (``pipeline/core/__init__.py``
says what each holds), in an order of their own: a room imports the rooms before it, never one
after it, type-only imports included, and another room only through its ``__init__``, taking
only what that room's ``__all__`` names (a room's modules import each other directly):

===============  ==========================================================================
``sources``      the source adapters
``ledger``       the frontier, the checkpoint record, the scan's bookkeeping, the records
``batch``        a micro-batch written: the driver↔executor contract, the loop, the walk
``resolved``     resolved times from beside the stream (Debezium's transaction topics)
``evolution``    output schemas that follow their tables
``scan``         the initial scan on the executors, and its statement time
``progress``     where a run stands, its exactly-once claim, safepoints, the policy
``operators``    job status, metrics, observers; the spec, pause and stop, updates
``coordinator``  the coordinator on the driver: set-up, checkpoints, scans, the query
===============  ==========================================================================

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
    "pipeline.iceberg": {"pipeline.control", "pipeline.dev", *ENTRY_POINTS},
    "pipeline.cli": {"pipeline.dev", "pipeline.job"},
    "pipeline.job": {"pipeline.dev", "pipeline.cli"},
    "highwater_consumer": {"pipeline", "sinks", "encoders", "pyspark"},
}
ALLOWED_WITHIN = {"pipeline.config": {"pipeline.config"}}
CORE = ROOT / "pipeline" / "core"
# pipeline/core's rooms, bottom to top: each imports only those before it
ROOMS = (
    "sources",
    "ledger",
    "batch",
    "resolved",
    "evolution",
    "scan",
    "progress",
    "operators",
    "coordinator",
)


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


def taken(path: Path) -> set[tuple[str, str]]:
    """(module, name) for every name ``path`` takes with ``from module import name``."""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.update((module, alias.name) for alias in node.names)
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
    # pipeline/ itself holds only the config (a package), the two entry points and the wings
    top = {p.name for p in (ROOT / "pipeline").glob("*.py")}
    assert top == {"__init__.py", "cli.py", "job.py"}
    assert (ROOT / "pipeline" / "config" / "__init__.py").is_file()


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
    # a check of the checker: coordinator/changefeed.py imports its neighbours relatively, the
    # rooms below through their fronts; scan_driver.py the operators' room for its types only
    changefeed = CORE / "coordinator" / "changefeed.py"
    imports = imported_modules(changefeed)
    assert {
        "pipeline.core.progress",
        "pipeline.core.batch",
        "pipeline.core.coordinator.durable",
        "pipeline.config",
    } <= imports
    assert ("pipeline.core.progress", "Policy") in taken(changefeed)
    assert ("pipeline.core.batch", "faults") in taken(CORE / "coordinator" / "durable.py")
    assert "pipeline.core.operators" in imported_modules(CORE / "coordinator" / "scan_driver.py")
    consumer = imported_modules(ROOT / "highwater_consumer" / "consumer.py")
    assert {"highwater_consumer.windows", "schemas.hlc"} <= consumer


def test_importing_the_pure_layers_and_the_command_does_not_load_spark() -> None:
    code = (
        "import sys, schemas.errors, schemas.hlc, encoders, sinks.partitioning, "
        "pipeline.config, pipeline.core.progress.policy, pipeline.cli, highwater_consumer; "
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
    assert wanted == [f"highwater-consumer[postgres,iceberg]=={consumer['version']}"]
    # an application that reads windows installs none of these (psycopg: the [postgres] extra;
    # pyarrow: the [arrow] extra's columnar windows, which `apply` to PostgreSQL uses)
    heavy = {"pyspark", "fastapi", "uvicorn", "psycopg", "pydantic", "pyiceberg", "pyarrow"}
    assert not {requirement_name(r) for r in consumer["dependencies"]} & heavy
    assert [requirement_name(r) for r in consumer["optional-dependencies"]["postgres"]] == [
        "psycopg",
        "pyarrow",
    ]
    assert [requirement_name(r) for r in consumer["optional-dependencies"]["arrow"]] == ["pyarrow"]
    assert "pyiceberg" in [
        requirement_name(r) for r in consumer["optional-dependencies"]["iceberg"]
    ]


def room_of(module: str) -> str | None:
    """The room of a module of ``pipeline/core`` (None: ``pipeline.core`` itself, or outside)."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["pipeline", "core"] and len(parts) > 2 else None


def exported(room: str) -> set[str]:
    """What a room's ``__init__`` names in its ``__all__``: what the rooms above may use."""
    tree = ast.parse((CORE / room / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return set(ast.literal_eval(node.value))
    return set()


def room_files() -> list[Path]:
    return sorted(p for p in CORE.rglob("*.py") if p.parent != CORE)


def test_pipeline_core_is_its_rooms_in_order() -> None:
    folders = {p.name for p in CORE.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(ROOMS)
    assert {p.name for p in CORE.glob("*.py")} == {"__init__.py"}  # every module is in a room
    assert all((CORE / room / "__init__.py").is_file() for room in ROOMS)
    # pipeline/core/__init__.py names the rooms in their order and imports none of them
    init = CORE / "__init__.py"
    assert not imported_modules(init)
    docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
    assert docstring is not None
    places = [docstring.index(f"``{room}``") for room in ROOMS]
    assert places == sorted(places)
    for room in ROOMS:
        tree = ast.parse((CORE / room / "__init__.py").read_text(encoding="utf-8"))
        assert ast.get_docstring(tree), f"pipeline/core/{room}/__init__.py says what it owns"


@pytest.mark.parametrize("path", room_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_rooms_import_only_the_rooms_below_through_their_front(path: Path) -> None:
    module = module_name(path)
    room = room_of(module)
    assert room in ROOMS, f"{module} is in no room"
    below = set(ROOMS[: ROOMS.index(room)])
    modules = imported_modules(path)
    up = sorted(m for m in modules if room_of(m) not in {None, room, *below})
    assert not up, f"{path.relative_to(ROOT)} ({room}) imports a room above it: {up}"
    # another room through its __init__ alone; its own room's modules directly, never through
    # its own __init__ (which may be half run when the module is imported)
    past = sorted(
        m
        for m in modules
        if (room_of(m) in below and m != f"pipeline.core.{room_of(m)}")
        or (m == f"pipeline.core.{room}" and path.name != "__init__.py")
    )
    assert not past, f"{path.relative_to(ROOT)} ({room}) goes past a room's front: {past}"
    hidden = sorted(
        f"{m}.{name}"
        for m, name in taken(path)
        if m == "pipeline.core" or (room_of(m) in below and name not in exported(room_of(m)))
    )
    assert not hidden, f"{path.relative_to(ROOT)} takes what no __all__ offers: {hidden}"
