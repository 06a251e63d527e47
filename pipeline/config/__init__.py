"""The changefeed config: YAML loaded once into frozen, typed objects.

This is the only package that reads a config file. Everything downstream receives a
:class:`ChangefeedConfig` (or a section of it) and may trust it: unknown keys, wrong types and
impossible combinations were refused here, before Spark starts, each with its key path. All
problems in a file are reported together, so one ``highwater validate`` run shows them all.

Sections follow the contract (``../shared/design/contract.md``); option names follow
CockroachDB's changefeed options where one exists. Its modules, each importing only those
before it; the rest of the code imports this package's names, not its modules:

=================  ===========================================================================
``fields``         the field types several sections share (durations, times, names,
                   replication), secrets' masking, the sections' strict base
``kafka_sink``     CockroachDB's ``kafka_sink_config``, mapped to Kafka producer settings
``sections``       one model per section, with the combinations of its own options it refuses
``output``         the output's sections, ``sink`` and ``encoder``
``databases``      whole-database sources: a Debezium capture's table topics, found by name
``checks``         the combinations across sections it refuses
``changefeed``     :class:`ChangefeedConfig`: the sections together, and the views derived
                   from them (routes, tables, formats, CDC query, fingerprint)
``loading``        :func:`load_config` and :func:`parse_config`: YAML, ``${VAR}``, the errors
=================  ===========================================================================
"""

from .changefeed import ChangefeedConfig
from .databases import DatabaseConfig
from .fields import MASK, Duration, Name, Replication, Time, looks_secret, parse_duration
from .loading import load_config, parse_config, with_tables
from .output import EncoderConfig, SinkConfig
from .sections import (
    CheckpointConfig,
    InitialScanConfig,
    JobsConfig,
    KafkaOptions,
    MetricsConfig,
    ResolvedConfig,
    SafepointsConfig,
    SchemaRegistryConfig,
    SourceConfig,
    SparkConfig,
    TriggerConfig,
)

__all__ = [
    "MASK",
    "ChangefeedConfig",
    "CheckpointConfig",
    "DatabaseConfig",
    "Duration",
    "EncoderConfig",
    "InitialScanConfig",
    "JobsConfig",
    "KafkaOptions",
    "MetricsConfig",
    "Name",
    "Replication",
    "ResolvedConfig",
    "SafepointsConfig",
    "SchemaRegistryConfig",
    "SinkConfig",
    "SourceConfig",
    "SparkConfig",
    "Time",
    "TriggerConfig",
    "load_config",
    "looks_secret",
    "parse_config",
    "parse_duration",
    "with_tables",
]
