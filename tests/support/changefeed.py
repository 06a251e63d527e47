"""Running a changefeed in-process against the test broker, and reading what it wrote."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pipeline.config import ChangefeedConfig, parse_config
from pipeline.core.coordinator.changefeed import Changefeed
from schemas.hlc import ZERO
from tests.support.kafka import Message, consume_all


def every_batch(bootstrap: str, changefeed_id: str, **sections: Any) -> dict[str, Any]:
    """The raw config of a changefeed that marks and checkpoints at every batch.

    From its sources' start with no initial scan of its own (their snapshot is upstream's), no
    safepoints, drained available now; ``sections`` add to and replace these.
    """
    return {
        "changefeed_id": changefeed_id,
        "kafka": {"bootstrap_servers": bootstrap},
        "initial_scan": "no",
        "sink": {"topic_prefix": f"{changefeed_id}.", "partitions": 3},
        "encoder": {"updated": True},
        "resolved": {"interval": "0s"},
        "checkpoint": {"min_checkpoint_frequency": "0s"},
        "safepoints": {"enabled": False},
        "spark": {"trigger": {"available_now": True}},
        **sections,
    }


def over_capture(
    bootstrap: str, changefeed_id: str, sources: list[dict[str, Any]], **sections: Any
) -> dict[str, Any]:
    """The raw config of a changefeed over a Debezium capture's topics, from their start.

    Its own snapshot comes from Debezium (``initial_scan: no``), markers and checkpoints at
    every batch, no safepoints (:func:`every_batch`); ``sections`` replace the defaults
    (``spark``, ``delivery``).
    """
    return every_batch(bootstrap, changefeed_id, sources=sources, **sections)


def changefeed_config(
    bootstrap: str,
    changefeed_id: str,
    sources: list[tuple[str, str]] | list[dict[str, Any]],
    **sections: Any,
) -> ChangefeedConfig:
    """A config for tests: drain the sources and stop (available_now), markers at once.

    ``sources`` are ``(topic, table)`` pairs, or whole source sections. Unless a test sets
    ``initial_scan`` or ``cursor``, the changefeed streams the sources' whole history (a
    cursor at time zero), which is what tests of the stream check against.
    """
    raw: dict[str, Any] = {
        "changefeed_id": changefeed_id,
        "kafka": {"bootstrap_servers": bootstrap},
        "sources": [s if isinstance(s, dict) else {"topic": s[0], "table": s[1]} for s in sources],
        "sink": {"topic_prefix": f"{changefeed_id}.", "partitions": 3},
        "resolved": {"interval": "0s"},
        "checkpoint": {"min_checkpoint_frequency": "0s", "topic": f"{changefeed_id}.checkpoints"},
        "spark": {"trigger": {"available_now": True}},
    }
    if "initial_scan" not in sections and "cursor" not in sections:
        raw["cursor"] = str(ZERO)
    for name, value in sections.items():
        if isinstance(value, dict) and isinstance(raw.get(name), dict):
            raw[name] = {**raw[name], **value}
        else:
            raw[name] = value
    return parse_config(raw, env={})


@dataclass
class Output:
    """What a changefeed wrote to one output topic."""

    rows: list[Message]
    markers: list[Message]

    def values(self) -> list[Any]:
        return [None if m.value is None else json.loads(m.value) for m in self.rows]

    def marker_times(self, partition: int) -> list[str]:
        return [json.loads(m.value)["resolved"] for m in self.markers if m.partition == partition]


def run_to_end(config: ChangefeedConfig, spark: Any) -> Changefeed:
    changefeed = Changefeed(config, spark)
    changefeed.run()
    return changefeed


def read_output(bootstrap: str, topic: str) -> Output:
    messages = consume_all(bootstrap, topic)
    return Output(
        [m for m in messages if m.key is not None], [m for m in messages if m.key is None]
    )


def checkpoint_records(
    bootstrap: str, changefeed_id: str, topic: str = "_highwater_checkpoints"
) -> list[dict[str, Any]]:
    """Every checkpoint record written for ``changefeed_id``, oldest first, parsed."""
    return [
        json.loads(m.value)
        for m in consume_all(bootstrap, topic)
        if m.key == changefeed_id.encode() and m.value is not None
    ]


def read_checkpoint(bootstrap: str, config: ChangefeedConfig) -> dict[str, Any]:
    records = checkpoint_records(bootstrap, config.changefeed_id, config.checkpoint.topic)
    assert records, "no checkpoint record"
    return records[-1]
