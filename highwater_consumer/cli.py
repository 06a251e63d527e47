"""``highwater tail`` and ``highwater apply``: the consumer library from the command line.

    highwater tail CHANGEFEED [--json]            windows as they resolve, for people or scripts
    highwater apply CHANGEFEED --dsn DSN          windows into PostgreSQL, exactly once
    highwater apply CHANGEFEED --catalog K=V …    windows into Iceberg tables, consistent cuts
    highwater iceberg maintain CHANGEFEED …       compact, expire and clean those tables

The output is found from the changefeed's job status (``--jobs-topic``), or given with
``--topic`` (then ``--format``, ``--registry`` or ``--schema-topic`` say how it is written).
Also ``python -m highwater_consumer``, where Highwater's changefeed side is not installed.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import decimal
import logging
import os
import sys
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from schemas.errors import HighwaterError
from schemas.hlc import Hlc
from schemas.jsontext import Number

from .consumer import ChangefeedConsumer
from .dead_letters import DeadLetters
from .decoding import BadRecord, ConsumerError
from .iceberg_cli import add_command as add_iceberg_command
from .output import JOBS_TOPIC, Output
from .windows import Row, Window

# An Iceberg engine other than the local one: (arguments, output, catalog properties) -> status.
# Highwater's command hands over ``spark`` (pipeline/iceberg): this library imports no Spark.
Engine = Callable[[argparse.Namespace, Output, dict[str, str]], int]


def add_commands(commands: Any, engines: Mapping[str, Engine] | None = None) -> None:
    """Add ``tail`` and ``apply`` to a command tree (``highwater``'s, or this module's own).

    ``engines``: the Iceberg engines besides the local one that ``apply --engine`` offers.
    """
    tail = commands.add_parser("tail", help="print a changefeed's windows as they resolve")
    _output_args(tail)
    tail.add_argument("--json", action="store_true", help="one JSON object a line, for scripts")
    tail.set_defaults(handler=_tail)
    apply = commands.add_parser(
        "apply", help="apply a changefeed's windows to PostgreSQL or Iceberg, exactly once"
    )
    _output_args(apply)
    target = apply.add_mutually_exclusive_group(required=True)
    target.add_argument("--dsn", help="PostgreSQL: the libpq connection string of the target")
    target.add_argument(
        "--catalog",
        action="append",
        metavar="KEY=VALUE",
        help="Iceberg: a pyiceberg catalog property (repeat it); without type= or uri=, the "
        "embedded SQLite catalog in warehouse=PATH (default .highwater/iceberg)",
    )
    apply.add_argument(
        "--namespace", help="Iceberg: the namespace of the tables (with --catalog; highwater)"
    )
    apply.add_argument(
        "--schema-changes",
        choices=["evolve", "stop"],
        help="Iceberg: a column added upstream is added to the table (evolve, the default), "
        "or stops the applier naming it (stop); a retyped column always stops it",
    )
    apply.add_argument(
        "--spill",
        type=int,
        metavar="ROWS",
        help="Iceberg: the most rows held per table in a window before they are written ahead "
        "as data files, committed with the window (100000)",
    )
    apply.add_argument(
        "--table",
        action="append",
        default=[],
        metavar="TABLE=TARGET",
        help="the target of a changefeed table (default: the table of the same name)",
    )
    apply.add_argument(
        "--group",
        help="the consumer group (PostgreSQL: highwater-apply-<changefeed>; Iceberg: one per "
        "catalog and namespace)",
    )
    _iceberg_args(apply)
    apply.set_defaults(handler=_apply, engines=dict(engines or {}))
    add_iceberg_command(commands)


def _iceberg_args(apply: argparse.ArgumentParser) -> None:
    """``apply``'s Iceberg options: bad records, and the engine."""
    apply.add_argument(
        "--on-error",
        choices=["fail", "dlq"],
        default="fail",
        help="Iceberg: a record its table cannot hold stops the applier (fail), or goes to the "
        "changefeed's dead-letter topic, named (dlq)",
    )
    apply.add_argument(
        "--dlq-topic", help="with --on-error dlq: this topic (default: the changefeed's)"
    )
    apply.add_argument(
        "--catalog-patience",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="Iceberg: how long a catalog that does not answer is waited for, with back-off, "
        "before the applier stops (300)",
    )
    apply.add_argument(
        "--engine",
        default="local",
        help="Iceberg: local (pyiceberg in this process, the default) or spark (Spark's "
        "Iceberg runtime on --master; a REST catalog; Highwater's `highwater apply`)",
    )
    apply.add_argument(
        "--master", default="local[*]", help="--engine spark: the Spark master (local[*])"
    )
    apply.add_argument(
        "--python-env",
        default="none",
        help="--engine spark off local mode: the executors' Python, as a changefeed's "
        "spark.python_env (none: the driver's interpreter path; auto; or a .tar.gz)",
    )
    apply.add_argument(
        "--max-offsets",
        type=int,
        help="--engine spark: the most records a step reads of a partition (default: all)",
    )


