"""The ``highwater`` command.

    highwater validate --config cf.yaml     check a config; every problem named by key path
    highwater run --config cf.yaml          spark-submit the changefeed
    highwater fetch-jars                    get the JVM jars a changefeed runs with (once)
    highwater changefeed list | query ID    the job status (state, high-water, scan progress)
    highwater safepoint set | delete | query  hold source data back from GC (operators)
    highwater gc run [--once]               trim the source topics below the GC safe point
    highwater server                        the REST API (safepoints, changefeeds)
    highwater tail CHANGEFEED [--json]      a changefeed's output as resolved windows
    highwater apply CHANGEFEED --dsn DSN    ... applied to PostgreSQL tables, exactly once
    highwater dev …                         broker, jars, Kafka CLI, generator, demo

Errors of ours print as one clear message (no traceback) and exit non-zero
(``reporting_errors``: 2 for a config the user must fix, 75 for one a new run may not meet,
1 for anything else). ``--help`` prints :data:`HELP`, plain text, not this docstring.

More command groups plug in through the ``highwater.commands`` entry points (a function that
adds its sub-commands): ``highwater dev`` is one, declared in ``pyproject.toml``, so this
module never imports the development tools.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from importlib.metadata import entry_points
from pathlib import Path

from highwater_consumer.cli import add_commands as add_consumer_commands
from highwater_consumer.output import Output
from pipeline.config import load_config
from pipeline.control.cli import add_operator_commands
from pipeline.runtime import jars
from pipeline.runtime.process import reporting_errors, state_dir
from pipeline.runtime.submit import (
    printable,
    spark_submit_command,
    spark_submit_env,
    supervise,
)

PLUGIN_GROUP = "highwater.commands"
HELP = """Highwater: changefeeds from Kafka change topics, on Spark Structured Streaming.

  highwater validate --config cf.yaml     check a config; every problem named by key path
  highwater run --config cf.yaml          spark-submit the changefeed
  highwater changefeed list | query ID    the job status (state, high-water, scan progress)
  highwater tail CHANGEFEED [--json]      a changefeed's output as resolved windows
  highwater apply CHANGEFEED --dsn DSN    ... applied to PostgreSQL tables, exactly once"""
EXIT_CODES = (
    "exit status: 0 done; 2 a config or argument to fix; 75 an error a new run may not meet "
    "(run it again); 1 any other error; 130 interrupted"
)


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree."""
    parser = argparse.ArgumentParser(
        prog="highwater",
        description=HELP,
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    commands = parser.add_subparsers(dest="command", required=True)

    validate = commands.add_parser("validate", help="check a changefeed config")
    validate.add_argument("--config", required=True, type=Path, help="the changefeed's YAML")
    validate.set_defaults(handler=_validate)

    run = commands.add_parser("run", help="run a changefeed with spark-submit")
    run.add_argument("--config", required=True, type=Path, help="the changefeed's YAML")
    run.add_argument("--dry-run", action="store_true", help="print the command, do not run it")
    run.set_defaults(handler=_run)

    fetch = commands.add_parser(
        "fetch-jars",
        help="fetch Spark's Kafka connector and build our Java against the installed Spark "
        "(Maven and a JDK, once; a no-op when current)",
    )
    fetch.add_argument(
        "--iceberg",
        action="store_true",
        help="also Iceberg's Spark runtime, for highwater apply --catalog … --engine spark",
    )
    fetch.set_defaults(handler=_fetch_jars)

    add_operator_commands(commands)
    add_consumer_commands(commands, engines={"spark": _apply_with_spark})
    for plugin in sorted(entry_points(group=PLUGIN_GROUP), key=lambda e: e.name):
        plugin.load()(commands)
    return parser


def _validate(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    said = [f"{s.topic}->{config.output_topic(s)}" for s in config.sources]
    said += [f"every table of {d.describe()} (databases)" for d in config.databases]
    print(f"{args.config}: ok (changefeed {config.changefeed_id}: {', '.join(said)})")
    return 0


def _run(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    command = spark_submit_command(args.config, config, state_dir() / "submit")
    print(printable(command, spark_submit_env({}, config.spark.master)), file=sys.stderr)
    if args.dry_run:
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    return supervise(command, spark_submit_env(dict(os.environ), config.spark.master))


def _fetch_jars(args: argparse.Namespace) -> int:
    done = jars.fetch_runtime()
    if args.iceberg:
        iceberg = jars.iceberg_spark_set()
        done[iceberg.name] = iceberg.fetch()
    for name, fetched in done.items():
        where = jars.jars_root() / name
        print(f"{name} jars: {'fetched into' if fetched else 'already in'} {where}")
    return 0


def _apply_with_spark(args: argparse.Namespace, output: Output, properties: dict[str, str]) -> int:
    """``highwater apply --catalog … --engine spark``: the Spark engine (pipeline/iceberg)."""
    from pipeline.iceberg import apply_with_spark  # noqa: PLC0415 - Spark only when asked

    return apply_with_spark(args, output, properties)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``highwater`` console script."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return reporting_errors(lambda: int(args.handler(args)))


if __name__ == "__main__":
    sys.exit(main())
