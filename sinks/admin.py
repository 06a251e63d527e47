"""Topic administration: create what is missing, describe what is there."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
)

from schemas.errors import SinkError

log = logging.getLogger(__name__)


def ensure_topics(
    config: Mapping[str, Any],
    partitions: Mapping[str, int],
    *,
    replication_factor: int = 1,
    topic_config: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> list[str]:
    """Create the topics that do not exist yet; return the names created.

    Existing topics are left as they are (their partition count is the operator's choice).
    """
    admin = AdminClient(dict(config))
    try:
        existing = set(admin.list_topics(timeout=timeout).topics)
    except KafkaException as exc:
        raise SinkError(
            f"cannot list the topics of {config.get('bootstrap.servers')}: {exc}"
        ) from exc
    wanted = [
        NewTopic(
            name,
            num_partitions=count,
            replication_factor=replication_factor,
            config=dict(topic_config or {}),
        )
        for name, count in partitions.items()
        if name not in existing
    ]
    if not wanted:
        return []
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


def cluster_id(config: Mapping[str, Any], timeout: float = 30.0) -> str | None:
    """The id the cluster at ``bootstrap.servers`` answers with (what stays when it moves)."""
    try:
        found: str | None = AdminClient(dict(config)).list_topics(timeout=timeout).cluster_id
    except KafkaException as exc:
        raise SinkError(f"cannot reach {config.get('bootstrap.servers')}: {exc}") from exc
    return found
