"""Topic administration: create what is missing, describe what is there."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
)

from schemas.errors import SinkError

log = logging.getLogger(__name__)

# A topic's replication factor: a number, or "auto" (:func:`replication_for`).
Replication = int | Literal["auto"]
# Copies a topic keeps on a cluster that has the brokers for them: one broker may be lost
# (and another restarted) without losing a write, with min.insync.replicas=2.
DURABLE = 3


def replication_for(wanted: Replication, brokers: int) -> int:
    """``auto``: :data:`DURABLE` copies where the cluster has the brokers, else one per broker."""
    return min(DURABLE, brokers) if wanted == "auto" else wanted


def ensure_topics(
    config: Mapping[str, Any],
    partitions: Mapping[str, int],
    *,
    replication_factor: Replication = "auto",
    topic_config: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> list[str]:
    """Create the topics that do not exist yet; return the names created.

    Existing topics are left as they are (their partition and replica counts are the
    operator's choice). A factor below what the cluster could keep is logged as a warning.
    """
    admin = AdminClient(dict(config))
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise SinkError(
            f"cannot list the topics of {config.get('bootstrap.servers')}: {exc}"
        ) from exc
    missing = [name for name in partitions if name not in metadata.topics]
    if not missing:
        return []
    brokers = len(metadata.brokers)
    factor = replication_for(replication_factor, brokers)
    if factor < replication_for("auto", brokers):
        log.warning(
            "creating %s with replication factor %d on a cluster of %d brokers: "
            "one broker's loss can lose them",
            ", ".join(missing),
            factor,
            brokers,
        )
    wanted = [
        NewTopic(
            name,
            num_partitions=partitions[name],
            replication_factor=factor,
            config=dict(topic_config or {}),
        )
        for name in missing
    ]
    created = []
    for name, future in admin.create_topics(wanted, operation_timeout=timeout).items():
        try:
            future.result()
            created.append(name)
        except KafkaException as exc:
            if exc.args[0].name() != "TOPIC_ALREADY_EXISTS":  # a concurrent creator won
                raise SinkError(f"cannot create topic {name!r}: {exc.args[0].str()}") from exc
    log.info("created topics %s", created)
    return created


def partition_counts(
    config: Mapping[str, Any], topics: list[str], timeout: float = 30.0
) -> dict[str, int]:
    """How many partitions each topic has; raises SinkError for a missing topic."""
    metadata = AdminClient(dict(config)).list_topics(timeout=timeout)
    counts = {}
    for topic in topics:
        described = metadata.topics.get(topic)
        if described is None or described.error is not None:
            raise SinkError(f"topic {topic!r} does not exist")
        counts[topic] = len(described.partitions)
    return counts


def topic_configs(
    config: Mapping[str, Any], topics: list[str], timeout: float = 30.0
) -> dict[str, dict[str, str | None]]:
    """Each topic's effective config (``cleanup.policy``, ``retention.ms``, …)."""
    if not topics:
        return {}
    admin = AdminClient(dict(config))
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]
    out: dict[str, dict[str, str | None]] = {}
    for resource, future in admin.describe_configs(resources).items():
        try:
            entries = future.result(timeout)
        except KafkaException as exc:
            raise SinkError(f"cannot read the config of topic {resource.name!r}: {exc}") from exc
        out[resource.name] = {name: entry.value for name, entry in entries.items()}
    return out


def cluster_metadata(config: Mapping[str, Any], timeout: float = 30.0) -> Any:
    """What the cluster at ``bootstrap.servers`` says of itself: its id, brokers, topics.

    confluent-kafka's ``ClusterMetadata``: ``cluster_id`` (what stays when the cluster moves
    to another address) and, per topic and partition, its leader, replicas and in-sync ones.
    """
    try:
        return AdminClient(dict(config)).list_topics(timeout=timeout)
    except KafkaException as exc:
        raise SinkError(f"cannot describe {config.get('bootstrap.servers')}: {exc}") from exc


@dataclass(frozen=True)
class Durability:
    """How durable one topic is on its cluster, as the cluster's metadata says."""

    topic: str
    brokers: int  # in the cluster
    replicas: int  # the fewest replicas of any of its partitions
    offline: tuple[int, ...]  # partitions without a leader
    lagging: tuple[int, ...]  # partitions with a leader and a replica out of sync

    @property
    def under_replicated(self) -> int:
        """Partitions with fewer copies in sync than they have (the gauge's value)."""
        return len(self.offline) + len(self.lagging)

    def warnings(self) -> list[str]:
        """What an operator should know of it, one sentence each.

        Fewer copies than the cluster could keep, partitions without a leader, partitions out
        of sync (a broker down or catching up).
        """
        found = []
        if self.replicas < replication_for("auto", self.brokers):
            found.append(
                f"topic {self.topic} has replication factor {self.replicas} on a cluster of "
                f"{self.brokers} brokers: one broker's loss can lose its records"
            )
        if self.offline:
            found.append(f"topic {self.topic}: partitions {list(self.offline)} have no leader")
        if self.lagging:
            found.append(
                f"topic {self.topic}: partitions {list(self.lagging)} are under-replicated "
                "(a replica is out of sync)"
            )
        return found


