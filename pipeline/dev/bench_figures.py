"""The figures users ask for first, measured beside the parts of ``make bench``.

* :func:`topic_bytes`: a topic's bytes in the brokers' logs, one copy (Kafka's own
  ``kafka-log-dirs`` tool): megabytes per second read and written by a drain, as Kafka
  stores them (the generator's source compressed, the outputs as their producers wrote);
* :class:`MemoryPeaks`: the peak resident memory of each kind of process (the Spark JVM, which
  is the driver and the executor in ``local`` mode; the largest executor on a cluster; Python
  workers, summed; the broker) while a part runs, sampled from ``/proc`` every half second;
* :func:`per_million`: CPU seconds per million changes, from the parts' ``cpu_since``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from .kafka_tools import run_tool

_PAGE = 4096


def topic_bytes(bootstrap: str, topic: str) -> int:
    """Bytes of ``topic``'s log segments, one replica of each partition (the largest)."""
    done = run_tool(
        "log-dirs", ["--describe", "--topic-list", topic], bootstrap, timeout=120
    ).stdout
    report = json.loads(next(line for line in done.splitlines() if line.startswith("{")))
    sizes: dict[str, int] = {}
    for broker in report.get("brokers", ()):
        for log_dir in broker.get("logDirs", ()):
            for part in log_dir.get("partitions", ()):
                name = part["partition"]
                sizes[name] = max(sizes.get(name, 0), int(part["size"]))
    return sum(sizes.values())


def per_million(cpu: Mapping[str, float], changes: int) -> float:
    """CPU seconds of every process per million ``changes``."""
    return sum(cpu.values()) * 1_000_000 / max(changes, 1)


def process_kind(command: str) -> str:
    """A process' kind by its command line: broker, spark jvm, python workers, other."""
    if "kafka.Kafka" in command:
        return "broker"
    if "CoarseGrainedExecutorBackend" in command:
        return "spark executor"  # on a cluster: one per worker
    if "deploy.master.Master" in command or "deploy.worker.Worker" in command:
        return "spark daemons"
    if "java" in command:
        return "spark jvm"  # the driver's (local mode: the executor too)
    if "pyspark" in command and ("daemon" in command or "worker" in command):
        return "python workers"
    return "other"


def resident() -> dict[str, int]:
    """Resident bytes of each kind of process now (Python workers summed)."""
    found: dict[str, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            pages = int((entry / "statm").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kind = process_kind(command)
        if kind in {"spark jvm", "spark executor"}:  # the largest one's
            found[kind] = max(found.get(kind, 0), pages * _PAGE)
        else:
            found[kind] = found.get(kind, 0) + pages * _PAGE
    return found


class MemoryPeaks:
    """Peak resident memory per kind of process while a part runs (see the module)."""

    def __init__(self, every: float = 0.5) -> None:
        self.every = every
        self.peaks: dict[str, dict[str, int]] = {}  # part -> kind -> bytes

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        """Samples while the ``with`` block runs; its peaks kept under ``name``."""
        peaks: dict[str, int] = {}
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                for kind, size in resident().items():
                    peaks[kind] = max(peaks.get(kind, 0), size)
                stop.wait(self.every)

        sampler = threading.Thread(target=sample, daemon=True, name=f"memory-{name}")
        sampler.start()
        try:
            yield
        finally:
            stop.set()
            sampler.join(5)
            self.peaks[name] = peaks
            shown = ", ".join(f"{k} {v / 2**20:,.0f} MB" for k, v in sorted(peaks.items()))
            print(f"MEMORY peak resident, {name}: {shown}", flush=True)


def megabytes_per_second(size: int, seconds: float) -> float:
    """``size`` bytes over ``seconds``, in MB/s."""
    return size / 2**20 / max(seconds, 1e-9)
