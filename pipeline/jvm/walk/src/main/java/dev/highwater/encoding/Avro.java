package dev.highwater.encoding;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.Serializable;
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
 * schema lacks is a schema change, left to the Python loop). A value is written as the compiled writer writes the Python
 * value of its JSON text: an integral number is an int (into a double or float: the nearest
 * one, as Python's float(int)), any other a float (the nearest double: Python's float(text)),
 * strings unescaped to UTF-8. Anything it is not sure of is not taken and the Python loop
 * decides: a duplicate member, a name with escapes, a value of another type, an integer of
 * more than 19 digits or beyond its type's range, a number that overflows its type as Python's
 * conversions raise (an infinite fraction or exponent is written as infinite), an
 * escaped surrogate, a time not written as the changefeed writes times.
 */
final class Avro implements Encoding {
  private static final long serialVersionUID = 1L;

  static final int STRING = 0;
  static final int LONG = 1;
  static final int INT = 2;
  static final int DOUBLE = 3;
  static final int FLOAT = 4;
  static final int BOOLEAN = 5;
  private static final String[] TYPES = {"string", "long", "int", "double", "float", "boolean"};

  // A slot's start when its value is not a value: never met, or JSON null.
  private static final int ABSENT = -2;
  private static final int NULL = -1;

  private static final byte[] AFTER = ascii("after");
  private static final byte[] BEFORE = ascii("before");
  private static final byte[] UPDATED = ascii("updated");
  private static final byte[] NULL_TEXT = ascii("null");
  private static final byte[] TRUE_TEXT = ascii("true");
  private static final byte[] FALSE_TEXT = ascii("false");

  /** A record's field: its name, its type, whether it is [null, T]. */
  static final class Field implements Serializable {
    private static final long serialVersionUID = 1L;
    final byte[] name;
    final int type;
    final boolean nullable;

    Field(JsonNode spec) {
      name = spec.get(0).asText().getBytes(StandardCharsets.UTF_8);
      type = java.util.Arrays.asList(TYPES).indexOf(spec.get(1).asText());
      nullable = spec.get(2).asBoolean();
      if (type < 0) {
        throw new IllegalArgumentException("not a walkable Avro type: " + spec);
      }
    }
  }

