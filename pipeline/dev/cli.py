"""``highwater dev …``: the tools the demo, the tests and the benchmarks stand on."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any

from pipeline.runtime import jars
from pipeline.runtime.process import state_dir
from schemas.errors import BrokerError

from .broker import EmbeddedKafka
from .cluster import KafkaCluster
from .debezium import CAPTURED, DATABASES, DebeziumUpstream, run_debezium_demo, sources_yaml
from .demo import run_demo
from .generator import GeneratorSpec, write
from .iceberg_rest import EmbeddedIcebergRest, IcebergRestInfo
from .kafka_tools import TOOLS, tool_command
from .postgres import EmbeddedPostgres
from .registry import EmbeddedRegistry
from .service import LocalService
from .spark_cluster import SparkCluster


def broker_for(args: argparse.Namespace) -> EmbeddedKafka:
    """The embedded broker named by ``--name`` (or placed by ``--dir``)."""
    directory = args.dir or state_dir() / "kafka" / args.name
    return EmbeddedKafka(directory, owned=False)


def bootstrap_for(args: argparse.Namespace) -> str:
    """``--bootstrap-servers``, else the running embedded broker's address."""
    if getattr(args, "bootstrap_servers", None):
        return str(args.bootstrap_servers)
    info = broker_for(args).status()
    if info is None:
        raise BrokerError(
            f"no embedded broker named {args.name!r} is running: start one with "
            f"'highwater dev kafka start --name {args.name}' or pass --bootstrap-servers"
        )
    return info.bootstrap_servers


def _broker_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", default="default", help="embedded broker name")
    parser.add_argument("--dir", type=Path, help="embedded broker folder (overrides --name)")


def add_dev_commands(commands: Any) -> None:
    """Attach ``dev`` and its subcommands to the top-level parser."""
    dev = commands.add_parser("dev", help="development tools").add_subparsers(
        dest="dev_command", required=True
    )
    dev.add_parser(
        "fetch-jars",
        help="fetch every JVM jar: the run-time ones (highwater fetch-jars) and the broker's, "
        "the registry's, Debezium's (no-op when present)",
    ).set_defaults(handler=_fetch_jars)
    dev.add_parser(
        "jvm-test", help="run the JUnit tests of our Java (pipeline/jvm/walk) with Maven"
    ).set_defaults(handler=_jvm_test)

    kafka = dev.add_parser("kafka", help="the embedded Kafka broker")
    kafka.add_argument("action", choices=("start", "stop", "status"))
    _broker_args(kafka)
    kafka.set_defaults(handler=_kafka)

    cluster = dev.add_parser(
        "cluster",
        help="a local cluster: three KRaft Kafka nodes (3 copies of each topic, "
        "min.insync.replicas=2) and a Spark standalone master with workers",
    )
    cluster.add_argument("action", choices=("start", "stop", "status"))
    cluster.add_argument("--name", default="default", help="local cluster name")
    cluster.add_argument("--dir", type=Path, help="local cluster folder (overrides --name)")
    cluster.add_argument("--brokers", type=int, default=3, help="Kafka nodes (first start only)")
    cluster.add_argument(
        "--workers", type=int, default=2, help="Spark workers, one core each (0: Kafka only)"
    )
    cluster.set_defaults(handler=_cluster)

    for name, what, handler in (
        ("registry", "the embedded schema registry (Apicurio)", _registry),
        ("postgres", "the embedded PostgreSQL (logical decoding on, for Debezium)", _postgres),
    ):
        service = dev.add_parser(name, help=what)
        service.add_argument("action", choices=("start", "stop", "status"))
        service.add_argument("--name", default="default", help=f"embedded {name} name")
        service.add_argument("--dir", type=Path, help=f"embedded {name} folder (overrides --name)")
        service.set_defaults(handler=handler)

    iceberg = dev.add_parser(
        "iceberg",
        help="Apache Iceberg's REST catalog server over a local warehouse (for highwater "
        "apply --catalog)",
    )
    iceberg.add_argument("action", choices=("start", "stop", "status"))
    iceberg.add_argument("--name", default="default", help="embedded catalog name")
    iceberg.add_argument("--dir", type=Path, help="embedded catalog folder (overrides --name)")
    iceberg.add_argument(
        "--port", type=int, help="its port (default: the last start's, else a free one)"
    )
    iceberg.add_argument(
        "--warehouse", type=Path, help="the warehouse folder (default: warehouse/ in its folder)"
    )
    iceberg.set_defaults(handler=_iceberg)

    debezium = dev.add_parser(
        "debezium",
        help="an embedded PostgreSQL or MariaDB, Debezium on Kafka Connect capturing its tables",
    )
    debezium.add_argument("action", choices=("start", "stop", "status"))
    debezium.add_argument(
        "--database", choices=DATABASES, default="postgres", help="the upstream database"
    )
    _broker_args(debezium)
    debezium.add_argument("--bootstrap-servers")
    debezium.add_argument(
        "--tables",
        help="schema.table,… to capture (they must exist; default public.orders, MariaDB's "
        "highwater.orders)",
    )
    debezium.add_argument("--prefix", default="pg", help="Debezium's topic.prefix")
    debezium.add_argument("--partitions", type=int, default=3, help="of the change topics")
    debezium.set_defaults(handler=_debezium)

    cli = dev.add_parser(
        "kafka-cli",
        help=f"run a Kafka CLI tool ({', '.join(sorted(TOOLS))})",
        description="Runs a Kafka CLI tool from the fetched jars. Arguments after the tool "
        "name go to the tool; --bootstrap-server defaults to the embedded broker.",
    )
    _broker_args(cli)
    cli.add_argument("tool", choices=sorted(TOOLS))
    cli.add_argument("tool_args", nargs=argparse.REMAINDER)
    cli.set_defaults(handler=_kafka_cli)

    _generate_args(dev.add_parser("generate", help="write orders changes to a source topic"))

    demo = dev.add_parser("demo", help="broker + generated orders + the changefeed + output")
    demo.add_argument("--rows", type=int, default=5_000)
    demo.add_argument(
        "--source",
        choices=("generated", *DATABASES),
        default="generated",
        help="generated: CockroachDB-style changes written to a topic; postgres, mariadb: a "
        "real PostgreSQL or MariaDB captured by Debezium",
    )
    demo.add_argument(
        "--config",
        type=Path,
        help="the changefeed config (default examples/orders.yaml; "
        "examples/orders-avro.yaml writes Avro against the embedded registry)",
    )
    demo.set_defaults(handler=_demo)


