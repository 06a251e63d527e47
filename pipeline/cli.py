"""The ``highwater`` command.

    highwater validate --config cf.yaml     check a config; every problem named by key path
    highwater run --config cf.yaml          spark-submit the changefeed
    highwater changefeed list | query ID    the job status (state, high-water, scan progress)
    highwater dev …                         broker, jars, Kafka CLI, generator, demo

Errors of ours print as one clear message (no traceback) and exit non-zero: 2 for a config
the user must fix, 1 for anything else.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from pipeline.config import load_config
from pipeline.dev.cli import state_dir
from schemas.errors import ConfigError, HighwaterError


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree."""
    from pipeline.dev.cli import add_dev_commands  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="highwater", description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    commands = parser.add_subparsers(dest="command", required=True)

    validate = commands.add_parser("validate", help="check a changefeed config")
    validate.add_argument("--config", required=True, type=Path)
    validate.set_defaults(handler=_validate)

    run = commands.add_parser("run", help="run a changefeed with spark-submit")
    run.add_argument("--config", required=True, type=Path)
    run.add_argument("--dry-run", action="store_true", help="print the command, do not run it")
    run.set_defaults(handler=_run)

    changefeed = commands.add_parser("changefeed", help="read the changefeeds' job status")
    actions = changefeed.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="every changefeed's state and high-water mark")
    query = actions.add_parser("query", help="one changefeed's status and scan progress")
    query.add_argument("changefeed_id")
    query.add_argument(
        "--watch", action="store_true", help="redraw the scan's progress bar until it ends"
    )
    query.add_argument("--interval", type=float, default=2.0, help="seconds between redraws")
    for action in (listing, query):
        action.add_argument(
            "--config", type=Path, help="take the cluster and the jobs topic from this config"
        )
        action.add_argument(
            "--bootstrap-servers",
            default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"),
        )
        action.add_argument("--topic", default=None, help="the jobs topic (_highwater_jobs)")
    listing.set_defaults(handler=_list_changefeeds)
    query.set_defaults(handler=_query_changefeed)

    add_dev_commands(commands)
    return parser


def _validate(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    sources = ", ".join(f"{s.topic}->{config.output_topic(s)}" for s in config.sources)
    print(f"{args.config}: ok (changefeed {config.changefeed_id}: {sources})")
    return 0


def _run(args: argparse.Namespace) -> int:
    from pipeline.submit import spark_submit_command, spark_submit_env, supervise  # noqa: PLC0415

    config = load_config(args.config)
    command = spark_submit_command(args.config, config, state_dir() / "submit")
    print(" ".join(command), file=sys.stderr)
    if args.dry_run:
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    return supervise(command, spark_submit_env(dict(os.environ), config.spark.master))


def _jobs(args: argparse.Namespace) -> dict[str, bytes]:
    """Every status record in the jobs topic named by ``args``."""
    from pipeline.kafka_clients import client_config  # noqa: PLC0415
    from sinks.compacted import CompactedTopic  # noqa: PLC0415

    if args.config is not None:
        config = load_config(args.config)
        client, topic = client_config(config.sink_kafka), config.jobs.topic
    else:
        client, topic = {"bootstrap.servers": args.bootstrap_servers}, "_highwater_jobs"
    jobs = CompactedTopic(client, args.topic or topic)
    try:
        return jobs.read_all()
    finally:
        jobs.close()


def _list_changefeeds(args: argparse.Namespace) -> int:
    from pipeline.status import JobStatus  # noqa: PLC0415

    rows = [JobStatus.decode(data) for data in _jobs(args).values()]
    print(f"{'CHANGEFEED':24} {'STATE':9} {'HIGH-WATER':30} {'UPDATED':29} SCAN")
    for status in sorted(rows, key=lambda r: r.changefeed_id):
        scan = status.scan
        done = "" if scan is None else f"{scan['chunks_done']}/{scan['chunks_total']} chunks"
        print(
            f"{status.changefeed_id:24} {status.state:9} {status.high_water or '-'!s:30} "
            f"{status.updated_at:29} {done}"
        )
    return 0


def _query_changefeed(args: argparse.Namespace) -> int:
    import time  # noqa: PLC0415

    from pipeline.scan import progress_line  # noqa: PLC0415
    from pipeline.status import JobStatus  # noqa: PLC0415

    data = _jobs(args).get(args.changefeed_id)
    if data is None:
        raise HighwaterError(f"no changefeed {args.changefeed_id!r} in the jobs topic")
    status = JobStatus.decode(data)
    for name, value in (
        ("state", status.state),
        ("high-water", status.high_water),
        ("statement time", status.statement_time),
        ("last marker", status.last_marker),
        ("updated", status.updated_at),
        ("error", status.error),
    ):
        if value is not None:
            print(f"{name:15} {value}")
    if status.scan is not None:
        print(f"{'initial scan':15} {progress_line(status.scan)}")
    while args.watch and status.state == "scanning":
        time.sleep(args.interval)
        status = JobStatus.decode(_jobs(args).get(args.changefeed_id) or data)
        if status.scan is not None:
            end = "\r" if sys.stdout.isatty() else "\n"
            print(f"{'initial scan':15} {progress_line(status.scan)}", end=end, flush=True)
    if args.watch:
        print(f"\n{'state':15} {status.state}")
    return 0 if status.state != "failed" else 1


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``highwater`` console script."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return reporting_errors(lambda: int(args.handler(args)))


def reporting_errors(action: Callable[[], int]) -> int:
    """Run ``action``; our errors become one clear line on stderr and an exit code."""
    try:
        return action()
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    except HighwaterError as exc:
        print(f"highwater: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
