"""What the config refuses across its sections: impossible combinations, each at its key path.

A section refuses its own options' combinations (``sections.py``); these span several: a
source's format against the encoder's (Avro needs each table's columns; ``backfill`` needs
Avro), the sink's single topic against several tables, a CDC query against its one declared
table, a Debezium initial scan against its transaction topic, ``end_time`` against the
cursor and the scan's mode, a dead-letter topic against ``on_error``. Every problem is
gathered, so one ``highwater validate`` run shows them all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .changefeed import ChangefeedConfig


def cross_section_problems(config: ChangefeedConfig) -> list[tuple[str, str]]:
    """``(key path, reason)`` of every impossible combination across ``config``'s sections."""
    problems: list[tuple[str, str]] = []
    if not config.sources and not config.databases:
        problems.append(("sources", "a source topic or a databases entry is needed"))  # loading
    _sources(config, problems)
    _formats(config, problems)
    _named_keys(config, problems)
    if config.end_time is not None and config.initial_scan.mode == "only":
        problems.append(("end_time", "cannot be used with initial_scan.mode: only"))
    if (
        config.cursor is not None
        and config.end_time is not None
        and config.end_time <= config.cursor
    ):
        problems.append(("end_time", f"must be after cursor ({config.cursor})"))
    if (
        config.dlq_topic is not None
        and config.on_error == "fail"
        and config.oversized_rows != "dlq"
    ):
        problems.append(
            ("dlq_topic", "is only used with on_error: dlq or pause, or oversized_rows: dlq")
        )
    if config.oversized_rows == "fail" and config.on_error == "dlq":
        problems.append(
            (
                "oversized_rows",
                "'fail' cannot be used with on_error: dlq (a run that diverts its bad records "
                "stops at none; use dlq or claim_check)",
            )
        )
    if (config.oversized_rows == "claim_check") != (config.claim_store is not None):
        problems.append(
            (
                "claim_store",
                "is needed by oversized_rows: claim_check"
                if config.claim_store is None
                else "is only used with oversized_rows: claim_check",
            )
        )
    return problems


def _sources(config: ChangefeedConfig, problems: list[tuple[str, str]]) -> None:
    if config.sink.topic_name is not None and len(config.sources) > 1:
        problems.append(
            (
                "sink.topic_name",
                "cannot hold several tables: rows of different tables could have the same "
                "key (and in Avro each table's envelope needs its own <topic>-value "
                "subject); use topic_prefix, one topic per table",
            )
        )
    seen_topics: set[str] = set()
    seen_tables: set[str] = set()
    for i, source in enumerate(config.sources):
        if source.topic in seen_topics:
            problems.append((f"sources[{i}].topic", f"topic {source.topic!r} listed twice"))
        if source.table in seen_tables and config.sink.topic_name is None:
            problems.append((f"sources[{i}].table", f"table {source.table!r} listed twice"))
        seen_topics.add(source.topic)
        seen_tables.add(source.table)
    _avro_tables(config, problems)
    for option in ("select", "where"):
        if getattr(config.encoder, option) is None:
            continue
        if len(config.sources) != 1:
            problems.append(
                (f"encoder.{option}", "a CDC query works on one table; list one source")
            )
        elif config.sources[0].table_schema is None:
            problems.append(
                (
                    f"encoder.{option}",
                    "a CDC query needs the table's columns: declare sources[0].table_schema",
                )
            )


def _avro_tables(config: ChangefeedConfig, problems: list[tuple[str, str]]) -> None:
    """Avro needs each table's columns: declared, or from the source's (Debezium, canal)."""
    if config.encoder.format != "avro":
        if config.schema_change_policy == "backfill":
            problems.append(
                (
                    "schema_change_policy",
                    "backfill re-emits a table whose Avro schema evolved: it needs "
                    "encoder.format: avro (JSON and protobuf outputs pass new columns through)",
                )
            )
        return
    for i, source in enumerate(config.sources):
        if source.table_schema is not None:
            continue
        if source.format not in ("debezium", "canal-json"):
            problems.append(
                (
                    f"sources[{i}].table_schema",
                    "is required with encoder.format: avro (the columns and their "
                    f"types): format {source.format} carries none to derive them from",
                )
            )
        elif config.schema_change_policy == "stop":
            problems.append(
                (
                    "schema_change_policy",
                    f"stop needs sources[{i}].table_schema: a schema derived from "
                    "the source's grows with its table (evolve)",
                )
            )


def _named_keys(config: ChangefeedConfig, problems: list[tuple[str, str]]) -> None:
    """Outputs whose keys name their columns: a native source must declare them."""
    encoder = config.encoder
    # enriched's key (and the value's, key_in_value) is an object of the key's columns; a
    # protobuf key is a map of them
    named = encoder.key_column is not None and not encoder.key_in_value
    needs = encoder.envelope == "enriched" or encoder.format == "protobuf"
    what = "enriched" if encoder.envelope == "enriched" else "format: protobuf"
    for i, source in enumerate(config.sources):
        declared = source.declared_schema
        if needs and source.format == "native" and declared is None and not named:
            problems.append(
                (
                    f"sources[{i}].primary_key",
                    f"is needed with {what} (with table_schema): its key names the key's "
                    "columns, and a native source's key names none",
                )
            )
        schema = "schema" in encoder.enriched_properties
        if schema and encoder.format == "json" and declared is None:
            problems.append(
                (
                    f"sources[{i}].table_schema",
                    "is needed with enriched_properties: [schema] in JSON: the Kafka Connect "
                    "schema beside each value is the declared table's",
                )
            )


def _formats(config: ChangefeedConfig, problems: list[tuple[str, str]]) -> None:
    key_column = config.encoder.key_column
    for i, source in enumerate(config.sources):
        declared = source.declared_schema
        columns = set() if declared is None else {f["name"] for f in declared.record["fields"]}
        for option, column in (
            ("key_column", key_column),
            ("headers_json_column_name", config.encoder.headers_json_column_name),
        ):
            if column is not None and declared is not None and column not in columns:
                problems.append(
                    (f"sources[{i}].table_schema", f"has no column {column!r} ({option})")
                )
        if source.schema_registry is not None and source.format != "debezium":
            problems.append((f"sources[{i}].schema_registry", "is only used with format: debezium"))
        if source.format == "debezium" and config.scan_mode != "no" and not source.transactions:
            problems.append(
                (
                    f"sources[{i}].transactions",
                    "the initial scan of a Debezium topic needs its transaction topic: the "
                    "snapshot's time is a commit it lists, and only it tells when every "
                    "change at or below that time was read (or use initial_scan: no)",
                )
            )
