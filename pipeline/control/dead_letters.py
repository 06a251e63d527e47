"""A changefeed's dead letters as an operator looks at them: how many, and the latest.

``GET /api/v2/changefeeds/{id}/dead-letters?limit=N`` (the console's changefeed page). The
topic is the one its config names (``dlq_topic``, or ``_highwater_dlq_<id>``) on its output
cluster, or, for a changefeed run by ``highwater run`` only, the one its job status names on
the server's cluster. Its size is counted by offsets (per partition the high watermark
minus the low: under exactly once the transactions' commit markers take offsets too); the
latest ``limit`` records are read (``read_committed``), newest first, each with where it sits,
its key and value as text (cut to a preview) and the reason and source place the changefeed
wrote in its headers (``highwater.error``, ``highwater.source``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from pipeline.core.batch.kafka_clients import watermarks

PREVIEW = 500  # characters of a key or value shown
_ERROR, _SOURCE = "highwater.error", "highwater.source"  # pipeline/core/batch/output.py's


@dataclass(frozen=True)
class DeadLetter:
    """One dead letter: where it sits, when, its key and value as text, why and from where."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    key: str | None
    value: str | None
    error: str | None
    source: str | None


@dataclass(frozen=True)
class DeadLetters:
    """A dead-letter topic's size by offsets and its latest records, or why it is not known."""

    topic: str
    exists: bool
    offsets: int = 0
    latest: list[DeadLetter] = field(default_factory=list)
    problem: str | None = None  # the cluster did not answer: why (nothing else is known)


def _consumer(client: Mapping[str, Any]) -> Consumer:
    return Consumer(
        {
            **client,
            "group.id": f"highwater-console-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )


def sizes(client: Mapping[str, Any], topics: set[str], timeout: float = 3.0) -> dict[str, int]:
    """Each topic's size by offsets (0: never written), one consumer for all of them.

    What the server's sampler counts for the console's list; an empty answer when the cluster
    does not answer (the list then shows no count rather than a wrong one).
    """
    consumer = _consumer(client)
    try:
        listed = consumer.list_topics(timeout=timeout).topics
        found = {}
        for topic in sorted(topics):
            metadata = listed.get(topic)
            if metadata is None or metadata.error is not None:
                found[topic] = 0
                continue
            found[topic] = sum(high - low for _, (low, high) in _marks(consumer, metadata, timeout))
        return found
    except KafkaException:
        return {}
    finally:
        consumer.close()


def read(client: Mapping[str, Any], topic: str, limit: int, timeout: float = 3.0) -> DeadLetters:
    """The topic's size and its latest ``limit`` records (none read when ``limit`` is 0)."""
    consumer = _consumer(client)
    try:
        found = consumer.list_topics(timeout=timeout).topics.get(topic)  # never creates it
        if found is None or found.error is not None:
            return DeadLetters(topic, exists=False)
        ends, starts, offsets = {}, [], 0
        for partition, (low, high) in _marks(consumer, found, timeout):
            offsets += high - low
            if high > low and limit > 0:
                starts.append(TopicPartition(topic, partition, max(low, high - limit)))
                ends[partition] = high
        letters = _tails(consumer, topic, starts, ends, timeout) if starts else []
    except KafkaException as exc:  # its cluster away: said, not a failure of the server's
        return DeadLetters(topic, exists=False, problem=f"its cluster did not answer: {exc}")
    finally:
        consumer.close()
    letters.sort(key=lambda d: (d.timestamp_ms or 0, d.offset), reverse=True)
    return DeadLetters(topic, exists=True, offsets=offsets, latest=letters[:limit])


def _marks(consumer: Consumer, topic: Any, timeout: float) -> list[tuple[int, tuple[int, int]]]:
    """Each partition of ``topic`` (its metadata) with its (low, high) watermarks, in order."""
    return [
        (p, watermarks(consumer, TopicPartition(topic.topic, p), timeout))
        for p in sorted(topic.partitions)
    ]


def _tails(
    consumer: Consumer,
    topic: str,
    starts: list[TopicPartition],
    ends: dict[int, int],
    timeout: float,
) -> list[DeadLetter]:
    """Every record from ``starts`` to each partition's end as it was when counted."""
    consumer.assign(starts)
    out: list[DeadLetter] = []
    waiting = dict(ends)
    deadline = time.monotonic() + timeout
    while waiting and time.monotonic() < deadline:
        for message in consumer.consume(500, timeout=0.5):
            if message.error() is not None:
                continue
            partition, offset = message.partition(), message.offset()
            if partition is not None and offset is not None and offset < ends[partition]:
                out.append(_letter(message))
        for tp in consumer.position([TopicPartition(topic, p) for p in waiting]):
            if tp.offset >= ends[tp.partition]:
                waiting.pop(tp.partition, None)
    return out


def _letter(message: Any) -> DeadLetter:
    headers = dict(message.headers() or [])
    _, timestamp = message.timestamp()
    return DeadLetter(
        topic=message.topic(),
        partition=message.partition(),
        offset=message.offset(),
        timestamp_ms=timestamp if timestamp > 0 else None,
        key=_text(message.key()),
        value=_text(message.value()),
        error=_text(headers.get(_ERROR)),
        source=_text(headers.get(_SOURCE)),
    )


def _text(data: bytes | None) -> str | None:
    if data is None:
        return None
    text = data.decode("utf-8", "replace")
    return text if len(text) <= PREVIEW else text[:PREVIEW] + "…"
