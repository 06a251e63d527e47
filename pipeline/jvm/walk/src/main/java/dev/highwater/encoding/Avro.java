package dev.highwater.encoding;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.charset.StandardCharsets;

/**
 * A route whose changes are written again in Avro (encoders/avro.py, Python side): the
 * Confluent or single-object header, then the key record, and the envelope record {after,
 * [before], [key], [topic], [updated], [mvcc_timestamp]} whose row record has every column
 * [null, T]. It takes the schemas the Python side marks walkable: columns and key fields of
 * the primitive types string, long, int, double, float, boolean (no logical types).
 *
 * <p>It reads a change as the Python loop does: the value an object whose after and before
 * are objects or null and whose updated is a time (other members ignored), the key an array
 * of the primary key's values in order; a row's columns by name (missing ones null; one the
 * schema lacks is a schema change, left to the Python loop), each value as its field reads
 * and writes it ({@link AvroField}). Anything it is not sure of is not taken and the Python
 * loop decides: a duplicate member, a name with escapes, a value its field does not read, a
 * time not written as the changefeed writes times.
 */
final class Avro implements Encoding {
  private static final long serialVersionUID = 1L;

  // A slot's start when its value is not a value: never met, or JSON null.
  private static final int ABSENT = -2;
  private static final int NULL = -1;

  private static final byte[] AFTER = ascii("after");
  private static final byte[] BEFORE = ascii("before");
  private static final byte[] UPDATED = ascii("updated");
  private static final byte[] NULL_TEXT = ascii("null");

  private final AvroField[] columns; // the row record's
  private final AvroField[] key; // the key record's, in primary-key order
  private final byte[] keyHeader;
  private final byte[] valueHeader; // null: key_only, the value is a tombstone
  private final boolean diff;
  private final boolean keyInValue;
  private final byte[] topic; // the output topic's name under topic_in_value, else null
  private final boolean updated;
  private final boolean mvcc;
  private transient int[] order; // see order()

  /** The encoding a plan's route describes (the Python encoder's {@code walk}). */
  Avro(JsonNode spec, String outputTopic) {
    columns = fields(spec.get("columns"));
    key = fields(spec.get("key"));
    keyHeader = hex(spec.get("key_header").asText());
    valueHeader = spec.get("value_header").isNull() ? null : hex(spec.get("value_header").asText());
    diff = spec.get("diff").asBoolean();
    keyInValue = spec.get("key_in_value").asBoolean();
    topic =
        spec.get("topic_in_value").asBoolean() ? outputTopic.getBytes(StandardCharsets.UTF_8) : null;
    updated = spec.get("updated").asBoolean();
    mvcc = spec.get("mvcc_timestamp").asBoolean();
  }

  @Override
  public boolean encode(byte[] k, byte[] b, Encoded out) {
    int nk = key.length;
    int nc = columns.length;
    int time = nk + 2 * nc; // the last slot: the time's text, as the changefeed writes times
    out.slots(time + 1);
    if (!key(k, out)) {
      return false;
    }
    // The value's top-level members: after and before (objects or null), updated, any other.
    int i = Json.ws(b, 0);
    if (i >= b.length || b[i] != '{') {
      return false;
    }
    int after = ABSENT;
    int before = ABSENT;
    long[] ts = null;
    i = Json.ws(b, i + 1);
    while (true) {
      int name = i;
      int nameEnd = name < b.length && b[name] == '"' ? Json.string(b, name, false) : -1;
      if (nameEnd < 0) {
        return false; // also an empty object: no time
      }
      i = Json.ws(b, nameEnd);
      if (i >= b.length || b[i] != ':') {
        return false;
      }
      int start = Json.ws(b, i + 1);
      if (start >= b.length) {
        return false;
      }
      int end;
      if (Json.named(b, name, nameEnd, UPDATED)) {
        end = ts == null && b[start] == '"' ? Json.string(b, start, false) : -1;
        ts = end < 0 ? null : Hlc.parse(b, start + 1, end - 1);
        if (ts == null) {
          return false;
        }
        out.from[time] = start + 1; // Hlc.text(ts): parse takes no other spelling
        out.to[time] = end - 1;
      } else if (Json.named(b, name, nameEnd, AFTER)) {
        if (after != ABSENT) {
          return false;
        }
        after = b[start] == '{' ? start : NULL;
        end = side(b, start, nk, true, out);
      } else if (Json.named(b, name, nameEnd, BEFORE)) {
        if (before != ABSENT) {
          return false;
        }
        before = b[start] == '{' ? start : NULL;
        end = side(b, start, nk + nc, diff, out);
      } else {
        end = Json.value(b, start, 1);
      }
      if (end < 0) {
        return false;
      }
      i = Json.ws(b, end);
      if (i >= b.length) {
        return false;
      }
      if (b[i] == '}') {
        break;
      }
      if (b[i] != ',') {
        return false;
      }
      i = Json.ws(b, i + 1);
    }
    if (ts == null || Json.ws(b, i + 1) != b.length) {
      return false;
    }
    write(k, b, after >= 0, before >= 0, ts, out);
    return true;
  }

