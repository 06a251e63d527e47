package dev.highwater.encoding;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.charset.StandardCharsets;

/**
 * A route whose changes are written again in Avro (encoders/avro.py, Python side): each change
 * read into slots here, its records written from them by {@link AvroRecords}. It takes the
 * schemas the Python side marks walkable: columns and key fields of the primitive types
 * string, long, int, double, float, boolean (no logical types).
 *
 * <p>It reads a change as the Python loop does: the value an object whose after and before
 * are objects or null and whose updated is a time (other members ignored), the key an array
 * of the primary key's values in order; a row's columns by name (missing ones null; one the
 * schema lacks is a schema change, left to the Python loop), each value as its field reads
 * and writes it ({@link AvroField}). Anything it is not sure of is not taken and the Python
 * loop decides: a duplicate member, a name with escapes, a value its field does not read, a
 * time not written as the changefeed writes times.
 *
 * <p>Under {@code key_column} the key record is one column's value, from the change's new
 * version or, a delete, its old one ({@code encoders.base.key_column_value}): a change whose
 * version lacks the column, or holds null where the key's field is not nullable, is the Python
 * loop's (it names the bad record). Under {@code headers_json_column_name} the column (not in
 * the row record) is taken out of both versions and its object, in the new version (a delete:
 * the old one), becomes the record's headers ({@link HeadersColumn#headers}): taken when that
 * object is compact ({@link Compact}: its members' text is then the loop's), null or absent.
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
  private final AvroField[] key; // the primary key's, in order: the source's key, the value's
  private final byte[] headersColumn; // headers_json_column_name, or null
  private final boolean readsBefore; // before into its slots: diff, or it may key or head it
  private final AvroRecords records;
  private transient int[] order; // see order()

  /** The encoding a plan's route describes (the Python encoder's {@code walk}). */
  Avro(JsonNode spec, String outputTopic) {
    columns = fields(spec.get("columns"));
    key = fields(spec.get("key"));
    JsonNode headers = spec.get("headers_column");
    headersColumn = headers == null ? null : headers.asText().getBytes(StandardCharsets.UTF_8);
    records = new AvroRecords(spec, columns, key, outputTopic);
    readsBefore = spec.get("diff").asBoolean() || records.keyColumn >= 0 || headersColumn != null;
  }

  @Override
  public boolean encode(byte[] k, byte[] b, Encoded out) {
    int nk = key.length;
    int nc = columns.length;
    int time = nk + 2 * nc; // the time's text, as the changefeed writes times
    out.slots(time + 3); // then the headers column's value in after, in before
    out.headers = null;
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
        end = side(b, start, nk + nc, readsBefore, out);
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
    int image = after >= 0 ? nk : before >= 0 ? nk + nc : -1; // the version keying the record
    if (headersColumn != null && !headers(b, image < 0 ? -1 : time + (image == nk ? 1 : 2), out)) {
      return false;
    }
    return records.write(k, b, after >= 0, before >= 0, image, ts, out);
  }

  /** The record's headers from the column's value in slot {@code slot} (-1: no version). */
  private static boolean headers(byte[] b, int slot, Encoded out) {
    int from = slot < 0 ? ABSENT : out.from[slot];
    if (from == ABSENT || b[from] == 'n') {
      return true; // no column, or null: no headers
    }
    if (b[from] != '{' || Compact.value(b, from, 2) != out.to[slot]) {
      return false; // its text in a string, another value, or spaced or escaped: the loop's
    }
    out.headers = HeadersColumn.headers(b, from);
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
      if (c < 0 && headersColumn != null && Json.named(b, name, nameEnd, headersColumn)) {
        int slot = key.length + 2 * columns.length + (base == key.length ? 1 : 2);
        if (out.from[slot] != ABSENT) {
          return -1; // named twice
        }
        end = Json.value(b, value, 2);
        out.from[slot] = value;
        out.to[slot] = end;
      } else if (c < 0) {
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

  /** This route's row record, whose rows {@link AvroRow} writes. */
  AvroField[] columns() {
    return columns;
  }

  /** {@code key_column}'s place in the row record, or -1 (keyed by the primary key). */
  int keyColumn() {
    return records.keyColumn;
  }

  /**
   * The key and value records of a change whose rows are written already ({@link AvroRow}):
   * {@code after} and {@code before} each the {@code [null, row]}'s bytes, or empty for null
   * (under {@code key_column}, before is given even without diff: a delete is keyed by it);
   * the key the JSON array of its values, read as {@link #encode} reads it. False: not taken.
   */
  boolean rows(byte[] k, Encoding.Buffer after, Encoding.Buffer before, long[] ts, Encoded out) {
    out.slots(key.length);
    out.headers = null;
    return key(k, out) && records.rows(k, after, before, ts, out);
  }

  private static AvroField[] fields(JsonNode specs) {
    AvroField[] out = new AvroField[specs.size()];
    for (int k = 0; k < out.length; k++) {
      out[k] = new AvroField(specs.get(k));
    }
    return out;
  }

  private static byte[] ascii(String text) {
    return text.getBytes(StandardCharsets.US_ASCII);
  }
}
