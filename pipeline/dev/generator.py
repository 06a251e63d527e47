"""A source-change generator: an ``orders`` table's CDC stream in the ``native`` format.

It plays the upstream database's changefeed: inserts, updates and deletes of a table with a
composite key ``(region, order_id)``, each stamped with a strictly increasing HLC ``updated``
time, placed on the partition Kafka's default partitioner picks for the key (so one key's
versions stay on one partition, in commit order), and ``{"resolved": …}`` markers on every
partition at an interval. A marker R is only written once every row at or below R was
written before it on that partition, which is exactly the promise a real upstream makes.

The change model (:class:`OrdersGenerator`) is pure Python so tests can compute the expected
output without Kafka; :func:`write` puts it on a topic with an idempotent producer.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from schemas.errors import BrokerError
from schemas.hlc import Hlc, HlcClock
from sinks.admin import ensure_topics
from sinks.partitioning import default_partition

ORDERS_KEY = ("region", "order_id")
ORDERS_COLUMNS = (
    "region",
    "order_id",
    "customer_id",
    "status",
    "amount",
    "currency",
    "items",
    "express",
    "note",
    "created_at",
)
_REGIONS = ("eu", "us", "ap", "sa")
_STATUSES = ("new", "paid", "packed", "shipped", "delivered", "returned")
_CURRENCIES = ("EUR", "USD", "JPY", "BRL")


@dataclass(frozen=True)
class GeneratorSpec:
    """What to generate; every field is a knob of ``highwater dev generate``."""

    topic: str
    rows: int = 10_000
    partitions: int = 4
    update_ratio: float = 0.3
    delete_ratio: float = 0.1
    rate: float | None = None
    resolved_every: int = 500
    stall_partition: int | None = None
    stall_after: int = 0
    diff: bool = True
    seed: int = 0
    first_order_id: int = 1

    def __post_init__(self) -> None:
        if self.rows < 0 or self.partitions < 1 or self.resolved_every < 1:
            raise ValueError("rows >= 0, partitions >= 1 and resolved_every >= 1 are required")
        if not 0 <= self.update_ratio + self.delete_ratio <= 1:
            raise ValueError("update_ratio + delete_ratio must be within [0, 1]")
        if self.stall_partition is not None and not 0 <= self.stall_partition < self.partitions:
            raise ValueError(f"stall_partition must be within [0, {self.partitions})")


@dataclass(frozen=True)
class Change:
    """One row change of the source table, as the upstream commits it."""

    key: tuple[str, int]
    after: dict[str, Any] | None
    before: dict[str, Any] | None
    updated: Hlc
    partition: int

    @property
    def op(self) -> str:
        """``insert``, ``update`` or ``delete``."""
        if self.after is None:
            return "delete"
        return "update" if self.before is not None else "insert"


@dataclass(frozen=True)
class Marker:
    """A resolved marker for one source partition."""

    partition: int
    resolved: Hlc


@dataclass
class GeneratorReport:
    """What was generated: counts, markers, and (when asked) every change."""

    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    markers: int = 0
    last_resolved: dict[int, Hlc] = field(default_factory=dict)
    changes: list[Change] = field(default_factory=list)

    @property
    def total(self) -> int:
        """Row changes generated (markers not counted)."""
        return self.inserts + self.updates + self.deletes


def encode_key(key: tuple[str, int]) -> bytes:
    """The source key: a JSON array of primary-key values."""
    return json.dumps(list(key), separators=(",", ":")).encode()


def encode_change(change: Change, *, diff: bool = True) -> bytes:
    """The source value: CockroachDB's wrapped envelope with ``updated`` (and ``before``)."""
    value: dict[str, Any] = {"after": change.after}
    if diff:
        value["before"] = change.before
    value["updated"] = str(change.updated)
    return json.dumps(value, separators=(",", ":")).encode()


def encode_marker(marker: Marker) -> bytes:
    """A source resolved marker (null key)."""
    return json.dumps({"resolved": str(marker.resolved)}, separators=(",", ":")).encode()


