"""What a foreign error (Spark's, Kafka's through py4j) says in one line."""

from schemas.errors import cause

ROOT = "org.apache.kafka.common.errors.RecordTooLargeException: The request was too large."
PY4J = f"""An error occurred while calling z:dev.highwater.walk.Walk.write.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 3.0 failed
\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:2935)
Caused by: java.io.IOException: writing to Kafka failed: {ROOT}
\tat dev.highwater.sink.Sink$Acks.check(Sink.java:170)
Caused by: {ROOT}
"""


def test_a_jvm_error_is_its_root_cause() -> None:
    assert cause(RuntimeError(PY4J)) == ROOT


def test_any_other_error_is_its_first_line_or_its_repr() -> None:
    assert cause(ValueError("  no route to host\nmore")) == "no route to host"
    assert cause(TimeoutError()) == "TimeoutError()"
