"""Sinks: the driver's Kafka side, free of Spark.

Topic administration (``admin``), compacted topics as key-value stores (``compacted``), the
acknowledged producer the changefeed's own records go through (``producer``), the resolved
markers' broadcaster (``resolved``), output schemas registered or published (``schemas``) and
Kafka's default partitioner (``partitioning``). Rows are not written here: every row goes
through the run's row sink, ``pipeline/core/batch/sink.py`` (our Java's ``Sink``).
"""
