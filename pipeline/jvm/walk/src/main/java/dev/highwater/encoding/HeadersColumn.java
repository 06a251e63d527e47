package dev.highwater.encoding;

import java.nio.charset.StandardCharsets;

/**
 * {@code headers_json_column_name} on a JSON route: the column's JSON object, in the change's
 * new version (a delete: its old one), becomes the record's headers, and the column leaves
 * both versions: what {@code encoders/headers.py} does before the Python loop writes the
 * envelope again. Each member is a header: a string as its UTF-8, any other value as its JSON
 * text, a null left out.
 *
 * <p>The loop writes that envelope anew from what it read, so the walk takes a change only when
 * its reader's envelope is already that writing ({@link Compact}) and the column holds an
 * object, a null or nothing: the envelope less the column's member is then the loop's bytes.
 * A column holding the object's JSON text, any other value (a bad record), or an envelope
 * not compact (a source's own spacing or escapes) is left to the Python loop.
 */
final class HeadersColumn implements Encoding {
  private static final long serialVersionUID = 1L;
  private static final byte[] AFTER = "after".getBytes(StandardCharsets.US_ASCII);
  private static final byte[] BEFORE = "before".getBytes(StandardCharsets.US_ASCII);

  private final Encoding reader;
  private final byte[] column;

  HeadersColumn(Encoding reader, String column) {
    this.reader = reader;
    this.column = column.getBytes(StandardCharsets.UTF_8);
  }

  @Override
  public boolean encode(byte[] key, byte[] value, Encoded out) {
    out.headers = null;
    out.rowHeaders.clear();
    if (!reader.encode(key, value, out)) {
      return false;
    }
    if (out.marker != null || out.ts == null) {
      return true; // a marker, or a binlog change whose END was not read yet: no record yet
    }
    if (out.rowKeys.isEmpty()) {
      byte[] envelope = split(out.value, out);
      out.value = envelope;
      return envelope != null;
    }
    for (int k = 0; k < out.rowValues.size(); k++) { // Canal-JSON: every row, or none
      byte[] envelope = split(out.rowValues.get(k), out);
      if (envelope == null) {
        return false;
      }
      out.rowValues.set(k, envelope);
      out.rowHeaders.add(out.headers);
    }
    out.headers = null;
    return true;
  }

  /** The envelope without the column, its headers in {@code out.headers}; null: not taken. */
  private byte[] split(byte[] envelope, Encoded out) {
    out.headers = null;
    if (envelope == null || Compact.value(envelope, 0, 0) != envelope.length) {
      return null;
    }
    int[] after = Json.member(envelope, 0, AFTER, 1);
    int[] before = Json.member(envelope, 0, BEFORE, 1);
    int[] newer = column(envelope, after); // the column's member in each version, or null
    int[] older = column(envelope, before);
    int[] found = after == null || envelope[after[0]] == 'n' ? older : newer;
    if (found != null && envelope[found[0]] != 'n') {
      if (envelope[found[0]] != '{') {
        return null; // its JSON text in a string, or no object at all: the Python loop's
      }
      out.headers = headers(envelope, found[0]);
    }
    return without(envelope, newer, older);
  }

  /** Where the column's value is in the version at {@code image} (an object), or null. */
  private int[] column(byte[] b, int[] image) {
    return object(b, image) ? Json.member(b, image[0], column, 2) : null;
  }

  private static boolean object(byte[] b, int[] value) {
    return value != null && b[value[0]] == '{';
  }

  /** The members of the compact object at {@code i} as headers (null members left out). */
  static Headers headers(byte[] b, int i) {
    Headers headers = new Headers();
    i++;
    while (b[i] == '"') {
      int nameEnd = Json.string(b, i, false);
      String name = new String(b, i + 1, nameEnd - i - 2, StandardCharsets.UTF_8);
      int start = nameEnd + 1;
      int end = Compact.value(b, start, 3);
      if (b[start] == '"') {
        headers.add(name, java.util.Arrays.copyOfRange(b, start + 1, end - 1));
      } else if (b[start] != 'n') {
        headers.add(name, java.util.Arrays.copyOfRange(b, start, end));
      }
      i = b[end] == ',' ? end + 1 : end;
    }
    return headers.names.isEmpty() ? null : headers;
  }

  /** {@code b} without the column's members whose values are at {@code newer} and {@code older}. */
  private byte[] without(byte[] b, int[] newer, int[] older) {
    if (newer == null && older == null) {
      return b;
    }
    Buffer o = new Buffer();
    int from = 0;
    for (int[] found : new int[][] {newer, older}) {
      if (found != null) {
        int[] cut = cut(b, found);
        o.put(b, from, cut[0]);
        from = cut[1];
      }
    }
    o.put(b, from, b.length);
    return o.copy(0);
  }

  /** The bytes the column's member (its value at {@code found}) and one comma beside it take. */
  private int[] cut(byte[] b, int[] found) {
    int name = found[0] - 1 - (column.length + 2); // compact: "name":value
    if (b[name - 1] == ',') {
      return new int[] {name - 1, found[1]};
    }
    return b[found[1]] == ',' ? new int[] {name, found[1] + 1} : new int[] {name, found[1]};
  }
}
