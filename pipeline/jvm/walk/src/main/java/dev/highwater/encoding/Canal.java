package dev.highwater.encoding;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * TiCDC's Canal-JSON events ({@code enable-tidb-extension=true}), read as
 * pipeline/core/sources/canal.py reads them and written as the JSON encoder's wrapped envelope
 * (after, [before,] updated), one record per row of {@code data} ({@link Encoded#rows}), all
 * at the event's commit time; a {@code TIDB_WATERMARK} is a marker ({@link Encoded#marker});
 * a DDL event carries no row. Values are text in Canal-JSON: those of numeric
 * {@code mysqlType}s are written as the numbers they spell, the rest as they came. An event it
 * does not read exactly as the Python side (an escaped name, a column twice, a numeric
 * column that holds no number, a TSO beyond a long) is the Python loop's, whole.
 */
final class Canal implements Encoding {
  private static final long serialVersionUID = 1L;
  private static final byte[][] EVENT =
      Members.names("type", "_tidb", "isDdl", "data", "old", "pkNames", "mysqlType");
  private static final byte[][] TIDB = Members.names("commitTs", "watermarkTs");
  private static final byte[] WATERMARK = Members.utf8("\"TIDB_WATERMARK\"");
  private static final byte[][] OPS = Members.names("\"INSERT\"", "\"UPDATE\"", "\"DELETE\"");
  private static final String[] NUMERIC = {
    "tinyint", "smallint", "mediumint", "int", "integer", "bigint", "decimal", "numeric",
    "float", "double", "real", "bit", "year"
  };
  private static final byte[] NULL = Members.utf8("null");

  private final boolean diff; // before is written
  private transient Scratch scratch;

  /** A task's reading state. */
  private static final class Scratch {
    final int[] event = new int[2 * EVENT.length + 1];
    final int[] tidb = new int[2 * TIDB.length + 1];
    byte[] types; // the last mysqlType object, as it came, and its numeric columns' names
    List<byte[]> numeric = new ArrayList<>();
    final CanalRow row = new CanalRow();
    final CanalRow old = new CanalRow();
    final Buffer out = new Buffer();
    byte[] time; // the event's time, as text
  }

  Canal(byte[][] members) {
    this(Members.has(members, "before"));
  }

  /** {@code diff}: before is written (the JSON encoder's member, or Avro's {@code diff}). */
  Canal(boolean diff) {
    this.diff = diff;
  }

  @Override
  public boolean encode(byte[] key, byte[] value, Encoded out) {
    if (scratch == null) {
      scratch = new Scratch();
    }
    Scratch s = scratch;
    out.marker = null;
    out.rowKeys.clear();
    out.rowValues.clear();
    int start = Json.ws(value, 0);
    int[] e = s.event;
    int end = start < value.length && value[start] == '{'
        ? Members.read(value, start, EVENT, e, null) : -1;
    if (end < 0 || Json.ws(value, end) != value.length) {
      return false;
    }
    int[] t = s.tidb;
    if (e[2] < 0 || value[e[2]] != '{' || Members.read(value, e[2], TIDB, t, null) < 0) {
      return false; // no _tidb object: the Python side names the record
    }
    if (e[0] >= 0 && Arrays.equals(value, e[0], e[1], WATERMARK, 0, WATERMARK.length)) {
      out.marker = tso(value, t[2], t[3]);
      return out.marker != null;
    }
    if (e[4] >= 0 && Json.literal(value, e[4], Json.TRUE) == e[5]) {
      return true; // DDL: no row
    }
    int op = -1;
    for (int k = 0; k < OPS.length && e[0] >= 0; k++) {
      op = Arrays.equals(value, e[0], e[1], OPS[k], 0, OPS[k].length) ? k : op;
    }
    out.ts = op < 0 ? null : tso(value, t[0], t[1]);
    if (out.ts == null || !numeric(value, e[12], e[13], s)) {
      return false;
    }
    s.time = Envelope.text(out.ts);
    return rows(value, e, op, s, out);
  }

  /** A TSO (physical milliseconds << 18 | logical) as a time, or null. */
  private static long[] tso(byte[] b, int from, int to) {
    long tso = from < 0 ? -1 : Connect.integer(b, from, to);
    if (tso < 0 || (tso >> 18) > Long.MAX_VALUE / 1_000_000) {
      return null; // not a TSO (the Python side names it), or past a long's nanoseconds
    }
    return new long[] {(tso >> 18) * 1_000_000, tso & ((1 << 18) - 1)};
  }

  /** mysqlType's numeric columns (the last ones when it is the last event's mysqlType). */
  private static boolean numeric(byte[] b, int from, int to, Scratch s) {
    if (from < 0 || b[from] != '{') {
      return false;
    }
    if (s.types != null && Arrays.equals(b, from, to, s.types, 0, s.types.length)) {
      return true;
    }
    List<byte[]> numeric = new ArrayList<>();
    Members.Names names = new Members.Names();
    int i = Json.ws(b, from + 1);
    while (i < to && b[i] == '"') {
      int name = i;
      i = names.read(b, i);
      if (i < 0) {
        return false;
      }
      int nameEnd = i;
      i = Json.ws(b, Json.ws(b, i) + 1); // past the colon (the object was read whole)
      int kind = i;
      i = Json.value(b, i, 1);
      if (b[kind] == '"') {
        int numericType = numericType(b, kind + 1, i - 1);
        if (numericType < 0) {
          return false;
        }
        if (numericType == 1) {
          numeric.add(Arrays.copyOfRange(b, name + 1, nameEnd - 1));
        }
      }
      i = Json.ws(b, i);
      i = b[i] == ',' ? Json.ws(b, i + 1) : i;
    }
    s.types = Arrays.copyOfRange(b, from, to);
    s.numeric = numeric;
    return true;
  }

  /** 1 when a mysqlType starts with a numeric type's name as a word, 0 if not, -1 not told. */
  private static int numericType(byte[] b, int from, int to) {
    for (int k = from; k < to; k++) {
      if (b[k] < 0x20 || b[k] == '\\') {
        return -1; // escapes and non-ASCII: Python's lower() and \b read otherwise
      }
    }
    String kind = new String(b, from, to - from, StandardCharsets.US_ASCII).toLowerCase();
    for (String word : NUMERIC) {
      if (kind.startsWith(word)) {
        int next = word.length() < kind.length() ? kind.charAt(word.length()) : ' ';
        if (!Character.isLetterOrDigit(next) && next != '_') {
          return 1;
        }
      }
    }
    return 0;
  }

  /** Each row of data (and old): its key and envelope in {@code out}'s rows. */
  private boolean rows(byte[] b, int[] e, int op, Scratch s, Encoded out) {
    int data = e[6];
    int old = e[8];
    if (data < 0 || b[data] != '[' || e[10] < 0 || b[e[10]] != '[') {
      return false;
    }
    boolean update = op == 1;
    if (update && (old < 0 || b[old] != '[')) {
      return false;
    }
    int i = Json.ws(b, data + 1);
    int j = update ? Json.ws(b, old + 1) : -1;
    while (i < b.length && b[i] == '{') {
      i = s.row.read(b, i, s.numeric);
      if (i < 0) {
        return false;
      }
      if (update) {
        j = j < b.length && b[j] == '{' ? s.old.read(b, j, s.numeric) : -1;
        if (j < 0) {
          return false;
        }
        j = Json.ws(b, j);
      }
      if (!write(b, e, op, s, out)) {
        return false;
      }
      i = Json.ws(b, i);
      if (i < b.length && b[i] == ']') {
        break;
      }
      i = i < b.length && b[i] == ',' ? Json.ws(b, i + 1) : -1;
      if (update) {
        j = j < b.length && b[j] == ',' ? Json.ws(b, j + 1) : -1;
      }
      if (i < 0 || (update && j < 0)) {
        return false;
      }
    }
    // a non-empty array of rows (and old, as many)
    return !out.rowKeys.isEmpty() && i < b.length && b[i] == ']' && (!update || b[j] == ']');
  }

  /** The row's key (pkNames' values) and envelope, added to {@code out}'s rows. */
  private boolean write(byte[] b, int[] e, int op, Scratch s, Encoded out) {
    CanalRow row = s.row;
    Buffer o = s.out;
    o.reset();
    o.put('[');
    int i = Json.ws(b, e[10] + 1);
    int keys = 0;
    while (i < b.length && b[i] == '"') {
      int end = Json.string(b, i, false);
      int k = end < 0 ? -1 : row.named(b, i + 1, end - 1);
      if (k < 0) {
        return false; // no such column (or an escaped name): the Python side says
      }
      if (keys++ > 0) {
        o.put(',');
      }
      row.put(k, o);
      i = Json.ws(b, end);
      i = i < b.length && b[i] == ',' ? Json.ws(b, i + 1) : i;
    }
    if (keys == 0 || i >= b.length || b[i] != ']') {
      return false;
    }
    o.put(']');
    out.rowKeys.add(o.copy(0));
    o.reset();
    Envelope.after(o);
    if (op == 2) {
      o.put(NULL, 0, NULL.length);
    } else {
      row.object(o);
    }
    if (diff) {
      Envelope.before(o);
      if (op == 0) {
        o.put(NULL, 0, NULL.length);
      } else if (op == 2) {
        row.object(o);
      } else {
        row.merged(s.old, o);
      }
    }
    Envelope.updated(o, s.time);
    out.rowValues.add(o.copy(0));
    return true;
  }

}
