"""Whole-database sources at a run's start: the tables their topics say there are.

``databases`` entries (``pipeline/config/databases.py``) become sources here, from the topics
the source cluster lists when a run starts. A table created while the changefeed runs is
named by an END of its capture's transaction topic (Debezium: ``resolved/new_tables.py``) or
found listed (TiCDC: ``resolved/listed.py``): the run ends after its batch, and the next one
starts here with that table's topic; a topic the cluster does not list yet is waited for
(Debezium writes it before that END).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from pipeline.config import ChangefeedConfig
from pipeline.config import with_tables as expanded
from schemas.errors import SourceError
from sinks.admin import cluster_metadata

from ..batch import client_config
from ..resolved import Resolver

log = logging.getLogger(__name__)

WAIT = 60.0  # seconds a table's topic may take to be listed after its END was read


def with_tables(
    config: ChangefeedConfig, appeared: Iterable[str] = (), wait: float = WAIT
) -> ChangefeedConfig:
    """``config`` with a source for each table topic its ``databases`` take, as listed now.

    ``appeared``: the topics of tables the last run met and must now follow.
    """
    if not config.databases:
        return config
    wanted = set(appeared)
    deadline = time.monotonic() + wait
    while True:
        topics = cluster_metadata(client_config(config.kafka)).topics
        found = expanded(config, topics)
        missing = wanted - {s.topic for s in found.sources}
        if not missing:
            return found
        if time.monotonic() > deadline:
            raise SourceError(
                f"topic(s) {', '.join(sorted(missing))} of tables that appeared in the "
                f"database were not listed within {wait:.0f} s"
            )
        time.sleep(1.0)


def met_tables(config: ChangefeedConfig, resolver: Resolver) -> set[str]:
    """The topics of tables created since the run started that it does not read (logged)."""
    appeared = resolver.appeared()
    if appeared:
        log.info(
            "changefeed %s: table(s) of %s appeared in the database; running again with them",
            config.changefeed_id,
            ", ".join(sorted(appeared)),
        )
    return appeared