def _output_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("changefeed", help="the changefeed id")
    parser.add_argument(
        "--bootstrap-servers",
        default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"),
        help="the output's brokers ($KAFKA_BOOTSTRAP_SERVERS, else 127.0.0.1:9092)",
    )
    parser.add_argument("--jobs-topic", default=JOBS_TOPIC, help=f"({JOBS_TOPIC})")
    parser.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="TOPIC[=TABLE]",
        help="read these output topics instead of the job status's",
    )
    parser.add_argument(
        "--format", choices=["json", "avro", "protobuf"], default="json", help="with --topic"
    )
    parser.add_argument("--registry", help="the schema registry's URL (Avro, with --topic)")
    parser.add_argument("--registry-auth", help="USER:PASSWORD for the registry")
    parser.add_argument("--schema-topic", help="registry-free Avro's schema topic (with --topic)")
    parser.add_argument("--until", type=Hlc.parse, help="stop after the window at or above R")
    parser.add_argument("--idle", type=float, help="stop after this many seconds of no records")


def output_of(args: argparse.Namespace) -> Output:
    """The output the arguments name."""
    auth = {} if args.registry_auth is None else {"basic.auth.user.info": args.registry_auth}
    if not args.topic:
        return Output.of_changefeed(
            args.bootstrap_servers, args.changefeed, jobs_topic=args.jobs_topic, registry=auth
        )
    topics = {}
    for given in args.topic:
        topic, _, table = given.partition("=")
        topics[topic] = table or topic
    return Output(
        bootstrap=args.bootstrap_servers,
        topics=topics,
        format=args.format,
        registry=None if args.registry is None else {"url": args.registry, **auth},
        schema_topic=args.schema_topic,
    )


