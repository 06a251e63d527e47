"""The REST API reference, from the server's own OpenAPI document.

:func:`pipeline.control.server.create_app` builds the app (nothing is reached: the context's
brokers are only dialled by a request) and FastAPI writes its document from the routes and
the pydantic models that validate them; this renders each operation and each schema.
"""

from __future__ import annotations

from typing import Any

from pipeline.control.context import OperatorContext
from pipeline.control.server import create_app

METHODS = ("get", "post", "put", "delete")


def document() -> dict[str, Any]:
    """The server's OpenAPI document, as ``GET /openapi.json`` serves it."""
    context = OperatorContext({"bootstrap.servers": "127.0.0.1:9"})  # never dialled here
    app = create_app(context, token="unused")  # noqa: S106 - no request is served
    return app.openapi()


def render(openapi: dict[str, Any] | None = None) -> str:
    """Every operation and schema of ``openapi`` (default: the server's), in Markdown."""
    spec = openapi or document()
    out = ["## Operations", ""]
    for path, operations in spec["paths"].items():
        for method in METHODS:
            if method in operations:
                out += _operation(method, path, operations[method])
    out += ["## Schemas", ""]
    for name, schema in spec.get("components", {}).get("schemas", {}).items():
        out += _schema(name, schema)
    return "\n".join(out)


def _operation(method: str, path: str, operation: dict[str, Any]) -> list[str]:
    out = [f"### `{method.upper()} {path}`", ""]
    if operation.get("description"):
        out += [_unindent(operation["description"]), ""]
    parameters = operation.get("parameters", [])
    if parameters:
        out += ["| parameter | in | type | description |", "| --- | --- | --- | --- |"]
        for p in parameters:
            required = " (required)" if p.get("required") else ""
            schema = p.get("schema", {})
            description = p.get("description") or schema.get("description", "")
            out.append(
                f"| `{p['name']}`{required} | {p['in']} | {_kind(schema)} | {_cell(description)} |"
            )
        out.append("")
    body = operation.get("requestBody", {}).get("content", {}).get("application/json")
    if body:
        out += [f"Request body: {_kind(body['schema'])}.", ""]
    out += ["| status | meaning | body |", "| --- | --- | --- |"]
    for status, response in sorted(operation.get("responses", {}).items()):
        content = response.get("content", {}).get("application/json", {})
        kind = _kind(content["schema"]) if "schema" in content else ""
        out.append(f"| {status} | {_cell(response.get('description', ''))} | {kind} |")
    return [*out, ""]


def _schema(name: str, schema: dict[str, Any]) -> list[str]:
    out = [f"### {name} {{#schema-{name.lower()}}}", ""]
    if schema.get("description"):
        out += [_unindent(schema["description"]).replace("``", "`"), ""]
    required = set(schema.get("required", []))
    properties = schema.get("properties", {})
    if properties:
        out += ["| field | type | default | description |", "| --- | --- | --- | --- |"]
        for field, prop in properties.items():
            mark = " (required)" if field in required else ""
            default = f"`{prop['default']}`" if "default" in prop else ""
            out.append(
                f"| `{field}`{mark} | {_kind(prop)} | {default} | "
                f"{_cell(prop.get('description', ''))} |"
            )
        out.append("")
    return out


def _kind(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#schema-{name.lower()})"
    if "anyOf" in schema:
        kinds = [_kind(s) for s in schema["anyOf"] if s.get("type") != "null"]
        nullable = any(s.get("type") == "null" for s in schema["anyOf"])
        return " or ".join(kinds) + (" or null" if nullable else "")
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list of {_kind(schema.get('items', {}))}"
    if kind == "object":
        return "object"
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    return str(kind)


def _unindent(text: str) -> str:
    return "\n".join(line.strip() for line in text.strip().splitlines())


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")
