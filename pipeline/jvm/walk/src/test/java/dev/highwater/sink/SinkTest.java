package dev.highwater.sink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.util.Map;
import org.apache.kafka.clients.producer.MockProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.errors.RecordTooLargeException;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.junit.jupiter.api.Test;

/**
 * A task's sends return only once Kafka answered every record it sent (the producer's flush
 * alone is no proof: KAFKA-19479); the first refusal fails the task, and so do missing answers.
 * Kafka's own MockProducer stands for the pooled producer: it answers when told to.
 */
class SinkTest {
  /** A producer that answers nothing until told to; {@code onFlush} runs at flush(). */
  static final class Producer extends MockProducer<byte[], byte[]> {
    private final Runnable onFlush;

    Producer(Runnable onFlush) {
      super(false, new ByteArraySerializer(), new ByteArraySerializer());
      this.onFlush = onFlush;
    }

    Producer() {
      this(null);
    }

    @Override
    public synchronized void flush() {
      if (onFlush == null) {
        super.flush(); // answers every record sent
      } else {
        onFlush.run();
      }
    }
  }

  static ProducerRecord<byte[], byte[]> record(int n) {
    return new ProducerRecord<>("out", new byte[] {(byte) n}, new byte[] {(byte) n});
  }

  static Sink.Sends sends(int count) {
    return (kafka, acks) -> {
      for (int n = 0; n < count; n++) {
        acks.send(kafka, record(n));
      }
    };
  }

  @Test
  void returns_once_every_record_sent_was_answered() throws Exception {
    Producer producer = new Producer();
    Sink.deliver(producer, sends(5), 1_000);
    assertEquals(5, producer.history().size());
    assertEquals(0, producer.completeNext() ? 1 : 0); // nothing left unanswered
  }

  @Test
  void a_record_refused_after_flush_fails_the_task_with_kafkas_error() {
    Producer[] self = new Producer[1];
    self[0] =
        new Producer(
            () -> {
              self[0].completeNext();
              self[0].errorNext(new RecordTooLargeException("The request was too large."));
              self[0].completeNext();
            });
    IOException e = assertThrows(IOException.class, () -> Sink.deliver(self[0], sends(3), 1_000));
    assertEquals(
        "writing to Kafka failed: org.apache.kafka.common.errors.RecordTooLargeException: "
            + "The request was too large.",
        e.getMessage());
    assertEquals(RecordTooLargeException.class, e.getCause().getClass());
  }

  @Test
  void a_refusal_answered_while_sending_stops_the_next_send() {
    Producer producer = new Producer();
    IOException e =
        assertThrows(
            IOException.class,
            () ->
                Sink.deliver(
                    producer,
                    (kafka, acks) -> {
                      acks.send(kafka, record(0));
                      producer.errorNext(new IllegalStateException("refused"));
                      acks.send(kafka, record(1));
                      fail("a send after a refusal");
                    },
                    1_000));
    assertEquals("writing to Kafka failed: java.lang.IllegalStateException: refused", e.getMessage());
    assertEquals(1, producer.history().size()); // the second record was never sent
  }

  @Test
  void records_left_unanswered_fail_the_task_naming_how_many() {
    Producer[] self = new Producer[1];
    self[0] =
        new Producer(
            () -> {
              self[0].completeNext();
              self[0].completeNext();
            });
    long start = System.nanoTime();
    IOException e = assertThrows(IOException.class, () -> Sink.deliver(self[0], sends(3), 200));
    assertEquals(
        "writing to Kafka failed: the producer answered 2 of 3 records within 200 ms "
            + "(delivery.timeout.ms and a margin)",
        e.getMessage());
    long waited = (System.nanoTime() - start) / 1_000_000L;
    if (waited < 200) {
      fail("gave up after " + waited + " ms, before its 200");
    }
  }

  @Test
  void answers_from_the_producers_thread_end_the_wait() throws Exception {
    Producer[] self = new Producer[1];
    self[0] =
        new Producer(
            () ->
                new Thread(
                        () -> {
                          try {
                            Thread.sleep(100);
                          } catch (InterruptedException e) {
                            Thread.currentThread().interrupt();
                          }
                          while (self[0].completeNext()) {
                            // every record answered, one by one, from another thread
                          }
                        })
                    .start());
    long start = System.nanoTime();
    Sink.deliver(self[0], sends(4), 10_000);
    long waited = (System.nanoTime() - start) / 1_000_000L;
    assertEquals(4, self[0].history().size());
    if (waited >= 10_000) {
      fail("waited the whole timeout: " + waited + " ms");
    }
  }

  @Test
  void no_records_need_no_answers() throws Exception {
    Sink.deliver(new Producer(() -> {}), sends(0), 1);
  }

  @Test
  void the_wait_is_the_producers_delivery_timeout_or_its_default() {
    assertEquals(120_000L, Sink.deliveryTimeout(Map.<String, Object>of()));
    assertEquals(5_000L, Sink.deliveryTimeout(Map.<String, Object>of("delivery.timeout.ms", "5000")));
    assertEquals(7_000L, Sink.deliveryTimeout(Map.<String, Object>of("delivery.timeout.ms", 7000)));
  }
}
