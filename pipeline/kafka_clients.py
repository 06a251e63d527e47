"""Kafka client settings and topic administration, built from the config in one place.

Every Kafka client Highwater makes (Spark's source and sink, confluent-kafka producers,
consumers and admin clients) takes its settings from :func:`client_config` or
:func:`spark_kafka_options`, so security settings given once in ``kafka.options`` reach all
of them.
"""

from __future__ import annotations

from typing import Any

from .config import KafkaOptions


def client_config(kafka: KafkaOptions, **extra: Any) -> dict[str, Any]:
    """Settings for a confluent-kafka client of this cluster."""
    return {"bootstrap.servers": kafka.bootstrap_servers, **kafka.options, **extra}


def spark_kafka_options(kafka: KafkaOptions) -> dict[str, str]:
    """Options for Spark's Kafka source or sink (``kafka.``-prefixed client settings)."""
    options = {"kafka.bootstrap.servers": kafka.bootstrap_servers}
    options.update({f"kafka.{k}": v for k, v in kafka.options.items()})
    return options
