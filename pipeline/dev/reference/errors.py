"""The error reference, read from the source: every error of the tree and every message.

Read, not imported, so every module counts (the development tools' too) and nothing of
Spark loads: each module's classes, imports and calls are found by :mod:`ast`. A class is in
the tree when a base of it is (from :class:`schemas.errors.HighwaterError` down); its
meaning is its docstring, what to do its ``remedy`` (its own or a family's: the reference
refuses a class without one, :class:`MissingRemedy`); its messages are every call that makes
it with a message written in the code, f-string fields left as ``{…}``. The config's
refusals are its validators' messages (``pipeline/config``): the reasons given to
``combination`` and ``PydanticCustomError``, raised as ``ValueError`` or added to the
cross-section problems.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("schemas", "encoders", "sinks", "pipeline", "highwater_consumer")
BASE = ("schemas.errors", "HighwaterError")
EXIT = "exit status {code}"
MESSAGE_PARAMETERS = ("message", "reason", "problems")  # an __init__'s message, by name


class MissingRemedy(Exception):
    """Error classes with no ``remedy`` of their own or their family's."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        super().__init__("error classes without a remedy (what to do): " + ", ".join(names))


@dataclass
class ErrorClass:
    """One class of the tree, as its source declares it."""

    module: str
    name: str
    bases: list[tuple[str, str]]
    doc: str
    remedy: str | None
    retryable: bool | None
    message_at: int | None  # the position of __init__'s message parameter (self excluded)
    shape: str | None  # the message its own __init__ writes, if it writes one
    line: int = 0
    messages: list[tuple[str, str]] = field(default_factory=list)  # (where, template)

    @property
    def key(self) -> tuple[str, str]:
        """``(module, name)``."""
        return self.module, self.name


@dataclass
class Module:
    """A parsed module: its dotted name, path, tree and the names it imports."""

    name: str
    path: str
    tree: ast.Module
    imports: dict[str, tuple[str, str]]


def modules(root: Path = ROOT) -> tuple[Module, ...]:
    """Every module of the packages, parsed (once per root and process)."""
    return _parsed(root)


@functools.lru_cache(maxsize=4)
def _parsed(root: Path) -> tuple[Module, ...]:
    return tuple(_parse(root))


def _parse(root: Path) -> Iterator[Module]:
    for package in PACKAGES:
        for file in sorted((root / package).rglob("*.py")):
            relative = file.relative_to(root)
            parts = list(relative.with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            tree = ast.parse(file.read_text(encoding="utf-8"))
            name = ".".join(parts)
            yield Module(name, relative.as_posix(), tree, _imports(tree, name, is_package))


def _imports(tree: ast.Module, name: str, is_package: bool) -> dict[str, tuple[str, str]]:
    found: dict[str, tuple[str, str]] = {}
    here = name.split(".") if is_package else name.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            source = ".".join([*base, *([node.module] if node.module else [])])
            for alias in node.names:
                found[alias.asname or alias.name] = (source, alias.name)
    return found


def tree(root: Path = ROOT) -> dict[tuple[str, str], ErrorClass]:
    """Every class of the error tree, with the messages the code makes it with."""
    parsed = {m.name: m for m in modules(root)}
    declared = {c.key: c for m in parsed.values() for c in _classes(m)}
    for error in declared.values():
        error.bases = [_resolve(parsed, declared, base) for base in error.bases]
    members = {BASE}
    grew = True
    while grew:
        grew = False
        for key, error in declared.items():
            if key not in members and any(base in members for base in error.bases):
                members.add(key)
                grew = True
    errors = {k: declared[k] for k in declared if k in members}
    for module in parsed.values():
        for call in ast.walk(module.tree):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name):
                key = _resolve(parsed, declared, (module.name, call.func.id))
                if key in errors:
                    _add_message(errors, errors[key], module, call)
    return errors


def _resolve(
    parsed: dict[str, Module],
    declared: dict[tuple[str, str], ErrorClass],
    key: tuple[str, str],
) -> tuple[str, str]:
    """The class a name in a module stands for, through imports and re-exports."""
    for _ in range(10):  # a chain of re-exports is short
        if key in declared:
            return key
        module = parsed.get(key[0])
        if module is None or key[1] not in module.imports:
            return key
        key = module.imports[key[1]]
    return key


