"""Debezium's JSON schemas (JsonConverter), for tests that write events by hand."""

from typing import Any


def column(name: str, kind: str, semantic: str | None = None, **parameters: str) -> dict[str, Any]:
    """A row column's Connect schema: its type, its semantic type and parameters if any."""
    out: dict[str, Any] = {"type": kind, "optional": True, "field": name}
    if semantic is not None:
        out["name"] = semantic
    if parameters:
        out["parameters"] = parameters
    return out


def envelope_schema(columns: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """A change event's value schema: before and after of ``columns``, source and op."""
    return {
        "type": "struct",
        "fields": [
            {"type": "struct", "fields": columns, "optional": True, "field": "before"},
            {"type": "struct", "fields": columns, "optional": True, "field": "after"},
            {"type": "struct", "fields": [], "optional": False, "field": "source"},
            {"type": "string", "optional": False, "field": "op"},
        ],
        "optional": False,
        "name": name,
    }
