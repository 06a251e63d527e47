package dev.highwater.sink;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.zip.CRC32;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * A source partition's committed progress under exactly-once delivery: the record each
 * transaction commits last, in the changefeed's compacted progress topic.
 *
 * <p>Key {@code rows/<topic>/<partition>} (the stream's; {@code scan/…} an initial scan's chunk),
 * written to partition {@link #slot} (CRC-32 of the key over the topic's partitions:
 * pipeline/core/progress.py computes the same); value JSON {@code {format_version, topic,
 * partition, next_offset, resolved, position, generation}} and a scan's {@code time}. The
 * driver's claim at a run's start writes the same record with the run's generation.
 */
public final class Progress {
  static final ObjectMapper JSON = new ObjectMapper();
  private static final long READ_DEADLINE_MS = 60_000L;

  final long nextOffset; // -1: none
  final long generation;
  final String time; // a scan's: the snapshot's time (null for the stream's)

  Progress(long nextOffset, long generation) {
    this(nextOffset, generation, null);
  }

  Progress(long nextOffset, long generation, String time) {
    this.nextOffset = nextOffset;
    this.generation = generation;
    this.time = time;
  }

  static String key(String kind, String topic, int partition) {
    return kind + "/" + topic + "/" + partition;
  }

  static int slot(String key, int partitions) {
    CRC32 crc = new CRC32();
    crc.update(key.getBytes(StandardCharsets.UTF_8));
    return (int) (crc.getValue() % partitions);
  }

  /** The record's value: where the partition's committed rows end, and the floor there. */
  static byte[] value(
      String topic,
      int partition,
      long nextOffset,
      String resolved,
      JsonNode position,
      long gen,
      String time) {
    ObjectNode v = JSON.createObjectNode();
    v.put("format_version", 1);
    v.put("topic", topic);
    v.put("partition", partition);
    v.put("next_offset", nextOffset);
    v.put("resolved", resolved);
    v.set("position", position == null ? JSON.nullNode() : position);
    v.put("generation", gen);
    if (time != null) {
      v.put("time", time);
    }
    try {
      return JSON.writeValueAsBytes(v);
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }

  static Progress parse(byte[] value) throws IOException {
    JsonNode v = JSON.readTree(value);
    JsonNode next = v.get("next_offset");
    JsonNode time = v.get("time");
    return new Progress(
        next == null || next.isNull() ? -1 : next.asLong(),
        v.path("generation").asLong(0),
        time == null || time.isNull() ? null : time.asText());
  }

  /**
   * The latest committed progress of {@code key} in partition {@code slot} of {@code topic}
   * (read_committed), or null: read back from the partition's end, in widening windows.
   *
   * <p>Other keys share the partition, and their transactions may still be open: until they
   * end, the last stable offset stays below what this key committed after them. So the read
   * first waits until every transaction that wrote to the partition so far has ended (the last
   * stable offset reaches the high watermark read first), at most {@code waitMillis} (the
   * transactions' timeout, after which their coordinator aborts them).
   */
  static Progress read(
      Map<String, Object> producer, String topic, int slot, String key, long waitMillis)
      throws IOException {
    TopicPartition tp = new TopicPartition(topic, slot);
    Map<String, Object> uncommitted = consumer(producer);
    uncommitted.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_uncommitted");
    long written;
    try (KafkaConsumer<byte[], byte[]> all = new KafkaConsumer<>(uncommitted)) {
      written = all.endOffsets(List.of(tp)).get(tp); // the high watermark
    }
    // closed without waiting: close() would wait for the fetch the consumer sent ahead at the
    // partition's end, which the broker holds fetch.max.wait.ms (500 ms by default)
    KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(consumer(producer));
    try {
      consumer.assign(List.of(tp));
      long end = settled(consumer, tp, written, waitMillis);
      long begin = consumer.beginningOffsets(List.of(tp)).get(tp);
      long deadline = System.currentTimeMillis() + READ_DEADLINE_MS;
      for (long window = 16; ; window *= 8) {
        long from = Math.max(begin, end - window);
        consumer.seek(tp, from);
        byte[] found = null;
        while (consumer.position(tp) < end) {
          if (System.currentTimeMillis() > deadline) {
            throw new IOException("reading the progress of " + key + " from " + tp + " timed out");
          }
          for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200)).records(tp)) {
            if (r.offset() < end
                && r.key() != null
                && key.equals(new String(r.key(), StandardCharsets.UTF_8))) {
              found = r.value();
            }
          }
        }
        if (found != null || from == begin) {
          return found == null ? null : parse(found);
        }
      }
    } finally {
      consumer.close(Duration.ZERO);
    }
  }

  /** The last stable offset once it reached {@code written}; waits at most {@code millis}. */
  private static long settled(
      KafkaConsumer<byte[], byte[]> consumer, TopicPartition tp, long written, long millis)
      throws IOException {
    long deadline = System.currentTimeMillis() + millis;
    while (true) {
      long stable = consumer.endOffsets(List.of(tp)).get(tp);
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

  /** A read_committed consumer's settings from the producer's (its cluster and security). */
  static Map<String, Object> consumer(Map<String, Object> producer) {
    Map<String, Object> c = new HashMap<>();
    producer.forEach(
        (k, v) -> {
          if (k.equals("bootstrap.servers")
              || k.startsWith("security.")
              || k.startsWith("sasl.")
              || k.startsWith("ssl.")
              || k.equals("client.dns.lookup")) {
            c.put(k, v);
          }
        });
    c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
    c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    return c;
  }
}