def _classes(module: Module) -> Iterator[ErrorClass]:
    for node in module.tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        bases = [(module.name, b.id) for b in node.bases if isinstance(b, ast.Name)]
        yield ErrorClass(
            module.name,
            node.name,
            bases,
            ast.get_docstring(node) or "",
            _constant(node, "remedy"),
            _flag(node, "retryable"),
            _message_at(node),
            _shape(node),
            node.lineno,
        )


def _assigned(node: ast.ClassDef, name: str) -> ast.Constant | None:
    """The literal a class body assigns to ``name`` (annotated or not), if any."""
    for item in node.body:
        targets = item.targets if isinstance(item, ast.Assign) else []
        if isinstance(item, ast.AnnAssign):
            targets = [item.target]
        value = getattr(item, "value", None)
        if any(isinstance(t, ast.Name) and t.id == name for t in targets) and isinstance(
            value, ast.Constant
        ):
            return value
    return None


def _constant(node: ast.ClassDef, name: str) -> str | None:
    found = _assigned(node, name)
    return found.value if found is not None and isinstance(found.value, str) else None


def _flag(node: ast.ClassDef, name: str) -> bool | None:
    found = _assigned(node, name)
    return None if found is None else bool(found.value)


def _message_at(node: ast.ClassDef) -> int | None:
    for item in node.body:
        if isinstance(item, ast.FunctionDef) and item.name == "__init__":
            names = [a.arg for a in item.args.args[1:]]
            for wanted in MESSAGE_PARAMETERS:
                if wanted in names:
                    return names.index(wanted)
            return -1  # its own message, from structured fields
    return None


def _shape(node: ast.ClassDef) -> str | None:
    """The message an ``__init__`` passes to ``super().__init__``, as a template."""
    for item in node.body:
        if isinstance(item, ast.FunctionDef) and item.name == "__init__":
            for call in ast.walk(item):
                if (
                    isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Attribute)
                    and call.func.attr == "__init__"
                    and call.args
                ):
                    return template(call.args[-1]) if len(call.args) == 1 else None
    return None


def _add_message(
    errors: dict[tuple[str, str], ErrorClass], error: ErrorClass, module: Module, call: ast.Call
) -> None:
    found = _inherited(errors, error, "message_at")
    at = found if isinstance(found, int) else 0
    if at < 0 or at >= len(call.args):
        return
    where = f"{module.path}:{call.lineno}"
    argument = call.args[at]
    if isinstance(argument, ast.List):  # ConfigError([(path, reason), …])
        for item in argument.elts:
            if isinstance(item, ast.Tuple) and len(item.elts) == 2:
                path, reason = (template(e) for e in item.elts)
                if reason and _worded(reason):
                    error.messages.append((where, f"{path}: {reason}" if path else reason))
        return
    text = template(argument)
    if text and _worded(text):
        error.messages.append((where, text))


def _worded(text: str) -> bool:
    """Whether a message says anything of its own beyond its fields (not ``{reason}``)."""
    return any(c.isalpha() for c in re.sub(r"\{[^}]*\}", "", text))


def _inherited(
    errors: dict[tuple[str, str], ErrorClass],
    error: ErrorClass,
    name: str,
    below: tuple[str, str] | None = None,
) -> object:
    """``name`` as ``error`` or its nearest ancestor sets it (``below``: not from that one)."""
    seen: ErrorClass | None = error
    while seen is not None and seen.key != below:
        value = getattr(seen, name)
        if value is not None:
            return value
        seen = next((errors[b] for b in seen.bases if b in errors), None)
    return None


def template(node: ast.expr) -> str | None:
    """A message as the code writes it, f-string fields as ``{expression}``; None if built."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue):
                conversion = "" if value.conversion < 0 else "!" + chr(value.conversion)
                spec = (
                    "" if value.format_spec is None else ":" + (template(value.format_spec) or "")
                )
                parts.append("{" + ast.unparse(value.value) + conversion + spec + "}")
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mod):
        left = template(node.left)
        right = template(node.right) if isinstance(node.op, ast.Add) else ""
        if left is not None and right is not None:
            return left + right
    return None


def remedy_of(errors: dict[tuple[str, str], ErrorClass], error: ErrorClass) -> str | None:
    """What to do about ``error``: its own remedy, else its nearest family's."""
    found = _inherited(errors, error, "remedy")
    return found if isinstance(found, str) else None


