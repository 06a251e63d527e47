package dev.highwater.encoding;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;

/**
 * An initial scan's rows of a native source (CockroachDB's JSON, {@code {"after": …, ["before":
 * …,] "updated": "<hlc>"}}), written as the JSON encoder's wrapped envelope of {@code members}
 * (after, [before], [updated], [mvcc_timestamp]) exactly as the Python scan writes them
 * (pipeline/core/scan/scan.py): the key and the images written again as orjson writes what it read
 * ({@link Canonical}), {@code updated} the time given (the statement time for a snapshot row),
 * {@code mvcc_timestamp} the version's own.
 *
 * <p>{@link #time} reads a version's time from its tail without reading the rest, as the
 * scan's vectorised pass does ({@code NativeAdapter.times}); {@link #write} takes only versions
 * of exactly those members, valid JSON throughout: anything else is the Python scan's.
 */
public final class ScanEnvelope implements Serializable {
  private static final long serialVersionUID = 1L;
  private static final byte[] AFTER = bytes("after");
  private static final byte[] BEFORE = bytes("before");
  private static final byte[] UPDATED = bytes("updated");
  private static final int TAIL = 64; // the bytes NativeAdapter.times reads of a value

  private final byte[][] members;

  public ScanEnvelope(java.util.List<String> members) {
    this.members = new byte[members.size()][];
    for (int k = 0; k < this.members.length; k++) {
      this.members[k] = bytes(members.get(k));
    }
  }

  private static byte[] bytes(String text) {
    return text.getBytes(StandardCharsets.UTF_8);
  }

  /** The envelope's members, in order. */
  public java.util.List<String> members() {
    java.util.List<String> names = new java.util.ArrayList<>(members.length);
    for (byte[] member : members) {
      names.add(new String(member, StandardCharsets.UTF_8));
    }
    return names;
  }

  /**
   * A version's time when its value ends with an {@code "updated"} member as {@code
   * NativeAdapter.times} matches it ({@code "updated"\s*:\s*"<wall>[.<logical>]"\s*}\s*$}
   * within the last 64 bytes, the wall of at most 19 digits the first below 9, the logical of
   * at most 10): {wall, logical}; else null (decode to know).
   */
  public static long[] time(byte[] b) {
    int i = b.length - 1;
    i = back(b, i);
    if (i < 0 || b[i] != '}') {
      return null;
    }
    i = back(b, i - 1);
    if (i < 0 || b[i] != '"') {
      return null;
    }
    int end = i; // the closing quote
    int j = digitsBack(b, i - 1);
    long wall;
    long logical = 0;
    if (j >= 0 && b[j] == '.') {
      if (end - j - 1 < 1 || end - j - 1 > 10) {
        return null;
      }
      logical = Long.parseLong(new String(b, j + 1, end - j - 1, StandardCharsets.US_ASCII));
      end = j;
      j = digitsBack(b, j - 1);
    }
    int digits = end - j - 1;
    if (j < 0 || b[j] != '"' || digits < 1 || digits > 19 || (digits == 19 && b[j + 1] > '8')) {
      return null;
    }
    wall = Long.parseLong(new String(b, j + 1, digits, StandardCharsets.US_ASCII));
    i = back(b, j - 1);
    if (i < 0 || b[i] != ':') {
      return null;
    }
    i = back(b, i - 1);
    int name = i - UPDATED.length - 1; // the opening quote of "updated"
    if (name < Math.max(0, b.length - TAIL) || !Json.named(b, name, i + 1, UPDATED)) {
      return null;
    }
    return new long[] {wall, logical};
  }

  /** Back past RE2's {@code \s} ([\t\n\f\r ]) from {@code i}: the index of the byte before. */
  private static int back(byte[] b, int i) {
    while (i >= 0 && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\f' || b[i] == '\r')) {
      i--;
    }
    return i;
  }

  private static int digitsBack(byte[] b, int i) {
    while (i >= 0 && b[i] >= '0' && b[i] <= '9') {
      i--;
    }
    return i;
  }

