"""A whole database's tables created while the changefeed runs, met in its transaction topic.

A ``databases`` entry (``pipeline/config/databases.py``) follows every table its patterns
take, the ones created later too. Such a table's changes come in transactions whose END
counts them under the table's name before the run reads its topic: :meth:`NewTables.meet`
adds the table to the log's followed ones, so those changes count and the transaction waits
for them (no resolved time, so no marker, passes it), and names it (:attr:`NewTables.names`:
the run ends, and the next one reads its topic from its start: ``coordinator/databases.py``).
The names go into the checkpoint beside the log's state (``TransactionLogRecord.appeared``),
so a run started after a kill reads the table the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.config import ChangefeedConfig, DatabaseConfig

from .transactions import TransactionLog


class NewTables:
    """One transaction topic's tables to follow that the run does not read yet."""

    def __init__(self, databases: Sequence[DatabaseConfig], names: Sequence[str] = ()) -> None:
        """``databases``: the entries of this transaction topic; ``names``: met before."""
        self._databases = list(databases)
        self.names = set(names)

    @classmethod
    def of(
        cls, config: ChangefeedConfig, transactions: str, record: Mapping[str, Any]
    ) -> NewTables:
        """The tables ``transactions``' databases take; those a checkpoint ``record`` named."""
        databases = [d for d in config.databases if d.transactions == transactions]
        followed = config.transaction_topics.get(transactions, {})
        return cls(databases, [n for n in record.get("appeared", ()) if n not in followed])

    def topic(self, name: str) -> str | None:
        """The topic of table ``name`` (``schema.table``), if a database here takes it."""
        taken = [d for d in self._databases if d.follows(name)]
        return taken[0].topic_of(name) if taken else None

    def topics(self) -> set[str]:
        """The topics of the tables met that the run does not read."""
        return {t for t in map(self.topic, self.names) if t is not None}

    def meet(self, counts: Mapping[str, int], tx_log: TransactionLog) -> None:
        """An END's counts: a table to follow that the log does not, followed from now on."""
        for name in counts:
            topic = None if name in tx_log.collections else self.topic(name)
            if topic is not None:
                tx_log.collections[name] = topic
                self.names.add(name)

    def restore(self, tx_log: TransactionLog) -> None:
        """A restored log counts the tables the run before it met, as that run did."""
        for name in self.names:
            topic = self.topic(name)
            if topic is not None:
                tx_log.collections.setdefault(name, topic)
