"""Sinks: write batches of encoded rows to Kafka, and say what a replay does."""
