"""The operators' commands: job status, safepoints, GC and the REST API server.

    highwater changefeed create --config cf.yaml
    highwater changefeed update ID --config cf.yaml      (while paused)
    highwater changefeed pause | resume [--skip-bad-record] | remove ID
    highwater changefeed list | query ID [--watch]
    highwater safepoint set --service-id-suffix S --start-ts T --ttl SECONDS
    highwater safepoint delete --service-id-suffix S
    highwater safepoint query
    highwater gc run --topic T [--once] [--interval 5m] [--gc-life-time 24h]
    highwater server [--port 8300] [--token …] [--no-run] [--sample-every 10]

Each finds the cluster from ``--config cf.yaml`` (a changefeed's: Kafka settings,
``safepoints.topic``, ``safepoints.cluster``, ``jobs.topic``) or from the flags.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pipeline.config import SchemaRegistryConfig, load_config, parse_duration
from pipeline.core.ledger.backfill import progress_line
from pipeline.core.operators.lifecycle import statuses_of
from pipeline.core.operators.status import JobStatus
from pipeline.core.progress.safepoints import (
    DEFAULT_SUFFIX,
    DEFAULT_TTL,
    SafepointRegistry,
    retention_warnings,
)
from pipeline.runtime.process import state_dir
from schemas.errors import ConfigError, HighwaterError
from schemas.hlc import parse_time
from sinks.admin import topic_configs

from .changefeeds import Changefeeds
from .context import OperatorContext
from .gc import GarbageCollector


def add_operator_commands(commands: Any) -> None:
    """Add the operators' commands to the ``highwater`` command tree."""
    for add in (_changefeed_commands, _safepoint_commands, _gc_and_server_commands):
        for command in add(commands):
            _cluster_args(command)


def _changefeed_commands(commands: Any) -> list[argparse.ArgumentParser]:
    changefeed = commands.add_parser(
        "changefeed", help="create, update, pause, resume, remove changefeeds; read their status"
    )
    actions = changefeed.add_subparsers(dest="action", required=True)
    create = actions.add_parser(
        "create", help="a new changefeed from --config (the server runs it)"
    )
    create.set_defaults(handler=_create_changefeed)
    update = actions.add_parser(
        "update",
        help="a paused changefeed's changed --config: add or drop tables, change safe options",
    )
    update.add_argument("changefeed_id", help="the changefeed to update (paused)")
    update.set_defaults(handler=_update_changefeed)
    verbs = [create, update]
    for verb, help_ in (
        ("pause", "finish the batch, checkpoint and stop; the safepoint stays held"),
        ("resume", "go on from the checkpoint"),
        ("remove", "stop for good and release the safepoint"),
    ):
        parser = actions.add_parser(verb, help=help_)
        parser.add_argument("changefeed_id", help="the changefeed")
        parser.set_defaults(handler=_lifecycle, verb=verb)
        verbs.append(parser)
    verbs[3].add_argument(
        "--skip-bad-record",
        action="store_true",
        help="send the record it paused at (on_error: pause) to the dead-letter topic",
    )
    listing = actions.add_parser("list", help="every changefeed's state and high-water mark")
    query = actions.add_parser("query", help="one changefeed's status and scan progress")
    query.add_argument("changefeed_id", help="the changefeed")
    query.add_argument(
        "--watch", action="store_true", help="redraw the scan's progress bar until it ends"
    )
    query.add_argument("--interval", type=float, default=2.0, help="seconds between redraws")
    listing.set_defaults(handler=_list_changefeeds)
    query.set_defaults(handler=_query_changefeed)
    return [*verbs, listing, query]


def _create_changefeed(args: argparse.Namespace) -> int:
    if args.config is None:
        raise ConfigError([("--config", "the changefeed's YAML config is required")])
    text = args.config.read_text(encoding="utf-8")
    created = Changefeeds(operator_context(args)).create(text, str(args.config.resolve().parent))
    print(f"created changefeed {created.changefeed_id} (desired: {created.desired})")
    return 0


