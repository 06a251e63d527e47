"""Kafka Connect's settings for Debezium in Avro (``pipeline/dev/connect.py``), no JVM."""

import json
from dataclasses import asdict

from pipeline.dev.connect import AVRO_CONVERTER, ConnectInfo, avro_converters

CCOMPAT = "http://127.0.0.1:8081/apis/ccompat/v7"


def test_the_avro_converters_write_confluents_wire_format() -> None:
    settings = avro_converters(CCOMPAT + "/")
    for side in ("key", "value"):
        assert settings[f"{side}.converter"] == AVRO_CONVERTER
        own = {
            k.removeprefix(f"{side}.converter."): v
            for k, v in settings.items()
            if k.startswith(f"{side}.converter.")
        }
        assert own == {
            "apicurio.registry.url": "http://127.0.0.1:8081/apis/registry/v3",  # its own API
            "apicurio.registry.auto-register": "true",
            "apicurio.registry.headers.enabled": "false",
            "apicurio.registry.id-handler": "io.apicurio.registry.serde.Default4ByteIdHandler",
            "apicurio.registry.use-id": "contentId",
        }  # Apicurio's own default: schemas that reference others (wire.py writes them in)
    # a URL that is not the ccompat API's is the converter's own
    native = "http://r:1/apis/registry/v3"
    assert avro_converters(native)["value.converter.apicurio.registry.url"] == native


def test_the_sources_of_an_avro_capture_name_the_registry_and_old_state_files_still_load() -> None:
    json_info = ConnectInfo("/d", 1, 2, "pg")
    avro_info = ConnectInfo("/d", 1, 2, "pg", schema_registry=CCOMPAT)
    assert "schema_registry" not in json_info.sources(["public.orders"])[0]
    assert avro_info.sources(["public.orders"]) == [
        {
            "topic": "pg.public.orders",
            "table": "orders",
            "format": "debezium",
            "transactions": "pg.transaction",
            "schema_registry": {"url": CCOMPAT},
        }
    ]
    state = json.loads(json.dumps(asdict(avro_info)))
    assert ConnectInfo(**state) == avro_info
    del state["schema_registry"]  # written before the field existed
    assert ConnectInfo(**state).schema_registry is None