def _generate_args(gen: argparse.ArgumentParser) -> None:
    _broker_args(gen)
    gen.add_argument("--bootstrap-servers")
    gen.add_argument("--topic", required=True)
    gen.add_argument("--rows", type=int, default=10_000, help="row changes to write")
    gen.add_argument("--partitions", type=int, default=4)
    gen.add_argument("--update-ratio", type=float, default=0.3)
    gen.add_argument("--delete-ratio", type=float, default=0.1)
    gen.add_argument("--rate", type=float, help="row changes per second (default: flat out)")
    gen.add_argument(
        "--resolved-every",
        type=int,
        default=500,
        help="markers on every partition after this many changes",
    )
    gen.add_argument("--stall-partition", type=int, help="this partition stops getting markers")
    gen.add_argument("--stall-after", type=int, default=0, help="... after this many changes")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--first-order-id", type=int, default=1)
    gen.set_defaults(handler=_generate)


def _fetch_jars(_args: argparse.Namespace) -> int:
    for name, fetched in jars.fetch_all().items():
        where = jars.jars_root() / name
        print(f"{name} jars: {'fetched into' if fetched else 'already in'} {where}")
    return 0


def _jvm_test(_args: argparse.Namespace) -> int:
    return jars.WalkJar().test()


def registry_for(args: argparse.Namespace) -> EmbeddedRegistry:
    """The embedded registry named by ``--name`` (or placed by ``--dir``)."""
    return EmbeddedRegistry(args.dir or state_dir() / "registry" / args.name, owned=False)


def _kafka(args: argparse.Namespace) -> int:
    return _service(args.action, broker_for(args), lambda i: i.bootstrap_servers)


def _cluster(args: argparse.Namespace) -> int:
    """``dev cluster``: start, stop or report; status names each process, exits 3 if one is down."""
    directory = args.dir or state_dir() / "cluster" / args.name
    kafka = KafkaCluster(directory, brokers=args.brokers, owned=False)
    spark = SparkCluster(directory, workers=args.workers, owned=False)
    if args.action == "start":
        info = kafka.start()
        print(f"Kafka cluster {info.cluster_id} at {info.bootstrap_servers}")
        if args.workers:
            started = spark.start()
            print(
                f"Spark master {started.master_url} (UI {started.webui_url}), "
                f"{len(started.workers)} workers"
            )
        print(f"logs and state under {directory}")
    elif args.action == "stop":
        stopped = [spark.stop(), kafka.stop()]
        print("stopped" if any(stopped) else "not running")
    else:
        if not kafka.exists():
            print("not running")
            return 3
        found = {
            f"kafka node {n.node_id} at 127.0.0.1:{n.port}": up
            for n, up in zip(kafka.layout(), kafka.running(), strict=True)
        }
        if spark.exists():
            found |= {f"spark {name}": up for name, up in spark.running().items()}
        for what, up in found.items():
            print(f"{what}: {'running' if up else 'not running'}")
        return 0 if all(found.values()) else 3
    return 0