def _plain(value: Any) -> Any:
    if isinstance(value, Number):
        return orjson.Fragment(value.text)
    if isinstance(value, decimal.Decimal):
        return orjson.Fragment(str(value)) if value.is_finite() else str(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode()
    if isinstance(value, (datetime.date, datetime.time, uuid.UUID)):
        return str(value)
    raise TypeError(f"{type(value).__name__} has no JSON form")


def _json(value: Any) -> str:
    return orjson.dumps(value, default=_plain).decode()


def _printer(as_json: bool) -> Callable[[Window], None]:
    def readable(window: Window) -> None:
        for row in window.rows:
            what = "delete" if row.after is None else _json(row.after)
            print(f"  {row.table} {_json(row.key_values)} @{row.updated} {what}")
        if window.last:
            print(f"resolved {window.resolved}", flush=True)

    def scripted(window: Window) -> None:
        for row in window.rows:
            print(_json(_row(row)))
        if window.last:
            print(_json({"resolved": str(window.resolved)}), flush=True)

    return scripted if as_json else readable


def _row(row: Row) -> dict[str, Any]:
    return {
        "table": row.table,
        "key": row.key_values,
        "updated": str(row.updated),
        "after": row.after,
        "before": row.before,
    }


def _tail(args: argparse.Namespace) -> int:
    bad: list[BadRecord] = []

    def report(record: BadRecord) -> None:
        bad.append(record)
        print(f"bad record {record}", file=sys.stderr, flush=True)

    show = _printer(args.json)
    group = f"highwater-tail-{uuid.uuid4().hex[:12]}"  # reads it all, commits nothing
    with ChangefeedConsumer(output_of(args), group, on_bad=report) as consumer:
        for window in consumer.windows(until=args.until, idle=args.idle):
            show(window)
    return 1 if bad else 0


def _apply(args: argparse.Namespace) -> int:
    if args.catalog is not None:
        return _apply_iceberg(args)
    for flag in ("namespace", "schema_changes", "spill"):
        if getattr(args, flag) is not None:
            name = "--" + flag.replace("_", "-")
            raise ConsumerError(f"{name} is Iceberg's: give it with --catalog, not --dsn")
    if args.engine != "local":
        raise ConsumerError("--engine is Iceberg's: give it with --catalog, not --dsn")
    if args.on_error != "fail" or args.dlq_topic is not None:
        raise ConsumerError("--on-error dlq is Iceberg's: PostgreSQL stops at what it refuses")
    from .postgres import PostgresApplier, apply  # noqa: PLC0415 - psycopg only here

    tables = dict(t.split("=", 1) for t in args.table)
    applier = PostgresApplier(args.dsn, args.changefeed, tables)
    try:
        after = applier.start()
        group = args.group or f"highwater-apply-{args.changefeed}"
        output = output_of(args)
        # JSON: columnar windows (the C reader's scan, COPY text by Arrow's kernels); Avro's
        # records are read by the per-row decoder either way, so per row
        columnar = output.format == "json" and _arrow()
        consumer = ChangefeedConsumer(output, group, after=after, columnar=columnar)
        with consumer:
            windows = apply(consumer, applier, until=args.until, idle=args.idle)
    finally:
        applier.close()
    print(f"applied {windows} windows, {applier.applied} rows", file=sys.stderr)
    return 0


def _arrow() -> bool:
    """Whether pyarrow is there (the [arrow] extra, which [postgres] pulls in)."""
    try:
        import pyarrow  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def _apply_iceberg(args: argparse.Namespace) -> int:
    from .iceberg import NAMESPACE, IcebergApplier, apply  # noqa: PLC0415 - the [iceberg] extra
    from .iceberg.catalog import default_group, parse_pairs  # noqa: PLC0415

    output, properties = output_of(args), parse_pairs(args.catalog)
    if args.engine != "local":
        engine = args.engines.get(args.engine)
        if engine is None:
            offered = ", ".join(["local", *sorted(args.engines)])
            raise ConsumerError(
                f"--engine {args.engine}: not an engine here (offered: {offered}); the spark "
                f"engine is Highwater's own `highwater apply`, not the consumer library's"
            )
        return int(engine(args, output, properties))
    namespace = args.namespace or NAMESPACE
    applier = IcebergApplier(
        properties,
        args.changefeed,
        namespace=namespace,
        schemas=output.schemas,
        names=dict(t.split("=", 1) for t in args.table),
        dead_letters=_dead_letters(args, output),
        schema_changes=args.schema_changes or "evolve",
        spill=100_000 if args.spill is None else args.spill,
        patience=args.catalog_patience,
    )
    try:
        after = applier.start(output.topics.values())
        group = args.group or default_group(args.changefeed, properties, namespace)
        with ChangefeedConsumer(output, group, after=after) as consumer:
            windows = apply(consumer, applier, until=args.until, idle=args.idle)
    finally:
        applier.close()
    print(f"applied {windows} windows, {applier.applied} rows", file=sys.stderr)
    return 0


def _dead_letters(args: argparse.Namespace, output: Output) -> DeadLetters | None:
    """Where ``--on-error dlq`` sends what a target cannot hold (None: it stops the applier)."""
    if args.on_error != "dlq":
        if args.dlq_topic is not None:
            raise ConsumerError("--dlq-topic is only used with --on-error dlq")
        return None
    topic = args.dlq_topic or output.dead_letters or f"_highwater_dlq_{args.changefeed}"
    return DeadLetters(output.bootstrap, topic, output.kafka)


def main(argv: list[str] | None = None) -> int:
    """``python -m highwater_consumer``."""
    parser = argparse.ArgumentParser(prog="highwater_consumer", description=__doc__.split("\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.handler(args))
    except HighwaterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