def _update_changefeed(args: argparse.Namespace) -> int:
    if args.config is None:
        raise ConfigError([("--config", "the changefeed's changed YAML config is required")])
    text = args.config.read_text(encoding="utf-8")
    changefeeds = Changefeeds(operator_context(args))
    updated, change = changefeeds.update(
        args.changefeed_id, text, str(args.config.resolve().parent)
    )
    print(f"changefeed {updated.changefeed_id}: {change.describe()}; resume it to apply")
    return 0


def _lifecycle(args: argparse.Namespace) -> int:
    changefeeds = Changefeeds(operator_context(args))
    if args.verb == "pause":
        done = changefeeds.pause(args.changefeed_id)
    elif args.verb == "resume":
        done = changefeeds.resume(args.changefeed_id, skip_bad_record=args.skip_bad_record)
    else:
        done = changefeeds.remove(args.changefeed_id)
    print(f"changefeed {done.changefeed_id}: desired {done.desired}")
    return 0


def _safepoint_commands(commands: Any) -> list[argparse.ArgumentParser]:
    safepoint = commands.add_parser("safepoint", help="operators' safepoints that hold GC")
    verbs = safepoint.add_subparsers(dest="action", required=True)
    set_ = verbs.add_parser("set", help="create or refresh a safepoint")
    set_.add_argument(
        "--start-ts", required=True, help="HLC, RFC 3339, 'now', or relative: --start-ts=-1h"
    )
    set_.add_argument("--ttl", type=float, default=DEFAULT_TTL, help="seconds (86400)")
    delete = verbs.add_parser("delete", help="delete a safepoint")
    for verb in (set_, delete):
        verb.add_argument(
            "--service-id-suffix",
            default=DEFAULT_SUFFIX,
            help="names the safepoint highwater-<cluster>-<suffix>",
        )
    query_sp = verbs.add_parser("query", help="every safepoint and the GC safe point")
    query_sp.add_argument(
        "--topic",
        action="append",
        default=[],
        dest="source_topics",
        help="also check this source topic's retention (repeatable)",
    )
    set_.set_defaults(handler=_safepoint_set)
    delete.set_defaults(handler=_safepoint_delete)
    query_sp.set_defaults(handler=_safepoint_query)
    return [set_, delete, query_sp]


def _gc_and_server_commands(commands: Any) -> list[argparse.ArgumentParser]:
    gc = commands.add_parser("gc", help="garbage-collect the managed source topics")
    gc_verbs = gc.add_subparsers(dest="action", required=True)
    gc_run = gc_verbs.add_parser("run", help="move the GC safe point and trim below it")
    gc_run.add_argument(
        "--topic",
        action="append",
        required=True,
        dest="source_topics",
        help="a managed source topic (repeatable)",
    )
    gc_run.add_argument("--gc-life-time", default="24h", help="keep at least this much (24h)")
    gc_run.add_argument("--once", action="store_true", help="one pass, then exit")
    gc_run.add_argument("--interval", default="5m", help="between passes (5m)")
    gc_run.add_argument("--format", default="native", help="the source topics' format")
    gc_run.add_argument(
        "--schema-registry",
        default=None,
        help="debezium: the registry of the topics' Avro records (their times are read)",
    )
    gc_run.set_defaults(handler=_gc_run)

    server = commands.add_parser("server", help="serve the REST API")
    server.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    server.add_argument("--port", type=int, default=8300, help="the port to listen on")
    server.add_argument(
        "--token", default=None, help="bearer token (default: $HIGHWATER_API_TOKEN)"
    )
    server.add_argument(
        "--no-run",
        action="store_true",
        help="serve the API only; do not run the changefeeds created through it",
    )
    server.add_argument(
        "--sample-every",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how often the console's lag history, rows/s and dead letters are sampled",
    )
    server.set_defaults(handler=_server)
    return [gc_run, server]


def _list_changefeeds(args: argparse.Namespace) -> int:
    context = operator_context(args)
    unreadable = []
    for key, data in sorted(statuses_of(context.job_records()).items()):
        try:
            JobStatus.decode(data)
        except HighwaterError as exc:
            unreadable.append(f"WARNING: topic {context.jobs_topic}, key {key!r}: {exc}")
    print(f"{'CHANGEFEED':24} {'DESIRED':9} {'STATE':9} {'HIGH-WATER':30} {'UPDATED':29} SCAN")
    for changefeed in Changefeeds(context).all().values():
        status = changefeed.status or JobStatus(changefeed.changefeed_id, "-", updated_at="-")
        scan = status.scan
        done = "" if scan is None else f"{scan['chunks_done']}/{scan['chunks_total']} chunks"
        print(
            f"{changefeed.changefeed_id:24} {changefeed.desired or '-':9} {status.state:9} "
            f"{status.high_water or '-'!s:30} {status.updated_at:29} {done}"
        )
    for line in unreadable:
        print(line)
    return 0