  /** The key's values into the first slots: an array of exactly the key's fields. */
  private boolean key(byte[] k, Encoded out) {
    int i = Json.ws(k, 0);
    if (i >= k.length || k[i] != '[') {
      return false;
    }
    i = Json.ws(k, i + 1);
    for (int f = 0; f < key.length; f++) {
      int end = key[f].read(k, i, f, out);
      if (end < 0) {
        return false;
      }
      i = Json.ws(k, end);
      if (i >= k.length || k[i] != (f + 1 < key.length ? ',' : ']')) {
        return false;
      }
      i = Json.ws(k, i + 1);
    }
    return i == k.length;
  }

  /**
   * after or before at {@code start}: an object (its columns into the slots from {@code base}
   * when {@code read}, else only checked) or null. The index past it, or -1.
   */
  private int side(byte[] b, int start, int base, boolean read, Encoded out) {
    if (b[start] != '{') {
      return Json.literal(b, start, NULL_TEXT);
    }
    if (!read) {
      return Json.object(b, start, 1);
    }
    int i = Json.ws(b, start + 1);
    if (i < b.length && b[i] == '}') {
      return i + 1;
    }
    int[] order = order();
    int position = 0; // the member's place in the object
    while (true) {
      int name = i;
      int nameEnd = name < b.length && b[name] == '"' ? Json.string(b, name, false) : -1;
      if (nameEnd < 0) {
        return -1;
      }
      i = Json.ws(b, nameEnd);
      if (i >= b.length || b[i] != ':') {
        return -1;
      }
      int value = Json.ws(b, i + 1);
      int c = column(b, name, nameEnd, position < order.length ? order[position] : 0);
      int end;
      if (c < 0) {
        return -1; // a column the schema lacks: a schema change, the Python loop stops there
      } else if (out.from[base + c] != ABSENT) {
        return -1; // a duplicate member
      } else {
        end = columns[c].read(b, value, base + c, out);
        if (position < order.length) {
          order[position++] = c;
        }
      }
      if (end < 0) {
        return -1;
      }
      i = Json.ws(b, end);
      if (i >= b.length) {
        return -1;
      }
      if (b[i] == '}') {
        return i + 1;
      }
      if (b[i] != ',') {
        return -1;
      }
      i = Json.ws(b, i + 1);
    }
  }

  /**
   * Per member's place in a row, the column last found there: a source writes its rows'
   * columns in one order, mostly, whether or not the schema's (a task's own, as its slots).
   */
  private int[] order() {
    if (order == null) {
      order = new int[columns.length];
      for (int c = 0; c < order.length; c++) {
        order[c] = c;
      }
    }
    return order;
  }

  /** The column named by the string {@code [from, to)} (likely {@code hint}), or -1. */
  private int column(byte[] b, int from, int to, int hint) {
    if (hint < columns.length && Json.named(b, from, to, columns[hint].name)) {
      return hint;
    }
    for (int c = 0; c < columns.length; c++) {
      if (Json.named(b, from, to, columns[c].name)) {
        return c;
      }
    }
    return -1;
  }

