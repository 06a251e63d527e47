"""The config reference, from the config models themselves.

Walks :class:`~pipeline.config.ChangefeedConfig` and the section models under it: each
section becomes a heading named by its key path, each field a row with its type, default,
allowed values and description. A field without a description stops the build
(:class:`MissingDescription`): an option added to a model is documented by the same change.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from datetime import timedelta
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from pipeline.config import ChangefeedConfig
from pipeline.config.fields import COCKROACHDB, keys, parse_duration
from schemas.hlc import Hlc


class MissingDescription(Exception):
    """Fields of the config models without a description; the reference refuses them."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths
        super().__init__(
            "config fields without a description (give each Field(description=...)): "
            + ", ".join(paths)
        )


def sections(model: type[BaseModel], path: str = "") -> Iterator[tuple[str, type[BaseModel]]]:
    """``(key path, model)`` of ``model`` and every section under it, depth first."""
    yield path, model
    for name, field in keys(model).items():
        nested = _model_in(field.annotation)
        if nested is not None:
            many = get_origin(_plain(field.annotation)) is list
            yield from sections(nested, _join(path, name) + ("[]" if many else ""))


def undescribed(model: type[BaseModel]) -> list[str]:
    """The key paths of the fields under ``model`` that have no description."""
    return [
        _join(path, name)
        for path, section in sections(model)
        for name, field in keys(section).items()
        if not (field.description or "").strip()
    ]


def render(model: type[BaseModel] = ChangefeedConfig) -> str:
    """The reference of ``model``'s options, in Markdown; refuses an undescribed field."""
    missing = undescribed(model)
    if missing:
        raise MissingDescription(missing)
    out: list[str] = []
    for path, section in sections(model):
        title = f"`{path}`" if path else "Top level"
        out += [f"### {title} {{#{anchor(path)}}}", "", _first_paragraph(section.__doc__), ""]
        out += [
            "| option | CockroachDB name | type | default | allowed | description |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for name, field in keys(section).items():
            out.append(_row(path, name, field))
        out.append("")
    return "\n".join(out)


def _row(path: str, name: str, field: FieldInfo) -> str:
    annotation = field.annotation
    if field.metadata:
        annotation = Annotated[(annotation, *field.metadata)]  # type: ignore[assignment]
    nested = _model_in(field.annotation)
    cells = [
        f"`{name}`" + ("" if not field.is_required() else " (required)"),
        _cockroachdb(field),
        _type(annotation) if nested is None else _linked(_type(annotation), path, name),
        _default(field, path, name) if nested is None else _section_link(path, name, field),
        _allowed(annotation),
        _cell(field.description or ""),
    ]
    return "| " + " | ".join(cells) + " |"


def _cockroachdb(field: FieldInfo) -> str:
    """The CockroachDB option (or cluster setting) the field stands for, if any."""
    extra = field.json_schema_extra
    name = extra.get(COCKROACHDB) if isinstance(extra, dict) else None
    return f"`{name}`" if name else ""


def cockroachdb_names(model: type[BaseModel] = ChangefeedConfig) -> dict[str, str]:
    """Each CockroachDB name the config takes -> the key path of the option that takes it."""
    return {
        str(extra[COCKROACHDB]): _join(path, name)
        for path, section in sections(model)
        for name, field in keys(section).items()
        if isinstance(extra := field.json_schema_extra, dict) and COCKROACHDB in extra
    }


def render_cockroachdb() -> str:
    """CockroachDB's option names the config takes, each beside the option taking it."""
    out = ["| CockroachDB | Highwater |", "| --- | --- |"]
    for crdb, path in sorted(cockroachdb_names().items()):
        section = path.rpartition(".")[0]
        out.append(f"| `{crdb}` | [`{path}`](../reference/config.md#{anchor(section)}) |")
    return "\n".join(out) + "\n"


def anchor(path: str) -> str:
    """The heading id of the section at ``path`` (``sink.kafka`` -> ``config-sink-kafka``)."""
    words = "".join(c if c.isalnum() or c == "_" else " " for c in path).split()
    return "-".join(["config", *words]) if words else "config-top-level"


def _linked(kind: str, path: str, name: str) -> str:
    many = "[]" if kind.startswith("list") else ""
    return kind.replace("section", f"[section](#{anchor(_join(path, name) + many)})")


def _section_link(path: str, name: str, field: FieldInfo) -> str:
    if field.is_required():
        return ""
    if field.default is None:
        return "unset"
    return "its section's defaults"


def _default(field: FieldInfo, path: str, name: str) -> str:
    if field.is_required():
        return ""
    if field.default_factory is not None:
        return f"`{_value(field.default_factory())}`"  # type: ignore[call-arg]
    if field.default is None:
        return "unset"
    return f"`{_value(field.default)}`"


def _value(value: Any) -> str:
    if isinstance(value, timedelta):
        return _duration(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value == "":
        return '""'
    if isinstance(value, dict):
        return "{}" if not value else str(value)
    return str(value)


def _duration(value: timedelta) -> str:
    seconds = value.total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds * 1000)}ms"


