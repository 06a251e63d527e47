"""docker/ in step with the project: no Docker engine here runs it, so its parts are checked.

The compose file must have the shape of ``highwater dev cluster start`` (three KRaft nodes,
3 copies, a master and two one-core workers) plus the registry and Prometheus, at the
versions the project fetches, and its changefeed config must validate and name exactly
those services.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import yaml

from pipeline.config import load_config
from pipeline.runtime.jars import REGISTRY_VERSION

DOCKER = Path(__file__).resolve().parents[2] / "docker"
COMPOSE: dict[str, Any] = yaml.safe_load((DOCKER / "compose.yaml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]


def _kafka_version() -> str:
    pom = (DOCKER.parent / "pipeline" / "jvm" / "broker" / "pom.xml").read_text()
    found = re.search(r"<kafka.version>([^<]+)</kafka.version>", pom)
    assert found is not None
    return found.group(1)


def _kafka_nodes() -> dict[str, dict[str, Any]]:
    return {
        name: service["environment"]
        for name, service in SERVICES.items()
        if service.get("image", "").startswith("apache/kafka:")
    }


def test_three_kafka_nodes_form_one_replicated_cluster_at_the_fetched_version() -> None:
    nodes = _kafka_nodes()
    assert sorted(nodes) == ["kafka1", "kafka2", "kafka3"]
    assert {SERVICES[n]["image"] for n in nodes} == {f"apache/kafka:{_kafka_version()}"}
    ids = {name: env["KAFKA_NODE_ID"] for name, env in nodes.items()}
    assert sorted(ids.values()) == [1, 2, 3]
    voters = {env["KAFKA_CONTROLLER_QUORUM_VOTERS"] for env in nodes.values()}
    assert voters == {",".join(f"{ids[n]}@{n}:9093" for n in sorted(nodes))}
    for name, env in nodes.items():
        assert env["KAFKA_ADVERTISED_LISTENERS"] == f"PLAINTEXT://{name}:9092"
        assert env["KAFKA_DEFAULT_REPLICATION_FACTOR"] == 3
        assert env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"] == 3
        assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == 3
        assert env["KAFKA_MIN_INSYNC_REPLICAS"] == 2
        assert env["KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE"] == "false"
    (cluster_id,) = {env["CLUSTER_ID"] for env in nodes.values()}
    assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16  # what kafka-storage takes


def test_a_master_and_two_one_core_workers_from_the_project_image() -> None:
    master = SERVICES["spark-master"]
    assert master["entrypoint"] == ["spark-class"]
    assert master["command"][:5] == [
        "org.apache.spark.deploy.master.Master", "--host", "spark-master", "--port", "7077",
    ]  # fmt: skip
    workers = [
        s
        for s in SERVICES.values()
        if "org.apache.spark.deploy.worker.Worker" in s.get("command", [])
    ]
    assert len(workers) == 2
    for worker in workers:
        assert worker["image"] == master["image"] == SERVICES["changefeed"]["image"]
        command = worker["command"]
        assert command[command.index("--cores") + 1] == "1"
        assert command[-1] == "spark://spark-master:7077"


def test_the_changefeed_config_names_the_services_and_the_registry_is_the_fetched_one() -> None:
    changefeed = SERVICES["changefeed"]
    mounted = {v.split(":")[1]: DOCKER / v.split(":")[0] for v in changefeed["volumes"]}
    config_path = changefeed["command"][changefeed["command"].index("--config") + 1]
    assert config_path.startswith("/opt/highwater/docker/")  # beside the image's schemas/
    assert "WORKDIR /opt/highwater" in (DOCKER / "Dockerfile").read_text()
    config = load_config(mounted[config_path])  # validates; reads the table schema

    brokers = sorted(f"{name}:9092" for name in _kafka_nodes())
    assert sorted(config.kafka.bootstrap_servers.split(",")) == brokers
    assert config.spark.master == "spark://spark-master:7077"
    assert config.spark.python_env == "none"  # the workers run the driver's image
    assert config.spark.conf["spark.driver.host"] == "changefeed"
    assert config.encoder.format == "avro"
    assert config.encoder.schema_registry is not None
    assert config.encoder.schema_registry.url.startswith("http://registry:8080/")
    assert SERVICES["registry"]["image"] == f"apicurio/apicurio-registry:{REGISTRY_VERSION}"
    assert config.sink.replication_factor == "auto"
    assert config.sources[0].topic in SERVICES["generate"]["command"]

    scraped = yaml.safe_load((DOCKER / "prometheus.yml").read_text())
    targets = [
        t for job in scraped["scrape_configs"] for s in job["static_configs"] for t in s["targets"]
    ]
    assert targets == [f"changefeed:{config.metrics.port}"]
    assert config.metrics.host == "0.0.0.0"  # noqa: S104 - reachable from Prometheus' container