def _delivery(status: JobStatus) -> str | None:
    """``exactly_once (run generation 3)``, or the delivery alone."""
    if status.delivery is None or status.generation is None:
        return status.delivery
    return f"{status.delivery} (run generation {status.generation})"


def _query_changefeed(args: argparse.Namespace) -> int:
    context = operator_context(args)
    found = Changefeeds(context).get(args.changefeed_id)
    spec = found.spec
    if spec is not None:
        print(f"{'desired':15} {spec.desired}" + (f" ({spec.reason})" if spec.reason else ""))
        if spec.bad_record is not None:
            print(f"{'bad record':15} {spec.bad_record}")
    if found.status is None:
        print(f"{'state':15} not started")
        return 0
    status = found.status
    for name, value in (
        ("state", status.state),
        ("high-water", status.high_water),
        ("statement time", status.statement_time),
        ("last marker", status.last_marker),
        ("updated", status.updated_at),
        ("metrics", status.metrics_url),
        ("delivery", _delivery(status)),
        ("error", status.error),
    ):
        if value is not None:
            print(f"{name:15} {value}")
    if status.safepoint is not None:
        held = status.safepoint
        print(f"{'safepoint':15} {held['service_id']} at {held['safepoint']}")
        print(f"{'':15} expires {held['expires_at']}")
    if status.scan is not None:
        print(f"{'initial scan':15} {progress_line(status.scan)}")
    for table, schema in sorted((status.schemas or {}).items()):
        print(f"{'schema':15} {table}: {schema_line(schema)}")
    for warning in status.warnings:
        print(f"WARNING: {warning}")
    while args.watch and status.state == "scanning":
        time.sleep(args.interval)
        status = Changefeeds(context).get(args.changefeed_id).status or status
        if status.scan is not None:
            end = "\r" if sys.stdout.isatty() else "\n"
            print(f"{'initial scan':15} {progress_line(status.scan)}", end=end, flush=True)
    if args.watch:
        print(f"\n{'state':15} {status.state}")
    return 0 if status.state != "failed" else 1


def schema_line(schema: dict[str, Any]) -> str:
    """A table's output schema in one line: its version, its columns, its last change."""
    line = f"{schema['version']}, {len(schema['columns'])} columns"
    if schema.get("added"):
        line += f"; added {', '.join(schema['added'])} at {schema['changed_at']}"
    return line


def _cluster_args(parser: argparse.ArgumentParser) -> None:
    """Where the safepoints live: a changefeed's config, or the flags."""
    parser.add_argument("--config", type=Path, help="take cluster, topics and Kafka from here")
    parser.add_argument(
        "--bootstrap-servers",
        default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"),
        help="the cluster's brokers ($KAFKA_BOOTSTRAP_SERVERS, else 127.0.0.1:9092)",
    )
    parser.add_argument("--cluster", default=None, help="the cluster name (default)")
    parser.add_argument("--safepoint-topic", default=None, help="(_highwater_safepoints)")
    parser.add_argument("--jobs-topic", default=None, help="(_highwater_jobs)")


def operator_context(args: argparse.Namespace) -> OperatorContext:
    """The Kafka client settings and topic names an operator command works on."""
    if args.config is not None:
        base = OperatorContext.of(load_config(args.config))
    else:
        base = OperatorContext({"bootstrap.servers": args.bootstrap_servers})
    return OperatorContext(
        base.client,
        args.safepoint_topic or base.safepoint_topic,
        args.cluster or base.cluster,
        args.jobs_topic or base.jobs_topic,
    )


def _registry(args: argparse.Namespace) -> SafepointRegistry:
    registry = operator_context(args).registry()
    registry.ensure()
    return registry


