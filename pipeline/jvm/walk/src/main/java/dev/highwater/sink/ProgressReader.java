package dev.highwater.sink;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Reads a source partition's committed {@link Progress} back from the progress topic: what a
 * task does once per partition that its executor opens a transactional producer for.
 *
 * <p>A reader is two consumers of one cluster: read_uncommitted (the high watermark) and
 * read_committed (the records). Readers are pooled per executor and reused between reads (two
 * new consumers cost each read ~50 ms of connections and metadata, on every partition of a new
 * run); one that failed is closed, one no read used for the given idle time is closed by
 * {@link #evictIdle}. The read_committed consumer fetches with a 10 ms {@code
 * fetch.max.wait.ms}: a fetch it sent ahead at a partition's end is then answered before the
 * next read needs the connection (the broker would hold it 500 ms by default).
 */
final class ProgressReader {
  private static final long READ_DEADLINE_MS = 60_000L;
  private static final List<ProgressReader> IDLE = new ArrayList<>(); // guarded by itself

  private final Map<String, Object> settings;
  private final KafkaConsumer<byte[], byte[]> uncommitted;
  private final KafkaConsumer<byte[], byte[]> committed;
  private long released; // System.nanoTime() when last given back

  private ProgressReader(Map<String, Object> settings) {
    this.settings = settings;
    Map<String, Object> all = new HashMap<>(settings);
    all.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_uncommitted");
    this.uncommitted = new KafkaConsumer<>(all);
    this.committed = new KafkaConsumer<>(settings);
  }

  /**
   * The latest committed progress of {@code key} in partition {@code slot} of {@code topic}, or
   * null; {@code producer}: the settings of the producer that wrote it (its cluster, security,
   * backoff).
   *
   * <p>Other keys share the partition, and their transactions may still be open: until they
   * end, the last stable offset stays below what this key committed after them. So the read
   * first waits until every transaction that wrote to the partition so far has ended (the last
   * stable offset reaches the high watermark read first), at most {@code waitMillis} (the
   * transactions' timeout, after which their coordinator aborts them); then it reads back from
   * the partition's end in widening windows.
   */
  static Progress read(
      Map<String, Object> producer, String topic, int slot, String key, long waitMillis)
      throws IOException {
    ProgressReader reader = take(settings(producer));
    boolean ok = false;
    try {
      Progress found = reader.latest(new TopicPartition(topic, slot), key, waitMillis);
      ok = true;
      return found;
    } finally {
      give(reader, ok);
    }
  }

  private static final Map<String, Integer> SLOTS = new HashMap<>(); // guarded by itself

  /**
   * The progress topic's partitions, asked once per executor of a pooled reader's consumer
   * (the one the first progress read then uses).
   */
  static int slots(Map<String, Object> producer, String topic) {
    synchronized (SLOTS) {
      Integer known = SLOTS.get(topic);
      if (known != null) {
        return known;
      }
    }
    ProgressReader reader = take(settings(producer));
    boolean ok = false;
    int slots;
    try {
      slots = reader.committed.partitionsFor(topic).size();
      ok = true;
    } finally {
      give(reader, ok);
    }
    synchronized (SLOTS) {
      SLOTS.put(topic, slots);
    }
    return slots;
  }

  private Progress latest(TopicPartition tp, String key, long waitMillis) throws IOException {
    long written = uncommitted.endOffsets(List.of(tp)).get(tp); // the high watermark
    committed.assign(List.of(tp));
    long end = settled(tp, written, waitMillis);
    long begin = committed.beginningOffsets(List.of(tp)).get(tp);
    long deadline = System.currentTimeMillis() + READ_DEADLINE_MS;
    for (long window = 16; ; window *= 8) {
      long from = Math.max(begin, end - window);
      committed.seek(tp, from);
      byte[] found = null;
      while (committed.position(tp) < end) {
        if (System.currentTimeMillis() > deadline) {
          throw new IOException("reading the progress of " + key + " from " + tp + " timed out");
        }
        Iterable<ConsumerRecord<byte[], byte[]>> polled =
            committed.poll(Duration.ofMillis(200)).records(tp);
        for (ConsumerRecord<byte[], byte[]> r : polled) {
          if (r.offset() < end
              && r.key() != null
              && key.equals(new String(r.key(), StandardCharsets.UTF_8))) {
            found = r.value();
          }
        }
      }
      if (found != null || from == begin) {
        return found == null ? null : Progress.parse(found);
      }
    }
  }

  /** The last stable offset once it reached {@code written}; waits at most {@code millis}. */
  private long settled(TopicPartition tp, long written, long millis) throws IOException {
    long deadline = System.currentTimeMillis() + millis;
    while (true) {
      long stable = committed.endOffsets(List.of(tp)).get(tp);
      if (stable >= written) {
        return stable;
      }
      if (System.currentTimeMillis() > deadline) {
        throw new IOException(
            "reading the progress in "
                + tp
                + ": a transaction that wrote there before offset "
                + written
                + " is still open after "
                + millis
                + " ms");
      }
      try {
        Thread.sleep(50);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new IOException("interrupted while reading the progress in " + tp, e);
      }
    }
  }

  /** A read_committed consumer's settings from the producer's (its cluster, security, backoff). */
  static Map<String, Object> settings(Map<String, Object> producer) {
    Map<String, Object> c = new HashMap<>();
    producer.forEach(
        (k, v) -> {
          if (k.equals("bootstrap.servers")
              || k.startsWith("security.")
              || k.startsWith("sasl.")
              || k.startsWith("ssl.")
              || k.equals("client.dns.lookup")
              || k.equals(ConsumerConfig.RETRY_BACKOFF_MS_CONFIG)) {
            c.put(k, v);
          }
        });
    c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
    c.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "10");
    c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    return c;
  }

  private static ProgressReader take(Map<String, Object> settings) {
    synchronized (IDLE) {
      for (Iterator<ProgressReader> it = IDLE.iterator(); it.hasNext(); ) {
        ProgressReader r = it.next();
        if (r.settings.equals(settings)) {
          it.remove();
          return r;
        }
      }
    }
    return new ProgressReader(settings);
  }

  private static void give(ProgressReader reader, boolean ok) {
    if (!ok) { // its consumers' state is unknown: a failed read's reader is not reused
      reader.close();
      return;
    }
    reader.released = System.nanoTime();
    synchronized (IDLE) {
      IDLE.add(reader);
    }
  }

  /** Closes the readers no read used for {@code idleNanos} (all of them with 0). */
  static void evictIdle(long idleNanos) {
    List<ProgressReader> old = new ArrayList<>();
    long now = System.nanoTime();
    synchronized (IDLE) {
      IDLE.removeIf(
          r -> {
            boolean idle = now - r.released >= idleNanos;
            if (idle) {
              old.add(r);
            }
            return idle;
          });
    }
    old.forEach(ProgressReader::close);
  }

  /** The readers kept (tests). */
  static int kept() {
    synchronized (IDLE) {
      return IDLE.size();
    }
  }

  private void close() {
    uncommitted.close(Duration.ZERO);
    committed.close(Duration.ZERO);
  }
}