class OrdersGenerator:
    """The ``orders`` table's changes, deterministic for a given spec and clock."""

    def __init__(self, spec: GeneratorSpec, clock: HlcClock | None = None) -> None:
        self.spec = spec
        self.clock = clock or HlcClock()
        self._random = random.Random(spec.seed)
        self._live: dict[tuple[str, int], dict[str, Any]] = {}
        self._live_keys: list[tuple[str, int]] = []
        self._next_id = spec.first_order_id

    def events(self) -> Iterator[Change | Marker]:
        """Every change, with markers after each ``resolved_every`` changes and at the end."""
        spec = self.spec
        for n in range(1, spec.rows + 1):
            yield self._change()
            if n % spec.resolved_every == 0 or n == spec.rows:
                yield from self._markers(n)

    def _markers(self, n: int) -> Iterator[Marker]:
        # Every later change gets a strictly larger time, so the last time issued is resolved.
        resolved = self.clock.last
        for partition in range(self.spec.partitions):
            stalled = partition == self.spec.stall_partition and n > self.spec.stall_after
            if not stalled:
                yield Marker(partition, resolved)

    def _change(self) -> Change:
        roll = self._random.random()
        spec = self.spec
        if not self._live_keys or roll >= spec.update_ratio + spec.delete_ratio:
            return self._insert()
        index = self._random.randrange(len(self._live_keys))
        if roll < spec.update_ratio:
            return self._update(self._live_keys[index])
        return self._delete(index)

    def _place(self, key: tuple[str, int]) -> int:
        return default_partition(encode_key(key), self.spec.partitions)

    def _insert(self) -> Change:
        key = (self._random.choice(_REGIONS), self._next_id)
        self._next_id += 1
        updated = self.clock.now()
        row = {
            "region": key[0],
            "order_id": key[1],
            "customer_id": self._random.randrange(1, 50_000),
            "status": "new",
            "amount": round(self._random.uniform(1, 2_000), 2),
            "currency": self._random.choice(_CURRENCIES),
            "items": self._random.randrange(1, 12),
            "express": self._random.random() < 0.2,
            "note": None if self._random.random() < 0.7 else "gift wrap",
            "created_at": _rfc3339(updated),
        }
        self._live[key] = row
        self._live_keys.append(key)
        return Change(key, row, None, updated, self._place(key))

    def _update(self, key: tuple[str, int]) -> Change:
        before = self._live[key]
        after = dict(before)
        after["status"] = self._random.choice(_STATUSES)
        after["amount"] = round(before["amount"] * self._random.uniform(0.8, 1.2), 2)
        after["items"] = max(1, before["items"] + self._random.choice((-1, 0, 1)))
        self._live[key] = after
        return Change(key, after, before, self.clock.now(), self._place(key))

    def _delete(self, index: int) -> Change:
        key = self._live_keys[index]
        # Swap-remove keeps the pick O(1); order of the live list does not matter.
        self._live_keys[index] = self._live_keys[-1]
        self._live_keys.pop()
        before = self._live.pop(key)
        return Change(key, None, before, self.clock.now(), self._place(key))


def _rfc3339(ts: Hlc) -> str:
    moment = datetime.fromtimestamp(ts.wall // 1_000_000_000, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def write(
    spec: GeneratorSpec,
    producer_config: dict[str, Any],
    *,
    keep_changes: bool = False,
    clock: HlcClock | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> GeneratorReport:
    """Generate ``spec`` onto its topic (created if missing) and flush; return what was sent."""
    from confluent_kafka import Producer  # noqa: PLC0415

    ensure_topics(producer_config, {spec.topic: spec.partitions})
    failures: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    producer = Producer(
        {
            **producer_config,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 20,
            "compression.type": "lz4",
            "on_delivery": on_delivery,
        }
    )
    report = GeneratorReport()
    started = time.monotonic()
    for event in OrdersGenerator(spec, clock).events():
        if isinstance(event, Marker):
            _produce(producer, spec.topic, event.partition, None, encode_marker(event))
            report.markers += 1
            report.last_resolved[event.partition] = event.resolved
            continue
        _produce(
            producer,
            spec.topic,
            event.partition,
            encode_key(event.key),
            encode_change(event, diff=spec.diff),
        )
        _count(report, event, keep_changes)
        if spec.rate:
            ahead = started + report.total / spec.rate - time.monotonic()
            if ahead > 0:
                sleep(ahead)
    remaining = producer.flush(60)
    if remaining or failures:
        raise BrokerError(
            f"{remaining} source records unacknowledged after 60s, {len(failures)} failed"
            + (f": {failures[0]}" if failures else "")
        )
    return report


def _produce(producer: Any, topic: str, partition: int, key: bytes | None, value: bytes) -> None:
    while True:
        try:
            producer.produce(topic, value=value, key=key, partition=partition)
            break
        except BufferError:
            producer.poll(0.1)  # local queue full: let deliveries drain
    producer.poll(0)


def _count(report: GeneratorReport, change: Change, keep: bool) -> None:
    op = change.op
    if op == "insert":
        report.inserts += 1
    elif op == "update":
        report.updates += 1
    else:
        report.deletes += 1
    if keep:
        report.changes.append(change)
