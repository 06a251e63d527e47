"""Encoders: rows to bytes (JSON, Avro). Pure Python; no Spark at import."""
