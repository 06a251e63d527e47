"""Development tooling: JVM jars, the embedded broker, the Kafka CLI and the data generator.

Nothing here runs inside a changefeed; it is what the demo, the tests and the benchmarks stand
on.
"""