def _registry(args: argparse.Namespace) -> int:
    return _service(args.action, registry_for(args), lambda i: i.url)


def iceberg_for(args: argparse.Namespace) -> EmbeddedIcebergRest:
    """The embedded Iceberg REST catalog named by ``--name`` (or placed by ``--dir``)."""
    directory = args.dir or state_dir() / "iceberg" / args.name
    return EmbeddedIcebergRest(directory, warehouse=args.warehouse, port=args.port, owned=False)


def _iceberg(args: argparse.Namespace) -> int:
    """``dev iceberg``: as the other services; start also prints ``apply``'s catalog flags."""
    catalog = iceberg_for(args)
    if args.action != "start":
        return _service(args.action, catalog, lambda i: i.uri)
    info: IcebergRestInfo = catalog.start()
    print(
        f"{catalog.name} {info.uri} (pid {info.pid}, dir {info.directory}, "
        f"warehouse {info.warehouse})"
    )
    print(
        "highwater apply CHANGEFEED "
        + " ".join(f"--catalog {k}={v}" for k, v in info.properties.items())
    )
    return 0


def postgres_for(args: argparse.Namespace) -> EmbeddedPostgres:
    """The embedded PostgreSQL named by ``--name`` (or placed by ``--dir``)."""
    return EmbeddedPostgres(args.dir or state_dir() / "postgres" / args.name, owned=False)


def _postgres(args: argparse.Namespace) -> int:
    return _service(args.action, postgres_for(args), lambda i: i.dsn)


def _service(action: str, service: LocalService[Any], where: Any) -> int:
    """Start, stop or report a local service; status exits 3 when it is not running."""
    if action == "start":
        info = service.start()
        print(f"{service.name} {where(info)} (pid {info.pid}, dir {info.directory})")
    elif action == "stop":
        print("stopped" if service.stop() else "not running")
    else:
        running = service.status()
        print(f"running at {where(running)} (pid {running.pid})" if running else "not running")
        return 0 if running else 3
    return 0


def _kafka_cli(args: argparse.Namespace) -> int:
    needs_bootstrap = "--bootstrap-server" not in args.tool_args and "--help" not in args.tool_args
    bootstrap = bootstrap_for(args) if needs_bootstrap else None
    command = tool_command(args.tool, args.tool_args, bootstrap)
    return subprocess.run(command, check=False).returncode


def _generate(args: argparse.Namespace) -> int:
    spec = GeneratorSpec(
        topic=args.topic,
        rows=args.rows,
        partitions=args.partitions,
        update_ratio=args.update_ratio,
        delete_ratio=args.delete_ratio,
        rate=args.rate,
        resolved_every=args.resolved_every,
        stall_partition=args.stall_partition,
        stall_after=args.stall_after,
        seed=args.seed,
        first_order_id=args.first_order_id,
    )
    report = write(spec, {"bootstrap.servers": bootstrap_for(args)})
    print(
        f"{args.topic}: {report.total} changes ({report.inserts} inserts, {report.updates} "
        f"updates, {report.deletes} deletes) and {report.markers} resolved markers",
        file=sys.stderr,
    )
    return 0


def _debezium(args: argparse.Namespace) -> int:
    upstream = DebeziumUpstream(state_dir() / "debezium" / args.name, args.database)
    server = upstream.server
    if args.action == "stop":
        print("stopped" if upstream.stop() else "not running")
        return 0
    if args.action == "status":
        running, connect = server.status(), upstream.connect.status()
        print(f"{server.name}: {running.dsn if running else 'not running'}")
        print(f"Kafka Connect: {connect.url if connect else 'not running'}")
        return 0 if running and connect else 3
    tables = [t.strip() for t in (args.tables or CAPTURED[args.database]).split(",") if t.strip()]
    database, connect = upstream.start(
        bootstrap_for(args), tables, prefix=args.prefix, partitions=args.partitions
    )
    print(f"{server.name} {database.dsn}")
    print(f"Kafka Connect {connect.url}, Debezium capturing {', '.join(tables)}")
    print("a changefeed over it (add changefeed_id and kafka):")
    print(sources_yaml(connect, tables))
    return 0


def _demo(args: argparse.Namespace) -> int:
    if args.source in DATABASES:
        return run_debezium_demo(rows=args.rows, state=state_dir(), database=args.source)

    return run_demo(rows=args.rows, state=state_dir(), config_file=args.config)
