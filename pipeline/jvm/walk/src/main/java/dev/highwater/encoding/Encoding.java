package dev.highwater.encoding;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;

/**
 * How one route writes the changes the walk takes: {@link Verbatim} passes the source's bytes
 * on, {@link Avro} writes them again in the route's Avro schemas.
 */
public interface Encoding extends Serializable {
  /** A route's encoding as the walk's plan describes it (the Python encoder's {@code walk}). */
  static Encoding of(JsonNode spec, String topic) {
    return of(spec, topic, "native");
  }

  /**
   * A route's encoding for a source of {@code format}: native sources' records are read by the
   * encoding itself; Debezium's ({@link Debezium}) and Canal-JSON's ({@link Canal}) are read
   * into the JSON encoder's envelope, written as it is or again in Avro ({@link AvroOut}).
   */
  static Encoding of(JsonNode spec, String topic, String format) {
    return of(spec, topic, format, java.util.Map.of());
  }

  /** {@code commits}: Debezium binlogs' transactions and their ENDs' times, as the driver read. */
  static Encoding of(
      JsonNode spec, String topic, String format, java.util.Map<String, long[]> commits) {
    return of(spec, topic, format, commits, null);
  }

  /**
   * {@code registry}: the source's schema registry ({@code {"url": …}}; null: none), which
   * Debezium's records in Confluent's wire format name their schemas in.
   */
  static Encoding of(
      JsonNode spec,
      String topic,
      String format,
      java.util.Map<String, long[]> commits,
      JsonNode registry) {
    Encoding encoding = unkeyed(spec, topic, format, commits, registry);
    if (spec.get("kind").asText().equals("avro")) {
      return encoding; // Avro reads its key and headers columns itself
    }
    // a JSON route's headers from a column (HeadersColumn), then its key from one (KeyColumn)
    JsonNode headers = spec.get("headers_column");
    if (headers != null) {
      encoding = new HeadersColumn(encoding, headers.asText());
    }
    JsonNode column = spec.get("key_column");
    return column == null ? encoding : new KeyColumn(encoding, column.asText());
  }

  private static Encoding unkeyed(
      JsonNode spec,
      String topic,
      String format,
      java.util.Map<String, long[]> commits,
      JsonNode registry) {
    if (format.equals("canal-json") || format.equals("debezium")) {
      String kind = spec.get("kind").asText();
      if (kind.equals("avro")) { // the reader's JSON envelope, written again in Avro
        boolean diff = spec.get("diff").asBoolean();
        Avro avro = new Avro(spec, topic);
        if (format.equals("debezium") && registry != null) { // it writes Avro itself
          return new DebeziumAvro(diff, commits, Registry.of(registry), avro);
        }
        return new AvroOut(reader(format, diff, commits, registry), avro, format.equals("canal-json"));
      }
      if (!kind.equals("verbatim")) {
        throw new IllegalArgumentException(format + " is walked to JSON or Avro only: " + spec);
      }
      return reader(format, Members.has(members(spec), "before"), commits, registry);
    }
    if (spec.get("kind").asText().equals("avro")) {
      return new Avro(spec, topic);
    }
    return new Verbatim(members(spec));
  }

  /**
   * A Debezium or Canal-JSON source's reading, its changes written as the JSON encoder's
   * wrapped envelope ({@code diff}: with before).
   */
  private static Encoding reader(
      String format, boolean diff, java.util.Map<String, long[]> commits, JsonNode registry) {
    if (format.equals("canal-json")) {
      return new Canal(diff);
    }
    if (registry != null) {
      return new DebeziumAvro(diff, commits, Registry.of(registry));
    }
    return new Debezium(diff, commits);
  }

  private static byte[][] members(JsonNode spec) {
    JsonNode names = spec.get("members");
    byte[][] members = new byte[names.size()][];
    for (int k = 0; k < members.length; k++) {
      members[k] = names.get(k).asText().getBytes(StandardCharsets.UTF_8);
    }
    return members;
  }

