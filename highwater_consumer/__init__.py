"""Highwater's consumer library: a changefeed's output read as consistent windows (issue 35).

No Spark: it runs in the programs that consume a changefeed's output topics. So far its core,
:class:`~highwater_consumer.windows.Windows` (records in, resolved windows out); the Kafka
reading around it, ``highwater apply`` and ``highwater tail`` are to come.
"""

from .windows import Row, Window, Windows

__all__ = ["Row", "Window", "Windows"]
