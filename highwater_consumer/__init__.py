"""Highwater's consumer library: a changefeed's output read as consistent windows (issue 35).

No Spark: it runs in the programs that consume a changefeed's output topics.

* :class:`~highwater_consumer.windows.Windows`: records in, resolved windows out (pure);
* :class:`~highwater_consumer.consumer.ChangefeedConsumer`: the output topics read into it,
  partitions running ahead paused, offsets and R committed once a window is acknowledged;
* :class:`~highwater_consumer.output.Output`: the topics and formats, from the changefeed id;
* :class:`~highwater_consumer.postgres.PostgresApplier`: windows into PostgreSQL, R in the
  same transaction (``highwater apply``); ``highwater tail`` prints them.
"""

from .consumer import ChangefeedConsumer
from .decoding import BadRecord, Change, ConsumerError, Marker
from .output import Output
from .windows import Row, Window, Windows

__all__ = [
    "BadRecord",
    "Change",
    "ChangefeedConsumer",
    "ConsumerError",
    "Marker",
    "Output",
    "Row",
    "Window",
    "Windows",
]
