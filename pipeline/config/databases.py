"""Whole-database sources: every table topic of a Debezium capture, found by name.

CockroachDB's ``CREATE CHANGEFEED FOR DATABASE … INCLUDE/EXCLUDE TABLES`` for the sources
Highwater reads: a ``databases`` entry names a Debezium connector's ``topic.prefix`` and its
transaction topic, and each topic ``<prefix>.<schema>.<table>`` whose data collection
(``<schema>.<table>``, as the transaction topic names it) the ``include`` patterns match and
the ``exclude`` patterns do not is one source, its table the name after the last dot
(:meth:`DatabaseConfig.sources`). The run takes the topics there are when it starts
(``with_tables`` in ``loading.py``); a table created later is found in the transaction topic,
whose END events count its changes: they hold the resolved time back until the run has
started again with the table's topic (``pipeline/core/coordinator/changefeed.py``), so no
marker passes a change of it.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence
from typing import Annotated, Literal

from pydantic import Field

from .fields import Name, Section, cockroachdb
from .sections import SchemaRegistryConfig, SourceConfig

_TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class DatabaseConfig(Section):
    """Every table of one Debezium capture whose name the patterns take."""

    prefix: Name = Field(
        description="The connector's `topic.prefix`: its table topics are "
        "`<prefix>.<schema>.<table>`."
    )
    format: Literal["debezium"] = Field(
        "debezium", description="The topics' format (Debezium's events, JSON or Avro)."
    )
    transactions: Name = Field(
        description="The connector's transaction metadata topic: it resolves every table, "
        "and its END events name a table created later before any marker can pass it."
    )
    include: list[Annotated[str, Field(min_length=1)]] = Field(
        ["*"],
        description="Patterns (`*`, `?`, `[...]`) of the data collections (`<schema>.<table>`) "
        "to follow.",
        json_schema_extra=cockroachdb("INCLUDE TABLES"),
    )
    exclude: list[Annotated[str, Field(min_length=1)]] = Field(
        [],
        description="Patterns of the data collections to leave out.",
        json_schema_extra=cockroachdb("EXCLUDE TABLES"),
    )
    schema_registry: SchemaRegistryConfig | None = Field(
        None, description="The registry of its Avro records; unset: JSON records."
    )
    database: Annotated[str, Field(min_length=1)] = Field(
        "defaultdb", description="The database's name in `full_table_name` output topics."
    )

    def follows(self, collection: str) -> bool:
        """Whether ``collection`` (``<schema>.<table>``) is one of this database's tables."""
        schema, dot, table = collection.partition(".")
        if not (schema and dot and _TABLE.match(table)) or "." in table:
            return False
        taken = any(fnmatch.fnmatchcase(collection, p) for p in self.include)
        return taken and not any(fnmatch.fnmatchcase(collection, p) for p in self.exclude)

    def sources(self, topics: Iterable[str]) -> list[SourceConfig]:
        """A source for each of ``topics`` that is a followed table's, in name order."""
        head = f"{self.prefix}."
        found = []
        for topic in sorted(topics):
            collection = topic[len(head) :] if topic.startswith(head) else ""
            if topic == self.transactions or not self.follows(collection):
                continue
            schema, _, table = collection.partition(".")
            found.append(
                SourceConfig(
                    topic=topic,
                    table=table,
                    format=self.format,
                    transactions=self.transactions,
                    collection=collection,
                    schema_registry=self.schema_registry,
                    database=self.database,
                    schema_name=schema,
                )
            )
        return found


def follows(databases: Sequence[DatabaseConfig], transactions: str, collection: str) -> bool:
    """Whether an entry of ``databases`` with that transaction topic takes ``collection``."""
    return any(d.transactions == transactions and d.follows(collection) for d in databases)
