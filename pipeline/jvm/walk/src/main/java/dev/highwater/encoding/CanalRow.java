package dev.highwater.encoding;

import java.util.Arrays;
import java.util.List;

/**
 * One row of a Canal-JSON event, as pipeline/core/sources/canal.py types it: its columns'
 * names and values as the JSON encoder writes them ({@code text}), by position; numeric
 * columns' text written as the number it spells, the rest as it came ({@link Canonical}).
 */
final class CanalRow {
  final Encoding.Buffer text = new Encoding.Buffer();
  int[] spans = new int[32]; // per column: name from, to, value from, to (in text)
  int count;
  private final Columns last = new Columns();

  void clear() {
    text.reset();
    count = 0;
  }

  void add(int nameFrom, int nameTo, int valueFrom) {
    if (4 * count + 4 > spans.length) {
      spans = Arrays.copyOf(spans, 2 * spans.length);
    }
    spans[4 * count] = nameFrom;
    spans[4 * count + 1] = nameTo;
    spans[4 * count + 2] = valueFrom;
    spans[4 * count + 3] = text.size;
    count++;
  }

  /** The column named as {@code other}'s column {@code k}, or -1. */
  int find(CanalRow other, int k) {
    return named(other.text.bytes, other.spans[4 * k], other.spans[4 * k + 1]);
  }

  /** The column named {@code [from, to)} of {@code name}, or -1. */
  int named(byte[] name, int from, int to) {
    for (int j = 0; j < count; j++) {
      if (Arrays.equals(text.bytes, spans[4 * j], spans[4 * j + 1], name, from, to)) {
        return j;
      }
    }
    return -1;
  }

  void put(int k, Encoding.Buffer out) {
    out.put(text.bytes, spans[4 * k + 2], spans[4 * k + 3]);
  }

  void putName(int k, Encoding.Buffer out) {
    out.put('"');
    out.put(text.bytes, spans[4 * k], spans[4 * k + 1]);
    out.put('"');
    out.put(':');
  }

  /**
   * Reads the row at {@code i} (an object of text values), typed by the numeric columns:
   * the index past it, or -1 (a column twice, an escaped name, a numeric column's value
   * that spells no number).
   */
  int read(byte[] b, int i, List<byte[]> numeric) {
    clear();
    Encoding.Buffer t = text;
    i = Json.ws(b, i + 1);
    if (i < b.length && b[i] == '}') {
      return i + 1;
    }
    boolean same = last.numeric == numeric; // the columns so far are the last row's, in order
    while (i < b.length && b[i] == '"') {
      int name = i;
      i = Json.string(b, i, false);
      if (i < 0) {
        return -1;
      }
      int nameFrom = t.size;
      t.put(b, name + 1, i - 1);
      int nameTo = t.size;
      same = same && last.is(count, t.bytes, nameFrom, nameTo);
      if (!same && named(t.bytes, nameFrom, nameTo) >= 0) {
        return -1; // a column twice
      }
      boolean numericColumn =
          same ? last.numericAt(count) : isNumeric(t.bytes, nameFrom, nameTo, numeric);
      i = Json.ws(b, i);
      if (i >= b.length || b[i] != ':') {
        return -1;
      }
      i = Json.ws(b, i + 1);
      int valueFrom = t.size;
      if (i < b.length && b[i] != 'n' && numericColumn) {
        int end = b[i] == '"' ? Json.string(b, i, false) : -1; // a number spelled as text
        if (end < 0 || Json.number(b, i + 1) != end - 1) {
          return -1;
        }
        t.put(b, i + 1, end - 1);
        i = end;
      } else {
        i = Canonical.value(b, i, t, 3);
      }
      if (i < 0) {
        return -1;
      }
      add(nameFrom, nameTo, valueFrom);
      i = Json.ws(b, i);
      if (i < b.length && b[i] == '}') {
        if (!same) {
          last.keep(this, numeric);
        }
        return i + 1;
      }
      i = i < b.length && b[i] == ',' ? Json.ws(b, i + 1) : -1;
      if (i < 0) {
        return -1;
      }
    }
    return -1;
  }

  private static boolean isNumeric(byte[] text, int from, int to, List<byte[]> numeric) {
    for (byte[] name : numeric) {
      if (Arrays.equals(name, 0, name.length, text, from, to)) {
        return true;
      }
    }
    return false;
  }

  /** The row as a JSON object. */
  void object(Encoding.Buffer o) {
    o.put('{');
    for (int k = 0; k < count; k++) {
      if (k > 0) {
        o.put(',');
      }
      putName(k, o);
      put(k, o);
    }
    o.put('}');
  }

  /** {@code {**row, **old}}: the row's columns, old's values over them, then old's others. */
  void merged(CanalRow old, Encoding.Buffer o) {
    o.put('{');
    for (int k = 0; k < count; k++) {
      if (k > 0) {
        o.put(',');
      }
      putName(k, o);
      int j = old.find(this, k);
      if (j >= 0) {
        old.put(j, o);
      } else {
        put(k, o);
      }
    }
    for (int j = 0; j < old.count; j++) {
      if (find(old, j) < 0) {
        if (o.bytes[o.size - 1] != '{') {
          o.put(',');
        }
        old.putName(j, o);
        old.put(j, o);
      }
    }
    o.put('}');
  }

  /**
   * The columns of the last row read whole, in its order, each numeric or not by the numeric
   * names it was read with: a table's rows come with their columns in one order, so a row's
   * column matched to the last row's at its place is neither a second of an earlier one nor
   * of another type, without comparing it to every column before it.
   */
  private static final class Columns {
    private final Encoding.Buffer names = new Encoding.Buffer();
    private int[] ends = new int[8];
    private boolean[] numericAt = new boolean[8];
    private int count;
    private List<byte[]> numeric; // the names numericAt was told by (by identity), or null

    boolean is(int k, byte[] b, int from, int to) {
      int start = k == 0 ? 0 : ends[k - 1];
      return k < count && Arrays.equals(names.bytes, start, ends[k], b, from, to);
    }

    boolean numericAt(int k) {
      return numericAt[k];
    }

    void keep(CanalRow row, List<byte[]> numeric) {
      names.reset();
      if (ends.length < row.count) {
        ends = new int[row.count];
        numericAt = new boolean[row.count];
      }
      for (int k = 0; k < row.count; k++) {
        int from = row.spans[4 * k];
        int to = row.spans[4 * k + 1];
        names.put(row.text.bytes, from, to);
        ends[k] = names.size;
        numericAt[k] = isNumeric(row.text.bytes, from, to, numeric);
      }
      count = row.count;
      this.numeric = numeric;
    }
  }
}
