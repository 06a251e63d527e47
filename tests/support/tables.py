"""Table schemas tests share."""

from typing import Any

from schemas.tables import TableSchema

# A table with a column of every type the Avro walk writes (nullable), keyed by (p, k): the
# first key column names the source partition in the walk's tests.
WIDE = TableSchema.of(
    {
        "type": "record",
        "name": "wide",
        "fields": [
            {"name": "p", "type": "long"},
            {"name": "k", "type": "string"},
            *(
                {"name": t[0], "type": ["null", t], "default": None}
                for t in ("string", "long", "int", "double", "float", "boolean")
            ),
        ],
    },
    ["p", "k"],
)


def primitive_table(name: str, key: list[str], columns: dict[str, str]) -> TableSchema:
    """A table keyed by ``key`` (longs) whose other columns are nullable primitives."""
    fields: list[dict[str, Any]] = [{"name": k, "type": "long"} for k in key]
    fields += [{"name": c, "type": ["null", t], "default": None} for c, t in columns.items()]
    return TableSchema.of({"type": "record", "name": name, "fields": fields}, key)


# The Canal-JSON walk tests' table in Avro (tests/spark, tests/unit/test_walk_golden.py):
# numeric mysqlTypes into longs and doubles (an unsigned bigint beyond a long: a misfit), the
# rest as text.
CANAL_TABLE = primitive_table(
    "orders",
    ["id"],
    {
        "amount": "double",
        "u": "long",
        "f": "double",
        "b": "long",
        "y": "long",
        **dict.fromkeys(("note", "word", "at", "j"), "string"),
    },
)
