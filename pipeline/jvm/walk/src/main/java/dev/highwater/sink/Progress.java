package dev.highwater.sink;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.zip.CRC32;

/**
 * A source partition's committed progress under exactly-once delivery: the record each
 * transaction commits last, in the changefeed's compacted progress topic.
 *
 * <p>Key {@code rows/<topic>/<partition>} (the stream's; {@code scan/…} an initial scan's chunk),
 * written to partition {@link #slot} (CRC-32 of the key over the topic's partitions:
 * pipeline/core/progress/claim.py computes the same); value JSON {@code {format_version, topic,
 * partition, next_offset, resolved, position, generation}} and a scan's {@code time}. The
 * driver's claim at a run's start writes the same record with the run's generation; tasks read
 * it back with {@link ProgressReader}.
 */
public final class Progress {
  static final ObjectMapper JSON = new ObjectMapper();

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
}
