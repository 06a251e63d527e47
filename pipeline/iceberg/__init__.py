"""The Spark engine of ``highwater apply --catalog … --engine spark`` (issue 52).

Windows applied to Iceberg tables with Spark's Iceberg runtime on a Spark master, reading
the output topics' offset ranges as Spark batches, with the local engine's guarantees and
marks (:mod:`highwater_consumer.iceberg`), so a target grows onto a cluster as its
changefeed does. The consumer library imports no Spark: ``highwater``'s command hands
``--engine spark`` over to :func:`apply_with_spark`.

* :class:`SparkIcebergApplier`: the steps (:mod:`.engine`);
* :mod:`.ranges`: offset ranges, markers and the group's offsets (driver and one Spark job);
* :mod:`.rows`: records into rows on the executors (the consumer library's decoder and
  converters), and a window's rows;
* :mod:`.merge`: one table's commit, R in its snapshot summary;
* :class:`SparkTarget`, :func:`iceberg_session`: the session and the catalog (:mod:`.session`).
"""

from .engine import SparkIcebergApplier, apply_with_spark
from .session import CATALOG, SparkTarget, iceberg_session

__all__ = ["CATALOG", "SparkIcebergApplier", "SparkTarget", "apply_with_spark", "iceberg_session"]