  private final Field[] columns; // the row record's
  private final Field[] key; // the key record's, in primary-key order
  private final byte[] keyHeader;
  private final byte[] valueHeader; // null: key_only, the value is a tombstone
  private final boolean diff;
  private final boolean keyInValue;
  private final byte[] topic; // the output topic's name under topic_in_value, else null
  private final boolean updated;
  private final boolean mvcc;

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
    out.slots(nk + 2 * nc);
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
      int end = field(k, i, key[f], f, out);
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
    int hint = 0; // sources mostly write the columns in the schema's order
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
      int c = column(b, name, nameEnd, hint);
      int end;
      if (c < 0) {
        return -1; // a column the schema lacks: a schema change, the Python loop stops there
      } else if (out.from[base + c] != ABSENT) {
        return -1; // a duplicate member
      } else {
        end = field(b, value, columns[c], base + c, out);
        hint = c + 1;
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

  /** The column named by the string {@code [from, to)}, or -1. */
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

  /** A field's JSON value at {@code v} into {@code slot}, read as its type. The index past it, or -1. */
  private static int field(byte[] b, int v, Field f, int slot, Encoded out) {
    if (v >= b.length) {
      return -1;
    }
    if (b[v] == 'n') {
      out.from[slot] = NULL;
      return f.nullable ? Json.literal(b, v, NULL_TEXT) : -1;
    }
    out.from[slot] = v;
    switch (f.type) {
      case STRING:
        int end = b[v] == '"' ? Json.string(b, v, true) : -1;
        out.to[slot] = end;
        return end;
      case BOOLEAN:
        out.bits[slot] = b[v] == 't' ? 1 : 0;
        return Json.literal(b, v, b[v] == 't' ? TRUE_TEXT : FALSE_TEXT);
      default:
        return number(b, v, f.type, slot, out);
    }
  }

  private static int number(byte[] b, int v, int type, int slot, Encoded out) {
    int end = Json.number(b, v);
    if (end < 0) {
      return -1;
    }
    boolean integral = true;
    for (int k = v; k < end; k++) {
      if (b[k] == '.' || b[k] == 'e' || b[k] == 'E') {
        integral = false;
        break;
      }
    }
    int digits = end - v - (b[v] == '-' ? 1 : 0);
    long n = 0;
    boolean exact = integral && digits <= 18; // an integer a long holds
    if (exact) {
      for (int k = end - digits; k < end; k++) {
        n = n * 10 + (b[k] - '0');
      }
      n = b[v] == '-' ? -n : n;
    } else if (integral && digits == 19) { // a bigint's 19 digits: a long unless beyond it
      try {
        n = Long.parseLong(new String(b, v, end - v, StandardCharsets.US_ASCII));
        exact = true;
      } catch (NumberFormatException beyond) {
        exact = false;
      }
    }
    if (type == LONG || type == INT) {
      if (!exact || (type == INT && n != (int) n)) {
        return -1; // a float, or out of range: the Python loop calls it a misfit
      }
      out.bits[slot] = n;
      return end;
    }
    // Python's float(text) of a fraction or exponent may be infinite (1e400); its float(int)
    // of an integer too large for a double raises, and so does packing a finite double too
    // large for a float. (A long's conversion to a double, as Python's float(int), rounds to
    // the nearest, ties to even.)
    double d = exact ? (double) n : parse(b, v, end);
    if (integral && Double.isInfinite(d)) {
      return -1;
    }
    if (type == DOUBLE) {
      out.bits[slot] = Double.doubleToRawLongBits(d);
      return end;
    }
    float f = (float) d;
    out.bits[slot] = Float.floatToRawIntBits(f);
    return Float.isInfinite(f) && !Double.isInfinite(d) ? -1 : end;
  }

  private static double parse(byte[] b, int from, int to) {
    return Double.parseDouble(new String(b, from, to - from, StandardCharsets.US_ASCII));
  }

  /** The key and value records, from the slots the reading filled. */
  private void write(byte[] k, byte[] b, boolean after, boolean before, long[] ts, Encoded out) {
    Encoding.Buffer buf = out.buffer;
    buf.reset();
    buf.put(keyHeader, 0, keyHeader.length);
    int body = buf.size;
    for (int f = 0; f < key.length; f++) {
      value(buf, k, key[f], f, out);
    }
    int keyEnd = buf.size;
    out.key = buf.copy(0);
    out.ts = ts;
    if (valueHeader == null) {
      out.value = null;
      return;
    }
    int start = buf.size;
    buf.put(valueHeader, 0, valueHeader.length);
    row(buf, b, after, key.length, out);
    if (diff) {
      row(buf, b, before, key.length + columns.length, out);
    }
    if (keyInValue) {
      buf.put(2);
      buf.put(buf.bytes, body, keyEnd);
    }
    if (topic != null) {
      buf.put(2);
      buf.varint(topic.length);
      buf.put(topic, 0, topic.length);
    }
    if (updated || mvcc) {
      byte[] time = Hlc.text(ts).getBytes(StandardCharsets.US_ASCII);
      for (int twice = (updated ? 1 : 0) + (mvcc ? 1 : 0); twice > 0; twice--) {
        buf.put(2);
        buf.varint(time.length);
        buf.put(time, 0, time.length);
      }
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
      value(buf, b, columns[c], base + c, out);
    }
  }

  private static void value(Encoding.Buffer buf, byte[] b, Field f, int slot, Encoded out) {
    int from = out.from[slot];
    if (from < 0) {
      buf.put(0); // null (a non-nullable field never reads one)
      return;
    }
    if (f.nullable) {
      buf.put(2);
    }
    switch (f.type) {
      case STRING:
        string(buf, b, from + 1, out.to[slot] - 1, out.text);
        break;
      case DOUBLE:
        buf.fixed(out.bits[slot], 8);
        break;
      case FLOAT:
        buf.fixed(out.bits[slot], 4);
        break;
      case BOOLEAN:
        buf.put((int) out.bits[slot]);
        break;
      default: // LONG, INT
        buf.varint(out.bits[slot]);
    }
  }

  /** A JSON string's content {@code [from, to)}, checked, as an Avro string (UTF-8). */
  private static void string(Encoding.Buffer buf, byte[] b, int from, int to, Encoding.Buffer text) {
    int slash = from;
    while (slash < to && b[slash] != '\\') {
      slash++;
    }
    if (slash == to) {
      buf.varint(to - from);
      buf.put(b, from, to);
      return;
    }
    text.reset();
    text.put(b, from, slash);
    for (int i = slash; i < to; i++) {
      byte c = b[i];
      if (c != '\\') {
        text.put(c);
        continue;
      }
      c = b[++i];
      switch (c) {
        case 'b':
          text.put('\b');
          break;
        case 'f':
          text.put('\f');
          break;
        case 'n':
          text.put('\n');
          break;
        case 'r':
          text.put('\r');
          break;
        case 't':
          text.put('\t');
          break;
        case 'u':
          int code = Integer.parseInt(new String(b, i + 1, 4, StandardCharsets.US_ASCII), 16);
          i += 4;
          if (code < 0x80) {
            text.put(code);
          } else if (code < 0x800) {
            text.put(0xc0 | (code >> 6));
            text.put(0x80 | (code & 0x3f));
          } else { // not a surrogate: Json.string took none
            text.put(0xe0 | (code >> 12));
            text.put(0x80 | ((code >> 6) & 0x3f));
            text.put(0x80 | (code & 0x3f));
          }
          break;
        default: // " \ /
          text.put(c);
      }
    }
    buf.varint(text.size);
    buf.put(text.bytes, 0, text.size);
  }

  private static Field[] fields(JsonNode specs) {
    Field[] out = new Field[specs.size()];
    for (int k = 0; k < out.length; k++) {
      out[k] = new Field(specs.get(k));
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
