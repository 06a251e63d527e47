package dev.highwater.encoding;

import java.nio.charset.StandardCharsets;

/**
 * {@code key_column} on a JSON route: each change its reader wrote ({@link Verbatim}, {@link
 * Debezium}, {@link DebeziumAvro}, {@link Canal}: the JSON encoder's wrapped envelope) keyed by
 * the array of one column's value, from the change's new version or, a delete, its old one
 * ({@code before}, where the envelope carries it): the key the Python loop writes
 * ({@code encoders.base.key_column_value}).
 *
 * <p>It takes a change only when that key is sure to be the Python loop's bytes: the column
 * named once in the image, no member name escaped, and its value one a compact key holds as
 * it came ({@link Json#compactKey}: a string without escapes, an integer of at most 18
 * digits, true, false, null). Anything else, a missing column or a delete without its old
 * version included, is left to the Python loop, which writes it or names the bad record.
 */
final class KeyColumn implements Encoding {
  private static final long serialVersionUID = 1L;
  private static final byte[] AFTER = "after".getBytes(StandardCharsets.US_ASCII);
  private static final byte[] BEFORE = "before".getBytes(StandardCharsets.US_ASCII);

  private final Encoding reader;
  private final byte[] column;

  KeyColumn(Encoding reader, String column) {
    this.reader = reader;
    this.column = column.getBytes(StandardCharsets.UTF_8);
  }

  @Override
  public boolean encode(byte[] key, byte[] value, Encoded out) {
    if (!reader.encode(key, value, out)) {
      return false;
    }
    if (out.marker != null || out.ts == null) {
      return true; // a marker, or a binlog change whose END was not read yet: no record yet
    }
    if (out.rowKeys.isEmpty()) {
      out.key = keyOf(out.value);
      return out.key != null;
    }
    for (int k = 0; k < out.rowKeys.size(); k++) { // Canal-JSON: every row, or none
      byte[] keyed = keyOf(out.rowValues.get(k));
      if (keyed == null) {
        return false;
      }
      out.rowKeys.set(k, keyed);
    }
    return true;
  }

  /** The key of the change whose envelope is {@code envelope}; null: not taken. */
  byte[] keyOf(byte[] envelope) {
    if (envelope == null) {
      return null;
    }
    int[] image = Json.member(envelope, 0, AFTER, 1);
    if (image != null && envelope[image[0]] == 'n') { // null: a delete, keyed by its old version
      image = Json.member(envelope, 0, BEFORE, 1);
    }
    if (image == null || envelope[image[0]] != '{') {
      return null;
    }
    int[] found = Json.member(envelope, image[0], column, 2);
    if (found == null) {
      return null;
    }
    byte[] keyed = new byte[found[1] - found[0] + 2];
    keyed[0] = '[';
    System.arraycopy(envelope, found[0], keyed, 1, found[1] - found[0]);
    keyed[keyed.length - 1] = ']';
    return Json.compactKey(keyed) ? keyed : null;
  }
}