  /**
   * Reads a change (key and value bytes, neither null) into {@code out}: its time, its output
   * key and value. False: not taken, the Python loop decides (it may well be a fine record).
   */
  boolean encode(byte[] key, byte[] value, Encoded out);

  /** A change as an encoding wrote it, and the task's scratch space for writing it. */
  final class Encoded {
    public long[] ts;
    public byte[] key;
    public byte[] value; // null: a tombstone (or, ts null too, a change not written yet)
    // a change that says where its source put it (Debezium): its position there, or null
    public long[] position;
    // and its transaction (as the transaction log names it) and place in it, or null
    public String tx;
    public long within;
    // a record that is a marker (Canal-JSON's watermark): its time, or null
    public long[] marker;
    // a record of several rows (Canal-JSON): each row's key and value, in order
    public final java.util.List<byte[]> rowKeys = new java.util.ArrayList<>();
    public final java.util.List<byte[]> rowValues = new java.util.ArrayList<>();
    // its headers from a column (HeadersColumn), or null; of a record of several rows: each
    // row's, in rowHeaders (empty: none)
    public Headers headers;
    public final java.util.List<Headers> rowHeaders = new java.util.ArrayList<>();
    final Buffer buffer = new Buffer();
    final Buffer text = new Buffer();
    // per slot (a field an encoding reads): where its JSON value starts and ends, its bits
    int[] from = new int[0];
    int[] to = new int[0];
    long[] bits = new long[0];

    /** {@code n} slots, each where no value was read yet (start -2). */
    void slots(int n) {
      if (from.length < n) {
        from = new int[n];
        to = new int[n];
        bits = new long[n];
      }
      java.util.Arrays.fill(from, 0, n, -2);
    }
  }

  /** A record's headers, in order: each a name and a value. */
  final class Headers {
    // what a header adds to a record's size beside its name and value, at most (its varints;
    // HEADER_FRAMING in pipeline/core/batch/contract.py)
    static final int FRAMING = 10;
    public final java.util.List<String> names = new java.util.ArrayList<>();
    public final java.util.List<byte[]> values = new java.util.ArrayList<>();

    void add(String name, byte[] value) {
      names.add(name);
      values.add(value);
    }

    /** What they add to a record's size, as Kafka counts it (contract.header_bytes). */
    public static int bytes(Headers headers) {
      if (headers == null) {
        return 0;
      }
      int bytes = 0;
      for (int k = 0; k < headers.names.size(); k++) {
        bytes += headers.names.get(k).getBytes(StandardCharsets.UTF_8).length;
        bytes += headers.values.get(k).length + FRAMING;
      }
      return bytes;
    }
  }

  /** A growable byte buffer (one per task, reused for every record). */
  final class Buffer {
    byte[] bytes = new byte[512];
    int size;

    void reset() {
      size = 0;
    }

    void room(int more) {
      if (size + more > bytes.length) {
        bytes = java.util.Arrays.copyOf(bytes, Math.max(bytes.length * 2, size + more));
      }
    }

    void put(int b) {
      room(1);
      bytes[size++] = (byte) b;
    }

    void put(byte[] b, int from, int to) {
      room(to - from);
      System.arraycopy(b, from, bytes, size, to - from);
      size += to - from;
    }

    /** A long as Avro writes it: zig-zag, then a base-128 varint. */
    void varint(long v) {
      long n = (v << 1) ^ (v >> 63);
      room(10);
      while ((n & ~0x7fL) != 0) {
        bytes[size++] = (byte) ((n & 0x7f) | 0x80);
        n >>>= 7;
      }
      bytes[size++] = (byte) n;
    }

    /** Little-endian, {@code count} bytes of {@code bits}. */
    void fixed(long bits, int count) {
      room(count);
      for (int k = 0; k < count; k++) {
        bytes[size++] = (byte) (bits >>> (8 * k));
      }
    }

    byte[] copy(int from) {
      return java.util.Arrays.copyOfRange(bytes, from, size);
    }
  }
}
