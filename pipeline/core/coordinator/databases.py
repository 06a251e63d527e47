"""Whole-database sources at a run's start: the tables their topics say there are.

``databases`` entries (``pipeline/config/databases.py``) become sources here, from the topics
the source cluster lists when a run starts. A table created while the changefeed runs is
named by an END of its capture's transaction topic (``TransactionLog.appeared``): the run
ends after its batch, and the next one starts here with that table's topic, which Debezium
wrote before that END; a topic the cluster does not list yet is waited for.
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

    ``appeared``: data collections (``schema.table``) the last run met and must now follow.
    """
    if not config.databases:
        return config
    wanted = set(appeared)
    deadline = time.monotonic() + wait
    while True:
        topics = cluster_metadata(client_config(config.kafka)).topics
        found = expanded(config, topics)
        missing = wanted - {s.collection for s in found.sources}
        if not missing:
            return found
        if time.monotonic() > deadline:
            raise SourceError(
                f"table(s) {', '.join(sorted(missing))} appeared in the transaction topic, "
                f"and their topics were not listed within {wait:.0f} s"
            )
        time.sleep(1.0)


def met_tables(config: ChangefeedConfig, resolver: Resolver) -> set[str]:
    """The tables the transaction topics named that the run does not read (logged)."""
    appeared = set().union(*resolver.appeared().values())
    if appeared:
        log.info(
            "changefeed %s: table(s) %s appeared in the database; running again with them",
            config.changefeed_id,
            ", ".join(sorted(appeared)),
        )
    return appeared
