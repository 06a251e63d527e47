"""The docs site builds, offline, and its generated reference covers what it documents.

``mkdocs build --strict`` (broken links, missing pages and anchors fail it) into a temporary
folder, then every built page is searched for a script, stylesheet, font or frame fetched from
the internet. The reference is held to the code: every field of the config models appears
under its section, every command, route and metric family too; and the negative controls
show the generator refuses a config field without a description and an error family
without a remedy.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import Field

from pipeline.cli import build_parser
from pipeline.config import ChangefeedConfig
from pipeline.config.fields import Section, keys
from pipeline.dev.reference import api, cli, config, errors, metrics

ROOT = Path(__file__).resolve().parents[2]
# a tag that loads something: <script src>, <link href>, <img src>, <iframe src>, <source src>
LOADS = re.compile(r"<(script|link|img|iframe|source)\b[^>]*\b(src|href)=\"([^\"]*)\"", re.I)
REMOTE = re.compile(r"^(https?:)?//", re.I)
CSS_REMOTE = re.compile(r"(@import\s+url\(|url\()\s*['\"]?(https?:)?//", re.I)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built as ``make test`` builds it."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stderr}"
    return out


def test_the_site_builds_strict_with_every_reference_filled(site: Path) -> None:
    for page in ("config", "cli", "rest-api", "metrics", "errors"):
        html = (site / "reference" / f"{page}.html").read_text(encoding="utf-8")
        assert "<table>" in html or "<li>" in html, page
        assert "reference:" not in html, f"{page}: a marker was left unfilled"


def test_no_page_loads_anything_from_the_internet(site: Path) -> None:
    remote = [
        f"{page.relative_to(site)}: {m.group(0)}"
        for page in site.rglob("*.html")
        for m in LOADS.finditer(page.read_text(encoding="utf-8"))
        if REMOTE.match(m.group(3))
    ]
    remote += [
        str(sheet.relative_to(site))
        for sheet in site.rglob("*.css")
        if CSS_REMOTE.search(sheet.read_text(encoding="utf-8"))
    ]
    assert not remote, f"fetched from the internet: {remote[:5]}"


def test_the_config_reference_lists_every_field_under_its_section() -> None:
    text = config.render()
    for path, model in config.sections(ChangefeedConfig):
        heading = f"{{#{config.anchor(path)}}}"
        assert heading in text, f"no section for {path or 'the top level'}"
        section = text.split(heading, 1)[1].split("\n### ", 1)[0]
        for name in keys(model):  # as a config writes them (kafka_sink_config: Sarama's)
            assert f"| `{name}`" in section, f"{path}.{name} is not in the config reference"


def test_a_config_field_without_a_description_fails_the_reference() -> None:
    class Undocumented(Section):
        """A section with one field that says nothing."""

        said: int = Field(1, description="a field with its description")
        silent: int = 2

    with pytest.raises(config.MissingDescription, match="silent") as raised:
        config.render(Undocumented)
    assert raised.value.paths == ["silent"]


def test_an_error_family_without_a_remedy_fails_the_reference(tmp_path: Path) -> None:
    package = tmp_path / "schemas"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "errors.py").write_text(
        "class HighwaterError(Exception):\n"
        '    remedy = "the root\'s"\n\n\n'
        "class Helped(HighwaterError):\n"
        '    remedy = "do this"\n\n\n'
        "class Unhelped(HighwaterError):\n"
        '    """A family that says nothing of what to do."""\n'
    )
    with pytest.raises(errors.MissingRemedy) as raised:
        errors.render(tmp_path)
    assert raised.value.names == ["schemas.errors.Unhelped"]


def test_every_error_family_in_the_code_has_a_remedy_and_its_messages() -> None:
    text = errors.render()
    found = errors.tree()
    for error in found.values():
        assert f"### `{error.name}`" in text
    config_error = found["schemas.errors", "ConfigError"]
    assert config_error.messages, "the ConfigErrors the code raises were not found"
    assert "end_time: must be after cursor" in errors.render_config_refusals()


def test_every_command_route_and_metric_is_in_the_reference() -> None:
    commands = cli.render()
    for line, _, _ in cli.commands(build_parser()):
        assert f"### `{line}`" in commands
    routes = api.render()
    for path, operations in api.document()["paths"].items():
        for method in operations:
            assert f"`{method.upper()} {path}`" in routes
    families = metrics.render()
    for name in (
        "highwater_rows_emitted_total",
        "highwater_partition_lag_seconds",
        "highwater_changefeed_up",
    ):
        assert f"`{name}`" in families
    assert "`changefeed`, `topic`, `partition`" in families