def _safepoint_set(args: argparse.Namespace) -> int:
    try:
        start = parse_time(args.start_ts)
    except ValueError as exc:
        raise ConfigError([("--start-ts", str(exc))]) from None
    registry = _registry(args)
    try:
        safepoint = registry.set_user(args.service_id_suffix, start, args.ttl)
    finally:
        registry.close()
    expires = safepoint.to_json()["expires_at"]
    print(f"set {safepoint.service_id} at {safepoint.safepoint} until {expires}")
    return 0


def _safepoint_delete(args: argparse.Namespace) -> int:
    registry = _registry(args)
    try:
        deleted = registry.delete_user(args.service_id_suffix)
    finally:
        registry.close()
    print(f"deleted {deleted.service_id} (was at {deleted.safepoint})")
    return 0


def _safepoint_query(args: argparse.Namespace) -> int:
    registry = _registry(args)
    try:
        state = registry.read()
    finally:
        registry.close()
    now = registry.clock()
    print(f"{'SERVICE ID':44} {'SAFEPOINT':31} {'EXPIRES AT':30} {'OWNER':24} STATE")
    for service_id, sp in sorted(state.safepoints.items()):
        record = sp.to_json()
        print(
            f"{service_id:44} {record['safepoint']:31} {record['expires_at']:30} "
            f"{sp.owner:24} {'expired' if sp.expired(now) else 'active'}"
        )
    print(f"GC safe point: {state.gc_safe_point}")
    for key, why in sorted(state.unreadable.items()):
        print(f"WARNING: topic {registry.topic}, key {key!r}: unreadable, skipped ({why})")
    topics = sorted(
        {t.topic for sp in state.safepoints.values() for t in sp.offsets} | set(args.source_topics)
    )
    context = operator_context(args)
    for warning in retention_warnings(topic_configs(context.client, topics)):
        print(f"WARNING: {warning}")
    return 0


def _gc_run(args: argparse.Namespace) -> int:
    life_time = _duration("--gc-life-time", args.gc_life_time)
    interval = _duration("--interval", args.interval)
    wire = None
    if args.schema_registry is not None:
        if args.format != "debezium":
            raise ConfigError([("--schema-registry", "is only used with --format debezium")])
        try:
            wire = SchemaRegistryConfig(url=args.schema_registry).client_config()
        except ValidationError as exc:
            raise ConfigError([("--schema-registry", exc.errors()[0]["msg"])]) from None
    context = operator_context(args)
    registry = _registry(args)
    collector = GarbageCollector(
        context.client,
        registry,
        dict.fromkeys(args.source_topics, args.format),
        life_time,
        registries=dict.fromkeys(args.source_topics, wire) if wire is not None else {},
    )
    try:
        while True:
            for line in collector.run_once().lines():
                print(line, flush=True)
            if args.once:
                return 0
            time.sleep(interval)
    finally:
        registry.close()


def _duration(option: str, text: str) -> float:
    try:
        value = parse_duration(float(text) if text.replace(".", "", 1).isdigit() else text)
    except ValueError as exc:
        raise ConfigError([(option, str(exc))]) from None
    assert isinstance(value, timedelta)  # noqa: S101 - parse_duration made one
    return value.total_seconds()


def _server(args: argparse.Namespace) -> int:
    from .server import serve  # noqa: PLC0415 - FastAPI only for this command

    token = args.token or os.environ.get("HIGHWATER_API_TOKEN")
    if not token:
        raise ConfigError([("--token", "a bearer token is required (or HIGHWATER_API_TOKEN)")])
    context = operator_context(args)
    supervisor = None
    if not args.no_run:
        from .supervisor import Supervisor  # noqa: PLC0415

        supervisor = Supervisor(context, state_dir() / "server" / context.cluster)
        supervisor.start()
    # the runs stop with the server: on its shutdown (SIGTERM ends the process right after)
    stop = None if supervisor is None else supervisor.stop
    try:
        serve(
            context,
            token,
            host=args.host,
            port=args.port,
            on_shutdown=stop,
            sample_every=args.sample_every,
        )
    finally:
        if supervisor is not None:
            supervisor.stop()  # ended otherwise (an error): stopping twice is harmless
    return 0