  /**
   * Writes a version's row (its key and value record) into {@code out}: its time in {@code
   * out.ts}, the row's key and value in {@code out.key} and {@code out.value}; {@code updated}
   * is the envelope's time (null: the version's own), {@code snapshot} a snapshot row (no
   * before). {@code out.value} is
   * null for a delete's snapshot (no row). False: not taken (the Python scan decides).
   */
  public boolean write(byte[] key, byte[] value, long[] updated, boolean snapshot, Encoding.Encoded out) {
    // the version: {"after": {…}|null, ["before": {…}|null,] "updated": "<hlc>"}, nothing else
    out.slots(2); // after, before: where each value starts and ends
    int i = Json.ws(value, 0);
    if (i >= value.length || value[i] != '{') {
      return false;
    }
    long[] ts = null;
    for (int m = 0; ts == null; m++) {
      i = Json.ws(value, i + 1);
      int name = i;
      i = name < value.length && value[name] == '"' ? Json.string(value, name, false) : -1;
      int slot = i < 0 ? -1 : member(value, name, i, m);
      i = slot < 0 ? -1 : Json.ws(value, i);
      if (i < 0 || i >= value.length || value[i] != ':') {
        return false;
      }
      int start = Json.ws(value, i + 1);
      if (start >= value.length) {
        return false;
      }
      if (slot == 2) { // updated: the last member
        i = value[start] == '"' ? Json.string(value, start, false) : -1;
        ts = i < 0 ? null : Hlc.parse(value, start + 1, i - 1);
        if (ts == null) {
          return false;
        }
      } else {
        i = value[start] == '{' ? Json.object(value, start, 1) : Json.literal(value, start, Json.NULL);
        out.from[slot] = start;
        out.to[slot] = i;
      }
      i = i < 0 ? -1 : Json.ws(value, i);
      if (i < 0 || i >= value.length || value[i] != (slot == 2 ? '}' : ',')) {
        return false;
      }
    }
    if (Json.ws(value, i + 1) != value.length) {
      return false;
    }
    out.ts = ts;
    // the key is read first: one the Python scan cannot read is its bad record, deleted or not
    Encoding.Buffer o = out.buffer;
    o.reset();
    i = Canonical.value(key, Json.ws(key, 0), o, 0);
    if (i < 0 || o.bytes[0] != '[' || Json.ws(key, i) != key.length) {
      return false;
    }
    boolean deleted = value[out.from[0]] == 'n';
    if (snapshot && deleted) {
      out.key = null;
      out.value = null;
      return true;
    }
    out.key = o.copy(0);
    o.reset();
    for (byte[] member : members) {
      o.put(o.size == 0 ? '{' : ',');
      o.put('"');
      o.put(member, 0, member.length);
      o.put('"');
      o.put(':');
      switch (member[0]) {
        case 'a': // after
          if (!image(value, 0, o, out)) {
            return false;
          }
          break;
        case 'b': // before: none in a snapshot row, null where the version has none
          if (snapshot || out.from[1] < 0) {
            o.put(Json.NULL, 0, Json.NULL.length);
          } else if (!image(value, 1, o, out)) {
            return false;
          }
          break;
        case 'u': // updated
          quoted(updated == null ? ts : updated, o);
          break;
        default: // mvcc_timestamp: the version's own time
          quoted(ts, o);
      }
    }
    o.put('}');
    out.value = o.copy(0);
    return true;
  }

  /** Which member {@code [name, end)} is, in the {@code m}-th place: 0 after, 1 before, 2 updated. */
  private static int member(byte[] b, int name, int end, int m) {
    if (m == 0) {
      return Json.named(b, name, end, AFTER) ? 0 : -1;
    }
    if (m == 1 && Json.named(b, name, end, BEFORE)) {
      return 1;
    }
    return m <= 2 && Json.named(b, name, end, UPDATED) ? 2 : -1;
  }

  private static boolean image(byte[] value, int slot, Encoding.Buffer o, Encoding.Encoded out) {
    int from = out.from[slot];
    return Canonical.value(value, from, o, 1) == out.to[slot];
  }

  private static void quoted(long[] ts, Encoding.Buffer o) {
    byte[] text = Hlc.text(ts).getBytes(StandardCharsets.US_ASCII);
    o.put('"');
    o.put(text, 0, text.length);
    o.put('"');
  }
}
