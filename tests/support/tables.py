"""Table schemas tests share."""

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