  /** The key and value records, from the slots the reading filled. */
  private void write(byte[] k, byte[] b, boolean after, boolean before, long[] ts, Encoded out) {
    Encoding.Buffer buf = keyRecord(k, ts, out);
    if (valueHeader == null) {
      return;
    }
    int start = buf.size;
    buf.put(valueHeader, 0, valueHeader.length);
    row(buf, b, after, key.length, out);
    if (diff) {
      row(buf, b, before, key.length + columns.length, out);
    }
    int time = key.length + 2 * columns.length; // its text's slot
    rest(buf, start, b, out.from[time], out.to[time], out);
  }

  /** This route's row record, whose rows {@link AvroRow} writes. */
  AvroField[] columns() {
    return columns;
  }

  /**
   * The key and value records of a change whose rows are written already ({@link AvroRow}):
   * {@code after} and {@code before} each the {@code [null, row]}'s bytes, or empty for null;
   * the key the JSON array of its values, read as {@link #encode} reads it. False: not taken.
   */
  boolean rows(byte[] k, Encoding.Buffer after, Encoding.Buffer before, long[] ts, Encoded out) {
    out.slots(key.length);
    if (!key(k, out)) {
      return false;
    }
    Encoding.Buffer buf = keyRecord(k, ts, out);
    if (valueHeader == null) {
      return true;
    }
    int start = buf.size;
    buf.put(valueHeader, 0, valueHeader.length);
    written(buf, after);
    if (diff) {
      written(buf, before);
    }
    byte[] time = Envelope.text(ts);
    rest(buf, start, time, 0, time.length, out);
    return true;
  }

  private static void written(Encoding.Buffer buf, Encoding.Buffer row) {
    if (row.size == 0) {
      buf.put(0);
    } else {
      buf.put(row.bytes, 0, row.size);
    }
  }

  /** The key record (its header first) to {@code out.key}, read from the slots; the buffer. */
  private Encoding.Buffer keyRecord(byte[] k, long[] ts, Encoded out) {
    Encoding.Buffer buf = out.buffer;
    buf.reset();
    buf.put(keyHeader, 0, keyHeader.length);
    for (int f = 0; f < key.length; f++) {
      key[f].write(buf, k, f, out);
    }
    out.key = buf.copy(0);
    out.ts = ts;
    out.value = null; // key_only: a tombstone
    return buf;
  }

  /**
   * The value record's members after its rows: the key, the topic, the time's text ({@code
   * [from, to)} of {@code text}) for updated and mvcc_timestamp; the record from {@code start}
   * to {@code out.value}.
   */
  private void rest(Encoding.Buffer buf, int start, byte[] text, int from, int to, Encoded out) {
    if (keyInValue) {
      buf.put(2);
      buf.put(out.key, keyHeader.length, out.key.length);
    }
    if (topic != null) {
      buf.put(2);
      buf.varint(topic.length);
      buf.put(topic, 0, topic.length);
    }
    for (int twice = (updated ? 1 : 0) + (mvcc ? 1 : 0); twice > 0; twice--) {
      buf.put(2);
      buf.varint(to - from);
      buf.put(text, from, to);
    }
    out.value = java.util.Arrays.copyOfRange(buf.bytes, start, buf.size);
  }

  private void row(Encoding.Buffer buf, byte[] b, boolean present, int base, Encoded out) {
    if (!present) {
      buf.put(0);
      return;
    }
    buf.put(2);
    for (int c = 0; c < columns.length; c++) {
      columns[c].write(buf, b, base + c, out);
    }
  }

  private static AvroField[] fields(JsonNode specs) {
    AvroField[] out = new AvroField[specs.size()];
    for (int k = 0; k < out.length; k++) {
      out[k] = new AvroField(specs.get(k));
    }
    return out;
  }

  private static byte[] hex(String text) {
    byte[] out = new byte[text.length() / 2];
    for (int k = 0; k < out.length; k++) {
      out[k] = (byte) Integer.parseInt(text.substring(2 * k, 2 * k + 2), 16);
    }
    return out;
  }

  private static byte[] ascii(String text) {
    return text.getBytes(StandardCharsets.US_ASCII);
  }
}
