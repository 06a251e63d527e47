"""Whole-database sources: every table topic of a Debezium capture or a TiCDC changefeed.

CockroachDB's ``CREATE CHANGEFEED FOR DATABASE … INCLUDE/EXCLUDE TABLES`` for the sources
Highwater reads. A ``databases`` entry takes each table topic whose data collection
(``<schema>.<table>``) the ``include`` patterns match and the ``exclude`` patterns do not as
one source (:meth:`DatabaseConfig.sources`):

* **Debezium**: the connector's ``topic.prefix`` and its transaction topic; its table topics
  are ``<prefix>.<schema>.<table>``.
* **canal-json** (TiCDC): one TiDB schema (``database``) and the topic expression of TiCDC's
  dispatcher rule (``topics``, ``[prefix]{schema}[middle]{table}[suffix]``).

The run takes the topics there are when it starts (``with_tables`` in ``loading.py``). A table
created later: Debezium names it in its transaction topic, whose END events count its
changes, so they hold the resolved time back (``pipeline/core/resolved/new_tables.py``);
TiCDC creates its topic before it sends a watermark past its first change, so the run lists
the topics before a resolved time it read can rise (``pipeline/core/resolved/listed.py``).
Either way the run ends, and the next one reads the table's topic from its start.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated, Literal, Protocol

from pydantic import Field, model_validator
from typing_extensions import override

from .fields import Name, Section, cockroachdb, combination
from .sections import SchemaRegistryConfig, SourceConfig

_TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TABLE_TEXT = "[A-Za-z_][A-Za-z0-9_]*"
# TiCDC's topic expression: literal parts of a Kafka topic name around {schema} and {table}
_EXPRESSION = re.compile(r"^[A-Za-z0-9._-]*(\{schema\}[A-Za-z0-9._-]*)?\{table\}[A-Za-z0-9._-]*$")


class DatabaseConfig(Section):
    """Every table of one Debezium capture or TiCDC schema whose name the patterns take."""

    format: Literal["debezium", "canal-json"] = Field(
        "debezium",
        description="The topics' format: Debezium's events (JSON or Avro), or TiCDC's Canal-JSON.",
    )
    prefix: Name | None = Field(
        None,
        description="Debezium: the connector's `topic.prefix`: its table topics are "
        "`<prefix>.<schema>.<table>`.",
    )
    transactions: Name | None = Field(
        None,
        description="Debezium: the connector's transaction metadata topic: it resolves every "
        "table, and its END events name a table created later before any marker can pass it.",
    )
    topics: str | None = Field(
        None,
        description="canal-json: the topic expression of TiCDC's dispatcher rule, "
        "`[prefix]{schema}[middle]{table}[suffix]` (`{schema}` is `database`).",
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
        "defaultdb",
        description="The database's name in `full_table_name` output topics; canal-json: the "
        "TiDB schema whose tables are followed (needed).",
    )

    @model_validator(mode="after")
    def _format_keys(self) -> DatabaseConfig:
        needed = ("prefix", "transactions") if self.format == "debezium" else ("topics",)
        for key in needed:
            if getattr(self, key) is None:
                raise combination(key, f"is needed with format: {self.format}")
        others = {"prefix", "transactions", "topics"} - set(needed)
        for key in sorted(others):
            if getattr(self, key) is not None:
                raise combination(key, f"is not used with format: {self.format}")
        if self.format == "canal-json":
            if self.schema_registry is not None:
                raise combination("schema_registry", "is not used with format: canal-json")
            if "database" not in self.model_fields_set:
                raise combination("database", "is needed with format: canal-json (the schema)")
            if self.topics is None or not _EXPRESSION.match(self.topics):
                raise combination(
                    "topics",
                    "is not a TiCDC topic expression: `{table}` once, `{schema}` at most once "
                    "before it, the rest letters, digits, '.', '_' or '-'",
                )
        return self

    @cached_property
    def naming(self) -> TableTopics:
        """How its format names its table topics."""
        return DebeziumTopics(self) if self.format == "debezium" else TicdcTopics(self)

    def describe(self) -> str:
        """Its topics, as the CLI names them."""
        return self.naming.describe()

    @cached_property
    def identity(self) -> str:
        """A short hash of what decides the topics it takes (not its registry's secrets).

        Runs that list the same database's tables under the same identity take the same
        topics: one a record of the run before does not cover was created since.
        """
        taken = self.model_dump(
            mode="json", include={"format", "prefix", "transactions", "topics", "database"}
        ) | {"include": sorted(self.include), "exclude": sorted(self.exclude)}
        return hashlib.sha256(json.dumps(taken, sort_keys=True).encode()).hexdigest()[:16]

    def topic_of(self, collection: str) -> str:
        """The topic of a data collection (``<schema>.<table>``) of this database."""
        return self.naming.topic_of(collection)

    def follows(self, collection: str) -> bool:
        """Whether ``collection`` (``<schema>.<table>``) is one of this database's tables."""
        schema, dot, table = collection.partition(".")
        if not (schema and dot and _TABLE.match(table)) or "." in table:
            return False
        taken = any(fnmatch.fnmatchcase(collection, p) for p in self.include)
        return taken and not any(fnmatch.fnmatchcase(collection, p) for p in self.exclude)

    def takes(self, topic: str) -> bool:
        """Whether ``topic`` is the topic of one of this database's followed tables."""
        return topic != self.transactions and self.follows(self.naming.collection(topic))

    def sources(self, topics: Iterable[str]) -> list[SourceConfig]:
        """A source for each of ``topics`` that is a followed table's, in name order."""
        return [
            self.naming.source(topic, self.naming.collection(topic))
            for topic in sorted(filter(self.takes, topics))
        ]


class TableTopics(Protocol):
    """How a database's format names its table topics."""

    def describe(self) -> str:
        """Its topics, as the CLI names them."""

    def topic_of(self, collection: str) -> str:
        """The topic of a data collection (``<schema>.<table>``)."""

    def collection(self, topic: str) -> str:
        """The data collection a topic names, or "" if it names none."""

    def source(self, topic: str, collection: str) -> SourceConfig:
        """The source of a followed table's topic."""


@dataclass(frozen=True)
class DebeziumTopics(TableTopics):
    """Debezium's table topics: ``<prefix>.<schema>.<table>`` (the connector's ``topic.prefix``)."""

    config: DatabaseConfig

    @override
    def describe(self) -> str:
        return f"{self.config.prefix}.*"

    @override
    def topic_of(self, collection: str) -> str:
        return f"{self.config.prefix}.{collection}"

    @override
    def collection(self, topic: str) -> str:
        head = f"{self.config.prefix}."
        return topic[len(head) :] if topic.startswith(head) else ""

    @override
    def source(self, topic: str, collection: str) -> SourceConfig:
        schema, _, table = collection.partition(".")
        return SourceConfig(
            topic=topic,
            table=table,
            format="debezium",
            transactions=self.config.transactions,
            collection=collection,
            schema_registry=self.config.schema_registry,
            database=self.config.database,
            schema_name=schema,
        )


@dataclass(frozen=True)
class TicdcTopics(TableTopics):
    """TiCDC's: its dispatcher rule's ``[prefix]{schema}[middle]{table}[suffix]``, one schema."""

    config: DatabaseConfig

    @override
    def describe(self) -> str:
        return self.topic_of(f"{self.config.database}.*")

    @override
    def topic_of(self, collection: str) -> str:
        schema, _, table = collection.partition(".")
        return (self.config.topics or "").replace("{schema}", schema).replace("{table}", table)

    @cached_property
    def _pattern(self) -> re.Pattern[str]:
        expression = (self.config.topics or "").replace("{schema}", self.config.database)
        before, _, after = expression.partition("{table}")
        return re.compile(f"{re.escape(before)}({_TABLE_TEXT}){re.escape(after)}")

    @override
    def collection(self, topic: str) -> str:
        found = self._pattern.fullmatch(topic)
        return f"{self.config.database}.{found.group(1)}" if found else ""

    @override
    def source(self, topic: str, collection: str) -> SourceConfig:
        _, _, table = collection.partition(".")
        return SourceConfig(
            topic=topic, table=table, format="canal-json", database=self.config.database
        )


def follows(databases: Sequence[DatabaseConfig], transactions: str, collection: str) -> bool:
    """Whether an entry of ``databases`` with that transaction topic takes ``collection``."""
    return any(d.transactions == transactions and d.follows(collection) for d in databases)
