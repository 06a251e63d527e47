"""The changefeed pipeline: config, Spark session, wiring, CLI."""
