"""The dev cluster's parts the cluster tests share, one of each per test module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pipeline.dev.cluster import KafkaCluster
from pipeline.dev.spark_cluster import SparkCluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """Three KRaft Kafka nodes (3 copies of each topic, min.insync.replicas=2)."""
    kafka = KafkaCluster(tmp_path_factory.mktemp("cluster"))
    kafka.start()
    yield kafka
    kafka.stop()


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """A Spark standalone master with two one-core workers."""
    spark_cluster = SparkCluster(tmp_path_factory.mktemp("spark"), workers=2)
    spark_cluster.start()
    yield spark_cluster
    spark_cluster.stop()
