"""Where an operator's commands (CLI and REST API) find the safepoints and the job status."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.config import ChangefeedConfig
from pipeline.core.batch.kafka_clients import client_config
from pipeline.core.progress.safepoints import SafepointRegistry
from sinks.compacted import CompactedTopic


@dataclass(frozen=True)
class OperatorContext:
    """A cluster's Kafka client settings and the topics operators work on."""

    client: Mapping[str, Any]
    safepoint_topic: str = "_highwater_safepoints"
    cluster: str = "default"
    jobs_topic: str = "_highwater_jobs"

    @classmethod
    def of(cls, config: ChangefeedConfig) -> OperatorContext:
        """The context of a changefeed's config (its source cluster, where its records are)."""
        return cls(
            client_config(config.kafka),
            config.safepoints.topic,
            config.safepoints.cluster,
            config.jobs.topic,
        )

    def registry(self) -> SafepointRegistry:
        """The cluster's safepoint registry (the caller closes it)."""
        return SafepointRegistry(self.client, self.safepoint_topic, self.cluster)

    def job_records(self) -> dict[str, bytes]:
        """Every record of the jobs topic: job statuses by changefeed id, and specs."""
        jobs = CompactedTopic(self.client, self.jobs_topic)
        try:
            return jobs.read_all()
        finally:
            jobs.close()