def durability(metadata: Any, topics: list[str]) -> list[Durability]:
    """Each of ``topics`` as ``metadata`` (:func:`cluster_metadata`'s) describes it.

    A missing topic is left out (its user reports it).
    """
    found = []
    for topic in sorted(set(topics)):
        described = metadata.topics.get(topic)
        if described is None or described.error is not None or not described.partitions:
            continue
        partitions = sorted(described.partitions.values(), key=lambda p: p.id)
        found.append(
            Durability(
                topic,
                brokers=len(metadata.brokers),
                replicas=min(len(p.replicas) for p in partitions),
                offline=tuple(p.id for p in partitions if p.leader < 0),
                lagging=tuple(
                    p.id for p in partitions if p.leader >= 0 and len(p.isrs) < len(p.replicas)
                ),
            )
        )
    return found


class DurabilityWatch:
    """The durability of the topics a run relies on, re-read every ``interval`` seconds.

    ``clusters``: each cluster's client settings and the topics on it (one metadata read per
    cluster and check). An interval of 0 keeps what the first check found.
    """

    def __init__(
        self,
        clusters: Sequence[tuple[Mapping[str, Any], list[str]]],
        interval: float,
        clock: Callable[[], float] = time.monotonic,
        describe: Callable[[Mapping[str, Any]], Any] = cluster_metadata,
    ) -> None:
        self.clusters = clusters
        self._describe = describe
        self.found: list[Durability] = []
        self.interval = interval
        self._clock = clock
        self._checked = clock()

    def due(self) -> bool:
        """Whether a re-read is due."""
        return self.interval > 0 and self._clock() - self._checked >= self.interval

    def check(self, described: Sequence[Any] | None = None) -> list[Durability]:
        """Read each cluster's metadata once; what it says becomes :attr:`found`.

        ``described``: each cluster's metadata, already read (a run's start reads it once for
        the clusters' ids too); the next re-read is then an interval later.
        """
        self._checked = self._clock()
        if described is None:
            described = [self._describe(client) for client, _ in self.clusters]
        self.found = [
            d
            for (_, topics), metadata in zip(self.clusters, described, strict=True)
            for d in durability(metadata, topics)
        ]
        return self.found

    def warnings(self) -> list[str]:
        """The warnings of what was found last."""
        return [w for d in self.found for w in d.warnings()]


TRANSACTION_STATE = "__transaction_state"


@dataclass(frozen=True)
class TransactionState:
    """What a cluster offers its transaction coordinators (for exactly-once delivery)."""

    brokers: int
    factor: int  # transaction.state.log.replication.factor
    min_isr: int  # transaction.state.log.min.isr
    # the state topic's partitions: (leader, in-sync replicas); None: not created yet
    partitions: Mapping[int, tuple[int, int]] | None

    def problem(self) -> str | None:
        """Why transactions cannot work there, or None."""
        if self.partitions is None:
            if self.factor > self.brokers:
                return (
                    f"transaction.state.log.replication.factor is {self.factor} and the cluster "
                    f"has {self.brokers} broker(s): {TRANSACTION_STATE} cannot be created"
                )
            return None
        leaderless = sorted(p for p, (leader, _) in self.partitions.items() if leader < 0)
        if leaderless:
            return f"partitions {leaderless} of {TRANSACTION_STATE} have no leader"
        short = sorted(p for p, (_, isr) in self.partitions.items() if isr < self.min_isr)
        if short:
            return (
                f"partitions {short} of {TRANSACTION_STATE} have fewer in-sync replicas than "
                f"transaction.state.log.min.isr ({self.min_isr})"
            )
        return None


def transaction_state(config: Mapping[str, Any], timeout: float = 30.0) -> TransactionState:
    """The cluster's transaction state topic and the settings it is made with."""
    admin = AdminClient(dict(config))
    metadata = admin.list_topics(timeout=timeout)
    broker = ConfigResource("BROKER", str(next(iter(metadata.brokers))))
    settings = admin.describe_configs([broker])[broker].result(timeout=timeout)
    topic = metadata.topics.get(TRANSACTION_STATE)
    return TransactionState(
        brokers=len(metadata.brokers),
        factor=int(settings["transaction.state.log.replication.factor"].value),
        min_isr=int(settings["transaction.state.log.min.isr"].value),
        partitions=None
        if topic is None
        else {p: (m.leader, len(m.isrs)) for p, m in topic.partitions.items()},
    )
