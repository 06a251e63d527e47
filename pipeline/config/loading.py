"""Reading a config: YAML, ``${VAR}`` substitution, and every problem named by its key path.

The one place a config file is read: :func:`load_config` parses the YAML, :func:`parse_config`
substitutes the environment's variables and validates the document into a
:class:`~.changefeed.ChangefeedConfig`, and pydantic's errors are turned into
:class:`ConfigError`'s ``(key path, reason)`` pairs, an unknown key with the nearest known
one.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from schemas.errors import ConfigError

from .changefeed import ChangefeedConfig
from .fields import keys

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}")


def load_config(path: str | Path, base_dir: str | Path | None = None) -> ChangefeedConfig:
    """Read and validate a YAML config file; raise :class:`ConfigError` listing every problem.

    Relative paths in it start at ``base_dir`` (default: the file's folder).
    """
    file = Path(path)
    try:
        raw = yaml.safe_load(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError([("", f"cannot read {file}: {exc.strerror}")]) from exc
    except yaml.YAMLError as exc:
        raise ConfigError([("", f"{file} is not valid YAML: {exc}")]) from exc
    return parse_config(raw, base_dir=file.parent if base_dir is None else Path(base_dir))


def parse_config(
    raw: object, env: Mapping[str, str] | None = None, base_dir: Path | None = None
) -> ChangefeedConfig:
    """Validate an already-parsed YAML document, after ``${VAR}`` substitution from ``env``.

    Relative file paths in it (table schemas) are taken from ``base_dir`` (default: the
    working directory).
    """
    if not isinstance(raw, Mapping):
        raise ConfigError([("", "the config must be a mapping of sections at the top level")])
    problems: list[tuple[str, str]] = []
    expanded = _expand(raw, os.environ if env is None else env, "", problems)
    if problems:
        raise ConfigError(problems)
    try:
        return ChangefeedConfig.model_validate(expanded, context={"base_dir": base_dir})
    except ValidationError as exc:
        found = problems_of(exc)
        if not (raw.get("sources") or raw.get("databases")) and "sources" not in dict(found):
            found.insert(0, ("sources", NO_SOURCE))  # beside the others, as a required key
        raise ConfigError(found) from exc


NO_SOURCE = "a source topic or a databases entry is needed"


def _expand(
    node: object, env: Mapping[str, str], path: str, problems: list[tuple[str, str]]
) -> object:
    """Substitute ``${VAR}`` and ``${VAR:-default}`` in every string value.

    Lets one config serve several clusters and keeps secrets out of the file.
    """
    if isinstance(node, Mapping):
        return {
            k: _expand(v, env, _join([path, str(k)]) if path else str(k), problems)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_expand(v, env, f"{path}[{i}]", problems) for i, v in enumerate(node)]
    if not isinstance(node, str) or "${" not in node:
        return node

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(3)
        if name in env:
            return env[name]
        if default is not None:
            return default
        problems.append((path, f"environment variable {name} is not set"))
        return ""

    return _ENV_REF.sub(substitute, node)


def problems_of(exc: ValidationError) -> list[tuple[str, str]]:
    """``(key path, reason)`` of each of pydantic's errors."""
    problems: list[tuple[str, str]] = []
    for error in exc.errors(include_url=False):
        loc = [str(p) if isinstance(p, str) else f"[{p}]" for p in error["loc"]]
        ctx = error.get("ctx") or {}
        if error["type"] == "combinations":
            problems.extend(_prefixed(loc, line) for line in str(ctx["joined"]).splitlines())
            continue
        if error["type"] == "combination":
            loc.append(str(ctx["field"]))
        message = error["msg"]
        if error["type"] == "value_error":
            message = message.removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = _unknown_key(exc, error["loc"])
        problems.append((_join(loc), message))
    return problems


def _prefixed(loc: list[str], line: str) -> tuple[str, str]:
    path, _, reason = line.partition(": ")
    return _join([*loc, path]), reason


def _join(parts: list[str]) -> str:
    return ".".join(parts).replace(".[", "[")


def _unknown_key(exc: ValidationError, loc: tuple[int | str, ...]) -> str:
    model: type[BaseModel] = ChangefeedConfig
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        annotation = keys(model)[str(part)].annotation
        nested = _model_in(annotation)
        if nested is None:
            return "unknown key"
        model = nested
    known = sorted(keys(model))
    close = difflib.get_close_matches(str(loc[-1]), known, n=1)
    hint = f"did you mean {close[0]!r}?" if close else "known keys: " + ", ".join(known)
    return f"unknown key ({hint})"


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def with_tables(config: ChangefeedConfig, topics: Iterable[str]) -> ChangefeedConfig:
    """``config`` with a source for each of ``topics`` its ``databases`` take, validated.

    The sources listed by hand stay as they are (a topic both name is theirs); a table name
    two databases' topics share is refused (their output topics would be one).
    """
    listed = {s.topic for s in config.sources}
    found = [s for d in config.databases for s in d.sources(topics) if s.topic not in listed]
    if not found:
        return config
    tables: dict[str, str] = {s.table: s.topic for s in config.sources}
    for source in found:
        other = tables.setdefault(source.table, source.topic)
        if other != source.topic:
            reason = (
                f"topics {other!r} and {source.topic!r} both carry table {source.table!r}: "
                "exclude one (their output topics would be one)"
            )
            raise ConfigError([("databases", reason)])
    raw = config.model_dump() | {"sources": [*config.sources, *found]}
    try:
        return ChangefeedConfig.model_validate(raw)
    except ValidationError as exc:  # what the tables found cannot go with
        raise ConfigError(problems_of(exc)) from exc
