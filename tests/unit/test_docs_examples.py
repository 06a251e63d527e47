"""Every command and YAML block in *Get started* and *How-to* runs, or is shown to parse.

The fenced blocks of those pages are read as a reader would copy them:

- a YAML block is a changefeed config. One included from a file (``--8<-- "path"``) is that
  file, read by ``load_config`` as ``highwater validate`` reads it; an inline block is parsed,
  and a fragment (no ``changefeed_id``) is validated merged into ``examples/orders.yaml``.
  A file invalid on purpose (``INVALID_ON_PURPOSE``) must be refused.
- a shell block (``sh``, ``bash``, ``shell``, ``console``; ``$ `` lines in a ``text`` block) is
  split into commands. ``highwater validate`` and ``highwater run … --dry-run`` run here, in
  process, from the checkout's root; when the page shows their output, it must be what they
  print. Every other ``highwater`` command is parsed by the real parser
  (``build_parser().parse_args``) and must be in ``NOT_RUN``, which says why it is not run here
  and where it is, if anywhere. A ``python -`` here-document is compiled.

The negative control feeds the same check a page with a mistyped flag, an unknown command, a
command in no list, an invalid config fragment and a transcript that is not what the command
prints, and every one is reported.
"""

from __future__ import annotations

import contextlib
import functools
import io
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from pipeline.cli import build_parser, main
from pipeline.config import load_config, parse_config
from schemas.errors import ConfigError
from schemas.hlc import parse_time

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").glob("get-started/*.md")) + sorted(
    (ROOT / "docs").glob("how-to/*.md")
)
SNIPPET_BASES = (ROOT, ROOT / "docs")  # mkdocs.yml: pymdownx.snippets base_path
BASE_CONFIG = ROOT / "examples" / "orders.yaml"  # what an inline fragment is merged into
SHELLS = {"sh", "bash", "shell", "console"}
HIGHWATER = {"highwater", ".venv/bin/highwater"}
PYTHON = {"python", "python3", ".venv/bin/python"}

FENCE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)"
    r"^(?P=indent)(?P=fence)[ \t]*$",
    re.M | re.S,
)
SNIPPET = re.compile(r'^--8<--\s+"(?P<path>[^"]+)"\s*$', re.M)

# Files a page shows being refused: the transcript beside them is checked too.
INVALID_ON_PURPOSE = {"examples/invalid.yaml": "first-changefeed.md shows validate refusing it"}


@dataclass(frozen=True)
class NotRun:
    """Why a command is only parsed here, and where it runs for real (if anywhere)."""

    reason: str
    elsewhere: str
    check: Callable[[list[str]], str | None] | None = None


def _make_target(words: list[str]) -> str | None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    missing = [t for t in words[1:] if not re.search(rf"^{re.escape(t)}:", makefile, re.M)]
    return f"no make target {missing}" if missing else None


def _local_package(words: list[str]) -> str | None:
    for word in words:
        if word.startswith("./"):
            folder = ROOT / word.split("[", 1)[0]
            if not (folder / "pyproject.toml").is_file():
                return f"{word}: no pyproject.toml there"
    return None


# Commands parsed but not run here, by their leading words. Each needs something the unit tier
# does not start (a broker, Spark, a database, a catalog server) or is the suite itself.
NOT_RUN: dict[tuple[str, ...], NotRun] = {
    ("make", "demo"): NotRun(
        "the demo: a broker, Spark and 20 s of live changes (highwater dev demo)",
        "by hand; the Makefile target is checked to exist",
        _make_target,
    ),
    ("make", "test"): NotRun("the suite itself", "make test", _make_target),
    ("pip",): NotRun(
        "installs into the reader's environment",
        "tests/integration/test_consumer_wheel.py builds ./consumer with pip wheel --no-deps "
        "and installs it into a fresh virtualenv",
        _local_package,
    ),
    ("highwater", "dev", "demo"): NotRun(
        "a broker, a registry or database, Spark and live changes",
        "by hand (make demo); its parts are integration tests (test_avro, test_mariadb)",
    ),
    ("highwater", "dev", "kafka", "start"): NotRun(
        "starts a broker", "tests/integration/test_embedded_broker.py runs dev kafka start"
    ),
    ("highwater", "dev", "kafka-cli"): NotRun(
        "Kafka's CLI against a running broker",
        "tests/integration/test_generator_on_kafka.py (console-consumer); "
        "tests/unit/test_cli.py runs it with no broker",
    ),
    ("highwater", "dev", "generate"): NotRun(
        "writes to a broker", "tests/integration/test_generator_on_kafka.py (its write())"
    ),
    ("highwater", "dev", "registry"): NotRun(
        "starts or stops the embedded schema registry",
        "tests/conftest.py starts the same EmbeddedRegistry for the Avro tests",
    ),
    ("highwater", "dev", "iceberg"): NotRun(
        "starts or stops a REST catalog server",
        "tests/integration/test_iceberg_rest.py runs dev iceberg start and stop",
    ),
    ("highwater", "run"): NotRun(
        "spark-submit (the same line with --dry-run runs here and prints the command)",
        "tests/integration/test_spark_end_to_end.py runs the printed command",
    ),
    ("highwater", "tail"): NotRun(
        "reads a changefeed's output from a broker", "tests/integration/test_consumer.py"
    ),
    ("highwater", "apply"): NotRun(
        "a broker and a database or catalog",
        "tests/integration/test_consumer_apply*.py, test_iceberg_schema_change.py",
    ),
    ("highwater", "server"): NotRun(
        "serves the API and runs changefeeds on a broker",
        "tests/integration/test_lifecycle.py starts it so (tests/support/process.py)",
    ),
    ("highwater", "changefeed"): NotRun(
        "reads and writes the jobs topic on a broker",
        "tests/integration/test_lifecycle.py (pause, update, resume), test_safepoints.py (query)",
    ),
    ("highwater", "safepoint"): NotRun(
        "reads and writes the safepoint topic on a broker",
        "tests/integration/test_safepoints.py (set, query, delete)",
    ),
    ("python", "-"): NotRun(
        "reads the Iceberg tables the demo applied; compiled here",
        "by hand after the demo; cut and scan: tests/integration/test_consumer_apply_iceberg.py",
    ),
}


@dataclass(frozen=True)
class Block:
    """A fenced block of a page: its page, the line of its fence, its language and its text."""

    page: str
    line: int
    lang: str
    body: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


@dataclass(frozen=True)
class Command:
    """One command of a shell block, with a here-document and the output shown after it."""

    where: str
    words: list[str]
    heredoc: str = ""
    shown: tuple[str, ...] | None = None  # a transcript's output lines (``$ `` blocks)


def blocks(text: str, name: str) -> Iterator[Block]:
    """The fenced blocks of a page, dedented (an admonition indents them)."""
    for match in FENCE.finditer(text):
        indent = len(match["indent"])
        body = "\n".join(line[indent:] for line in match["body"].splitlines())
        line = text.count("\n", 0, match.start()) + 1
        yield Block(name, line, match["lang"].lower(), body)


def commands(block: Block) -> Iterator[Command]:
    """The commands of a shell block, or of the ``$`` lines of a transcript."""
    transcript = block.lang == "console" or (
        block.lang in {"text", ""} and block.body.lstrip().startswith("$ ")
    )
    if block.lang not in SHELLS and not transcript:
        return
    lines = block.body.splitlines()
    i = 0
    while i < len(lines):
        start = i
        line, i = lines[i], i + 1
        while line.endswith("\\") and i < len(lines):
            line, i = line[:-1] + " " + lines[i], i + 1
        if transcript:
            if not line.startswith("$ "):
                continue
            line = line[2:]
        words = shlex.split(line, comments=True)
        if words and words[-1] == "&":
            words.pop()
        if not words:
            continue
        heredoc = ""
        marker = next((w[2:] for w in words if w.startswith("<<")), None)
        if marker is not None:
            words = [w for w in words if not w.startswith("<<")]
            end = lines.index(marker, i) if marker in lines[i:] else len(lines)
            heredoc, i = "\n".join(lines[i:end]), end + 1
        shown = None
        if transcript:
            end = next((j for j in range(i, len(lines)) if lines[j].startswith("$ ")), len(lines))
            shown, i = tuple(lines[i:end]), end
        yield Command(f"{block.page}:{block.line + 1 + start}", words, heredoc, shown)


def normalized(words: list[str]) -> list[str]:
    """The command with ``.venv/bin/`` taken off its program."""
    program = "highwater" if words[0] in HIGHWATER else "python" if words[0] in PYTHON else None
    return [program or words[0], *words[1:]]


parser = functools.cache(build_parser)  # 16 ms a build; parsing leaves it as it was


def _parses(argv: list[str]) -> int:
    parser().parse_args(argv)
    return 0


def _values(words: list[str]) -> str | None:
    """What a command that is not run takes from the page: its config file and its times.

    A ``--config`` naming a file of the checkout must validate (one that names none is the
    reader's own); a ``--start-ts`` must be a time ``parse_time`` reads.
    """
    args = parser().parse_args(words[1:])
    config = getattr(args, "config", None)
    if config is not None and (ROOT / config).is_file():
        try:
            load_config(ROOT / config)
        except ConfigError as exc:
            return f"--config {config}: {exc}"
    start = getattr(args, "start_ts", None)
    if start is not None:
        try:
            parse_time(start)
        except ValueError as exc:
            return f"--start-ts {start}: {exc}"
    return None


def runs_here(argv: list[str]) -> bool:
    """The ``highwater`` commands cheap and side-effect free enough to run in a unit test."""
    return argv[:1] == ["validate"] or (argv[:1] == ["run"] and "--dry-run" in argv)


def _captured(action: Callable[[], int]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = action()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue()


def _ran(command: Command, argv: list[str]) -> str | None:
    """Run a cheap command from the checkout's root; its output, if the page shows it."""
    with contextlib.chdir(ROOT):
        code, said = _captured(lambda: main(argv))
    if command.shown:
        printed = [line.rstrip() for line in said.strip("\n").splitlines()]
        if printed != [line.rstrip() for line in command.shown]:
            return f"prints {printed}, not what the page shows"
    elif code != 0:
        return f"exits {code}: {said.strip()[-300:]}"
    return None


def check_command(command: Command) -> str | None:
    """What is wrong with a command as the page shows it, or ``None``."""
    words = normalized(command.words)
    if words[0] == "highwater":
        argv = words[1:]
        code, said = _captured(lambda: _parses(argv))
        if code != 0:
            return f"does not parse: {said.strip().splitlines()[-1]}"
        if runs_here(argv):
            return _ran(command, argv)
        problem = _values(words)
        if problem:
            return problem
    entry = next((NOT_RUN[k] for k in NOT_RUN if tuple(words[: len(k)]) == k), None)
    if entry is None:
        return "not run here and not in NOT_RUN"
    if command.heredoc:
        try:
            compile(command.heredoc, command.where, "exec")
        except SyntaxError as exc:
            return f"its here-document does not compile: {exc}"
    return entry.check(words) if entry.check else None


def _included(body: str) -> Path | None:
    """The file a block that is only ``--8<-- "path"`` includes."""
    match = SNIPPET.fullmatch(body.strip())
    if match is None:
        return None
    found = [base / match["path"] for base in SNIPPET_BASES if (base / match["path"]).is_file()]
    return found[0] if found else ROOT / match["path"]


def _merged(base: dict[str, Any], fragment: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in fragment.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merged[key] = _merged(base[key], value)
        else:
            merged[key] = value
    return merged


def check_yaml(block: Block) -> str | None:
    """What is wrong with a YAML block as a changefeed config, or ``None``."""
    path = _included(block.body)
    refused = path is not None and path.relative_to(ROOT).as_posix() in INVALID_ON_PURPOSE
    try:
        if path is not None:
            load_config(path)
        else:
            raw = yaml.safe_load(SNIPPET.sub("", block.body))
            if isinstance(raw, dict) and "changefeed_id" not in raw:
                raw = _merged(yaml.safe_load(BASE_CONFIG.read_text(encoding="utf-8")), raw)
            parse_config(raw, base_dir=ROOT)
    except (ConfigError, yaml.YAMLError) as exc:
        return None if refused else f"not a valid changefeed config: {exc}"
    return f"{path} is valid, but is shown being refused" if refused else None


def check_page(text: str, name: str) -> list[str]:
    """Every problem of a page's YAML and shell blocks, each with its page and line."""
    problems = []
    for block in blocks(text, name):
        if block.lang in {"yaml", "yml"}:
            problem = check_yaml(block)
            if problem:
                problems.append(f"{block.where}: {problem}")
        for command in commands(block):
            problem = check_command(command)
            if problem:
                problems.append(f"{command.where}: {shlex.join(command.words)}: {problem}")
    return problems


@pytest.fixture(autouse=True)
def _state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``run --dry-run`` makes its package zip under the state folder: a temporary one."""
    monkeypatch.setenv("HIGHWATER_STATE_DIR", str(tmp_path))


def test_every_command_and_config_of_get_started_and_how_to_runs_or_parses() -> None:
    assert len(PAGES) > 10, "the pages were found"
    problems = [p for page in PAGES for p in check_page(page.read_text("utf-8"), page.name)]
    assert problems == []


def test_the_pages_run_commands_and_validate_configs() -> None:
    """The check is not vacuous: configs validated, commands run, the refusal's transcript."""
    found = [b for page in PAGES for b in blocks(page.read_text("utf-8"), page.name)]
    configs = [b for b in found if b.lang == "yaml"]
    run = [
        c
        for b in found
        for c in commands(b)
        if normalized(c.words)[0] == "highwater" and runs_here(c.words[1:])
    ]
    assert len(configs) >= 6
    assert any(_included(b.body) is None for b in configs), "an inline fragment is checked"
    assert len(run) >= 3
    assert any(c.shown for c in run), "a transcript is compared"


def test_every_not_run_entry_is_used_by_a_page() -> None:
    """The list holds only what the pages show, so it stays short and each entry reviewed."""
    used = set()
    for page in PAGES:
        for block in blocks(page.read_text("utf-8"), page.name):
            for command in commands(block):
                words = normalized(command.words)
                used |= {k for k in NOT_RUN if tuple(words[: len(k)]) == k}
    assert set(NOT_RUN) - used == set()


def test_every_included_example_config_is_valid() -> None:
    """docs/examples holds whole configs (``highwater validate`` takes each), not fragments."""
    for path in sorted((ROOT / "docs" / "examples").glob("*.yaml")):
        assert main(["validate", "--config", str(path)]) == 0, path


SYNTHETIC = """\
# A page with every mistake

```sh
highwater validate --confg examples/orders.yaml
highwater frobnicate --now
rm -rf /tmp/nothing
.venv/bin/highwater validate --config examples/invalid.yaml
.venv/bin/python - <<'EOF'
print("unclosed"
EOF
highwater safepoint set --start-ts 1795…162.0000000000
highwater changefeed create --config examples/invalid.yaml
```

```yaml
sink:
  partitons: 3
```

```yaml
--8<-- "examples/invalid.yaml"
```

```yaml
--8<-- "examples/orders.yaml"
```

!!! note
    ```yaml
    on_error: maybe
    ```

```text
$ highwater validate --config examples/invalid.yaml
invalid config (1 problem):
  sink.partitons: unknown key
```
"""


def test_a_page_with_a_broken_command_or_config_fails_the_check() -> None:
    problems = check_page(SYNTHETIC, "synthetic.md")
    expected = [
        ("synthetic.md:4", "--confg", "does not parse"),
        ("synthetic.md:5", "frobnicate", "does not parse"),
        ("synthetic.md:6", "rm -rf", "not in NOT_RUN"),
        ("synthetic.md:7", "invalid.yaml", "exits 2"),
        ("synthetic.md:8", "python -", "does not compile"),
        ("synthetic.md:11", "1795…162", "--start-ts"),
        ("synthetic.md:12", "changefeed create", "partitons: unknown key"),
        ("synthetic.md:15", "partitons", "unknown key"),
        ("synthetic.md:29", "on_error", "not a valid changefeed config"),
        ("synthetic.md:34", "invalid.yaml", "not what the page shows"),
    ]
    assert len(problems) == len(expected), problems
    for problem, (where, word, says) in zip(problems, expected, strict=True):
        assert problem.startswith(where), problem
        assert word in problem, problem
        assert says in problem, problem