def _type(annotation: Any) -> str:  # noqa: PLR0911 - one spelling per kind of type
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        special = _special(args[1:])
        return special or _type(args[0])
    if origin in (Union, types.UnionType):
        kinds = [_type(a) for a in args if a is not type(None)]
        return " or ".join(dict.fromkeys(kinds))
    if origin is Literal:
        return "string" if all(isinstance(a, str) for a in args) else "value"
    if origin is list:
        return f"list of {_type(args[0])}"
    if origin is dict:
        return f"map of {_type(args[0])} to {_type(args[1])}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    return _BASIC.get(annotation, getattr(annotation, "__name__", str(annotation)))


_BASIC: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    timedelta: "duration",
    Hlc: "time",
    SecretStr: "secret string",
    Any: "any",
}


def _special(metadata: tuple[Any, ...]) -> str | None:
    """The name of a shared field type (``fields.py``), known by its validator."""
    for item in metadata:
        function = getattr(item, "func", None)
        if function is parse_duration:
            return "duration"
        name = getattr(function, "__name__", "")
        if name == "_parse_hlc":
            return "time"
        if name == "_replication":
            return "integer or `auto`"
    return None


def _allowed(annotation: Any) -> str:
    """Literal values, numeric bounds and patterns, as a reader spells them."""
    found: list[str] = []
    _constraints(annotation, found)
    return "; ".join(dict.fromkeys(found))


def _constraints(annotation: Any, found: list[str]) -> None:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        found.append(", ".join(f"`{a}`" for a in args))
        return
    if origin is Annotated:
        if _special(args[1:]) == "integer or `auto`":
            found.append("`auto` or ≥ 1")
            return
        _constraints(args[0], found)
        for item in args[1:]:
            found.extend(_bounds(item))
        return
    if origin in (Union, types.UnionType) or origin is list:
        for arg in args:
            _constraints(arg, found)


_BOUNDS = (("gt", "> {}"), ("ge", "≥ {}"), ("lt", "< {}"), ("le", "≤ {}"))


def _bounds(item: Any) -> Iterator[str]:
    for attr, spelling in _BOUNDS:
        value = getattr(item, attr, None)
        if value is not None:
            yield spelling.format(value)
    pattern = getattr(item, "pattern", None)
    if pattern is not None:
        yield f"matches `{pattern}`"
    if getattr(item, "min_length", None):
        yield "not empty"
    for meta in getattr(item, "metadata", ()):  # a FieldInfo used as Annotated metadata
        yield from _bounds(meta)


def _model_in(annotation: Any) -> type[BaseModel] | None:
    plain = _plain(annotation)
    if isinstance(plain, type) and issubclass(plain, BaseModel):
        return plain
    for arg in get_args(plain):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _plain(annotation: Any) -> Any:
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return annotation


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _first_paragraph(doc: str | None) -> str:
    text = (doc or "").strip().split("\n\n", 1)[0]
    return " ".join(line.strip() for line in text.splitlines()).replace("``", "`")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")
