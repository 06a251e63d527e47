"""The Kafka command-line tools, run from the fetched broker jars.

``highwater dev kafka-cli TOOL ARGS…`` runs the same tools Kafka's ``bin/*.sh`` scripts run
(their main classes), so an operator's muscle memory applies: ``topics --list``,
``console-consumer --topic … --from-beginning``. When no ``--bootstrap-server`` is given, the
embedded broker's address is filled in.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from pipeline.runtime.jars import broker_classpath

TOOLS = {
    "topics": "org.apache.kafka.tools.TopicCommand",
    "console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "configs": "kafka.admin.ConfigCommand",
    "producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "dump-log": "kafka.tools.DumpLogSegments",  # a broker's segment files, batch by batch
}
_LOG4J2 = Path(__file__).resolve().parent.parent / "jvm" / "log4j2.properties"

# Print what an operator needs to check markers: partition, offset, key, then value.
CONSOLE_CONSUMER_DISPLAY = (
    "--property",
    "print.partition=true",
    "--property",
    "print.offset=true",
    "--property",
    "print.key=true",
    "--property",
    "key.separator=\t",
)


def tool_command(tool: str, args: Sequence[str], bootstrap_servers: str | None) -> list[str]:
    """The ``java`` command line for a Kafka CLI tool."""
    if tool not in TOOLS:
        raise ValueError(f"unknown Kafka tool {tool!r}; known: {', '.join(sorted(TOOLS))}")
    argv = list(args)
    if bootstrap_servers and "--bootstrap-server" not in argv:
        argv = ["--bootstrap-server", bootstrap_servers, *argv]
    return [
        "java",
        "-Xmx256m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        f"-Dlog4j2.configurationFile={_LOG4J2}",
        "-cp",
        broker_classpath(),
        TOOLS[tool],
        *argv,
    ]


def run_tool(
    tool: str, args: Sequence[str], bootstrap_servers: str | None, *, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """Run a Kafka CLI tool and capture its output (for tests and the demo)."""
    return subprocess.run(
        tool_command(tool, args, bootstrap_servers),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def read_topic(
    topic: str, bootstrap_servers: str, *, timeout_ms: int = 8000, max_messages: int | None = None
) -> list[tuple[int, int, str, str]]:
    """Every message of ``topic`` via the console consumer: ``(partition, offset, key, value)``.

    The console consumer prints ``Partition:N`` and ``Offset:N`` before the key.
    """
    args = [
        "--topic",
        topic,
        "--from-beginning",
        "--timeout-ms",
        str(timeout_ms),
        "--isolation-level",  # committed rows only (delivery: exactly_once writes transactions)
        "read_committed",
        *CONSOLE_CONSUMER_DISPLAY,
    ]
    if max_messages is not None:
        args += ["--max-messages", str(max_messages)]
    result = run_tool("console-consumer", args, bootstrap_servers)
    rows = []
    for line in result.stdout.splitlines():
        fields = line.split("\t", 3)
        if len(fields) != 4 or not fields[0].startswith("Partition:"):
            continue
        partition = int(fields[0].removeprefix("Partition:"))
        offset = int(fields[1].removeprefix("Offset:"))
        rows.append((partition, offset, fields[2], fields[3]))
    return rows
