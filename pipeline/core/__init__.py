"""The changefeed, driver and executors, in rooms named for what they own.

Each room is a sub-package. A room imports only the rooms before it in this order (type-only
imports too), and those only through their ``__init__``, which names what the others may use;
``tests/unit/test_layers.py`` holds the rooms to it:

1. ``sources``: the source adapters, one per ``format:`` (a raw record in, a change or a
   marker out);
2. ``ledger``: the frontier, the checkpoint record, the initial scan's bookkeeping and every
   record written to Kafka, declared once;
3. ``batch``: writing a micro-batch: the driver↔executor contract, the Python loop, the JVM
   walk and its facade, the two writers, CDC queries, Kafka client settings, crash points;
4. ``resolved``: resolved times from beside the stream (Debezium's transaction topics) and
   the ``Resolver`` contract;
5. ``evolution``: output schemas that follow their tables (``schema_change_policy``);
6. ``scan``: the initial scan on the executors, and its statement time;
7. ``progress``: where a run stands (``Position``), its exactly-once claim, safepoints, and
   the pure checkpoint-and-marker policy;
8. ``operators``: what operators see (job status, metrics, observers) and ask (the spec,
   pause and stop, what an update may change);
9. ``coordinator``: the coordinator on the driver, its set-up, checkpoints, scans and query.

Nothing is imported here: importing a room loads only that room and the rooms below it.
"""
