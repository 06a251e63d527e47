package dev.highwater.encoding;

import com.fasterxml.jackson.databind.JsonNode;
import dev.highwater.encoding.Encoding.Encoded;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;

/**
 * The records an Avro route writes of a change {@link Avro} read (encoders/avro.py's
 * AvroEncoder, Python side): the key record after its header (the primary key's, or under
 * {@code key_column} that column's value from the version that keys the change), and the
 * envelope record after its header: {after, [before], [key], [topic], [updated],
 * [mvcc_timestamp]}, each row record's columns [null, T], the value's key the primary key's.
 * Written from the slots the reading filled, or from rows written already ({@link AvroRow}).
 */
final class AvroRecords implements Serializable {
  private static final long serialVersionUID = 1L;

  // A slot's start when its value is not a value: never met, or JSON null.
  private static final int ABSENT = -2;
  private static final int NULL = -1;

  private final AvroField[] columns; // the row record's
  private final AvroField[] key; // the primary key's, in order: the source's key, the value's
  final int keyColumn; // key_column's place in the row record, or -1: the primary key's
  private final AvroField keyField; // and its field in the key record
  private final byte[] keyHeader;
  private final byte[] valueHeader; // null: key_only, the value is a tombstone
  private final boolean diff;
  private final boolean keyInValue;
  private final byte[] topic; // the output topic's name under topic_in_value, else null
  private final boolean updated;
  private final boolean mvcc;

  /** What a plan's route describes (the Python encoder's {@code walk}), its fields read. */
  AvroRecords(JsonNode spec, AvroField[] columns, AvroField[] key, String outputTopic) {
    this.columns = columns;
    this.key = key;
    JsonNode keyed = spec.get("key_column");
    keyColumn = keyed == null ? -1 : keyed.get("column").asInt();
    keyField = keyed == null ? null : new AvroField(keyed.get("field"));
    keyHeader = hex(spec.get("key_header").asText());
    valueHeader = spec.get("value_header").isNull() ? null : hex(spec.get("value_header").asText());
    diff = spec.get("diff").asBoolean();
    keyInValue = spec.get("key_in_value").asBoolean();
    topic =
        spec.get("topic_in_value").asBoolean() ? outputTopic.getBytes(StandardCharsets.UTF_8) : null;
    updated = spec.get("updated").asBoolean();
    mvcc = spec.get("mvcc_timestamp").asBoolean();
  }

  /**
   * The key and value records, from the slots the reading filled ({@code image}: the first slot
   * of the version that keys the record, -1: neither). False: not taken.
   */
  boolean write(
      byte[] k, byte[] b, boolean after, boolean before, int image, long[] ts, Encoded out) {
    Encoding.Buffer buf = out.buffer;
    buf.reset();
    buf.put(keyHeader, 0, keyHeader.length);
    if (keyColumn < 0) {
      primary(buf, k, out);
    } else {
      int slot = image + keyColumn;
      if (image < 0 || out.from[slot] == ABSENT || (out.from[slot] == NULL && !keyField.nullable)) {
        return false; // no value of the column to key it by: the Python loop names the record
      }
      keyField.write(buf, b, slot, out);
    }
    keyed(buf, ts, out);
    if (valueHeader == null) {
      return true;
    }
    int start = buf.size;
    buf.put(valueHeader, 0, valueHeader.length);
    row(buf, b, after, key.length, out);
    if (diff) {
      row(buf, b, before, key.length + columns.length, out);
    }
    int time = key.length + 2 * columns.length; // its text's slot
    rest(buf, start, k, b, out.from[time], out.to[time], out);
    return true;
  }

  /**
   * The key and value records of a change whose rows are written already ({@link AvroRow}):
   * {@code after} and {@code before} each the {@code [null, row]}'s bytes, or empty for null
   * (under {@code key_column}, before is given even without diff: a delete is keyed by it);
   * the primary key read from {@code k} into the first slots. False: not taken.
   */
  boolean rows(byte[] k, Encoding.Buffer after, Encoding.Buffer before, long[] ts, Encoded out) {
    Encoding.Buffer buf = out.buffer;
    buf.reset();
    buf.put(keyHeader, 0, keyHeader.length);
    if (keyColumn < 0) {
      primary(buf, k, out);
    } else if (!column(buf, after.size > 0 ? after : before)) {
      return false;
    }
    keyed(buf, ts, out);
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
    rest(buf, start, k, time, 0, time.length, out);
    return true;
  }

  /**
   * {@code key_column}'s value in the written {@code [null, row]} of {@code image} as the key
   * record's field, to {@code buf}. False: no version, or null where the field is not nullable.
   */
  private boolean column(Encoding.Buffer buf, Encoding.Buffer image) {
    if (image.size == 0) {
      return false;
    }
    byte[] b = image.bytes;
    int i = 1; // past the union's branch: the row
    for (int c = 0; c < keyColumn; c++) {
      i = columns[c].skip(b, i);
    }
    int end = columns[keyColumn].skip(b, i);
    if (b[i] == 0) { // null
      if (!keyField.nullable) {
        return false;
      }
      buf.put(0);
    } else {
      buf.put(b, keyField.nullable ? i : i + 1, end);
    }
    return true;
  }

  private static void written(Encoding.Buffer buf, Encoding.Buffer row) {
    if (row.size == 0) {
      buf.put(0);
    } else {
      buf.put(row.bytes, 0, row.size);
    }
  }

  /** The primary key's record (without a header), read from the first slots. */
  private void primary(Encoding.Buffer buf, byte[] k, Encoded out) {
    for (int f = 0; f < key.length; f++) {
      key[f].write(buf, k, f, out);
    }
  }

  /** The key record written in {@code buf} (its header first) to {@code out.key}. */
  private static void keyed(Encoding.Buffer buf, long[] ts, Encoded out) {
    out.key = buf.copy(0);
    out.ts = ts;
    out.value = null; // key_only: a tombstone
  }

  /**
   * The value record's members after its rows: the key (the primary key's, {@code k} read into
   * the first slots), the topic, the time's text ({@code [from, to)} of {@code text}) for
   * updated and mvcc_timestamp; the record from {@code start} to {@code out.value}.
   */
  private void rest(
      Encoding.Buffer buf, int start, byte[] k, byte[] text, int from, int to, Encoded out) {
    if (keyInValue) {
      buf.put(2);
      if (keyColumn < 0) {
        buf.put(out.key, keyHeader.length, out.key.length);
      } else {
        primary(buf, k, out);
      }
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

  private static byte[] hex(String text) {
    byte[] out = new byte[text.length() / 2];
    for (int k = 0; k < out.length; k++) {
      out[k] = (byte) Integer.parseInt(text.substring(2 * k, 2 * k + 2), 16);
    }
    return out;
  }
}
