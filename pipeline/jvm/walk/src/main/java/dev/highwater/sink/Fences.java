package dev.highwater.sink;

import java.io.IOException;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.ProducerFencedException;

/** What a fenced transactional producer says, and the error a task fails with. */
final class Fences {
  static final String TAKEN = "another instance of this changefeed took over its writes";

  private Fences() {}

  /** Whether {@code e} (or a cause) says the producer's id is held by a newer producer. */
  static boolean fenced(Throwable e) {
    for (Throwable t = e; t != null; t = t.getCause()) {
      if (t instanceof ProducerFencedException || t instanceof InvalidProducerEpochException) {
        return true;
      }
    }
    return false;
  }

  /** The task's error for {@code e}, met writing source partition {@code where} under {@code id}. */
  static IOException failed(KafkaException e, String where, String id) {
    if (fenced(e)) {
      return new IOException(
          TAKEN
              + " (or another attempt of this task did, or the transaction outlived"
              + " transaction.timeout.ms and its coordinator aborted it): source partition "
              + where
              + ", transactional id "
              + id
              + ": "
              + e,
          e);
    }
    return new IOException("writing to Kafka failed: " + e, e);
  }
}