def exit_status(errors: dict[tuple[str, str], ErrorClass], error: ErrorClass) -> int:
    """The ``highwater`` command's exit status for it (``reporting_errors``)."""
    if error.key == ("schemas.errors", "ConfigError") or _is_under(errors, error, "ConfigError"):
        return 2
    return 75 if _inherited(errors, error, "retryable") else 1


def _is_under(errors: dict[tuple[str, str], ErrorClass], error: ErrorClass, name: str) -> bool:
    seen: ErrorClass | None = error
    while seen is not None:
        if seen.name == name and seen.module == "schemas.errors":
            return True
        seen = next((errors[b] for b in seen.bases if b in errors), None)
    return False


def config_refusals(root: Path = ROOT) -> list[tuple[str, str]]:
    """``(where, message)`` of every refusal the config's validators write."""
    found: list[tuple[str, str]] = []
    for module in modules(root):
        if not module.name.startswith("pipeline.config"):
            continue
        for node in ast.walk(module.tree):
            message = _refusal(node)
            if message:
                found.append((f"{module.path}:{getattr(node, 'lineno', 0)}", message))
    return found


def _refusal(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        name, args = node.func.id, node.args
        if name == "combination" and len(args) == 2:
            option, reason = template(args[0]), template(args[1])
            return f"{option or '…'}: {reason}" if reason else None
        if name in ("PydanticCustomError", "ValueError") and args:
            return template(args[1] if name == "PydanticCustomError" and len(args) > 1 else args[0])
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "append"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "problems"
        and node.args
        and isinstance(node.args[0], ast.Tuple)
        and len(node.args[0].elts) == 2
    ):
        path, reason = (template(e) for e in node.args[0].elts)
        return f"{path or '…'}: {reason}" if reason else None
    return None


def render(root: Path = ROOT) -> str:
    """The error reference in Markdown; refuses a class without a remedy."""
    errors = tree(root)
    missing = [
        f"{e.module}.{e.name}"
        for e in errors.values()
        if e.key != BASE and not _inherited(errors, e, "remedy", below=BASE)
    ]
    if missing:
        raise MissingRemedy(missing)
    out: list[str] = []
    for error in _in_tree_order(errors):
        out += _entry(errors, error)
    return "\n".join(out)


def _in_tree_order(errors: dict[tuple[str, str], ErrorClass]) -> Iterator[ErrorClass]:
    def children(parent: tuple[str, str]) -> list[ErrorClass]:
        found = (e for e in errors.values() if parent in e.bases)
        return sorted(found, key=lambda e: (e.module != "schemas.errors", e.module, e.line))

    def walk(key: tuple[str, str]) -> Iterator[ErrorClass]:
        yield errors[key]
        for child in children(key):
            yield from walk(child.key)

    yield from walk(BASE)


def _entry(errors: dict[tuple[str, str], ErrorClass], error: ErrorClass) -> list[str]:
    parent = next((errors[b] for b in error.bases if b in errors), None)
    out = [
        f"### `{error.name}` {{#error-{error.name.lower()}-{error.module.replace('.', '-')}}}",
        "",
    ]
    facts = [f"`{error.module}`"]
    if parent is not None:
        facts.append(f"a kind of `{parent.name}`")
    facts.append(EXIT.format(code=exit_status(errors, error)))
    out += [" · ".join(facts), "", _paragraph(error.doc), ""]
    remedy = remedy_of(errors, error)
    if remedy:
        out += [f"**What to do:** {remedy}", ""]
    if error.shape:
        out += [f"Its message reads: {_code(error.shape)}", ""]
    if error.messages:
        out += ["Messages:", ""]
        out += [
            f"- {_code(text)} <small>({where})</small>" for where, text in _by_place(error.messages)
        ]
        out.append("")
    return out


def render_config_refusals(root: Path = ROOT) -> str:
    """The config's refusals, one line each, in Markdown."""
    found = [(w, t) for w, t in config_refusals(root) if _worded(t)]
    return "\n".join(
        f"- {_code(text)} <small>({where})</small>" for where, text in _by_place(found)
    )


def _by_place(messages: list[tuple[str, str]]) -> list[tuple[str, str]]:
    def place(item: tuple[str, str]) -> tuple[str, int]:
        path, _, line = item[0].rpartition(":")
        return path, int(line)

    return sorted(dict.fromkeys(messages), key=place)


def _paragraph(doc: str) -> str:
    text = doc.strip().split("\n\n", 1)[0]
    return " ".join(text.split()).replace("``", "`")


def _code(text: str) -> str:
    text = " ".join(text.split())
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"
