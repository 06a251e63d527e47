package dev.highwater.encoding;

import java.util.Arrays;

/**
 * A row image of a Debezium event's Avro ({@link AvroImage}) written straight into the row
 * record of a route that writes Avro ({@link Avro}: {@code [null, row]}, every column {@code
 * [null, T]}), without the JSON text {@link AvroImage#read} writes and {@link Avro#encode}
 * reads again. It writes what that writes, byte for byte, and takes what that takes:
 *
 * <ul>
 *   <li>the common pairs of a source column's Avro and the output field's type directly: a
 *       string to a string (its UTF-8 checked as {@link AvroJson} checks it), an int or long
 *       to any number field, a double or float to a double or float (NaN and infinities not
 *       taken, as JSON has no such number), a boolean to a boolean, a decimal of at most 8 bytes
 *       whose double is its digits over a power of ten, both exact, to a double or float;
 *   <li>any other column through its JSON text ({@link AvroImage#cell}), read and written by
 *       the output field as {@link Avro} reads and writes it.
 * </ul>
 *
 * An image with a column the output's row record lacks has no plan ({@link #of}: null): a
 * schema change, which the route's reading through JSON leaves to the Python loop.
 */
final class AvroRow {
  private static final double[] POWERS = { // 10^0 to 10^22, each exact
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22
  };
  private static final long EXACT = 1L << 53; // a long's magnitude a double holds exactly

  private final AvroImage image;
  private final AvroField[] columns; // the output's row record
  private final int[] target; // per image column, its output column

  private AvroRow(AvroImage image, AvroField[] columns, int[] target) {
    this.image = image;
    this.columns = columns;
    this.target = target;
  }

  /** The plan of {@code image} into the row record of {@code columns}; null: a column it lacks. */
  static AvroRow of(AvroImage image, AvroField[] columns) {
    int[] target = new int[image.cells.length];
    for (int k = 0; k < target.length; k++) {
      byte[] name = image.cells[k].column.name;
      target[k] = -1;
      for (int c = 0; c < columns.length; c++) {
        if (Arrays.equals(columns[c].name, name)) {
          target[k] = c;
        }
      }
      if (target[k] < 0) {
        return null;
      }
    }
    return new AvroRow(image, columns, target);
  }

  /** Whether the image holds the row record's column {@code c} (else it writes it null). */
  boolean has(int c) {
    for (int t : target) {
      if (t == c) {
        return true;
      }
    }
    return false;
  }

  /** A task's buffers for writing rows. */
  static final class Scratch {
    final Encoding.Buffer cells = new Encoding.Buffer(); // the columns, in the image's order
    final Encoding.Buffer text = new Encoding.Buffer(); // a column's JSON text
    final Encoding.Buffer json = new Encoding.Buffer(); // AvroImage's, for a map
    int[] from = new int[0]; // per output column: its bytes in cells, or -1 (null)
    int[] to = new int[0];
  }

  /**
   * The image's datum at {@code b[at[0]]} as the output's {@code [null, row]} to {@code o}: null
   * as nothing at all (the caller writes it), a row as its branch and its columns in the
   * output's order (those the image lacks null). False: not taken.
   */
  boolean write(byte[] b, int[] at, Encoding.Buffer o, Scratch s, Encoding.Encoded out) {
    if (image.union) {
      long branch = AvroJson.varint(b, at);
      if (at[0] < 0 || branch < 0 || branch > 1) {
        return false;
      }
      if (branch == image.nullBranch) {
        return true;
      }
    }
    int n = columns.length;
    if (s.from.length < n) {
      s.from = new int[n];
      s.to = new int[n];
    }
    Arrays.fill(s.from, 0, n, -1);
    s.cells.reset();
    out.slots(1);
    for (int k = 0; k < target.length; k++) {
      int c = target[k];
      s.from[c] = s.cells.size;
      if (!cell(image.cells[k], columns[c], b, at, s, out)) {
        return false;
      }
      s.to[c] = s.cells.size;
    }
    o.put(2);
    for (int c = 0; c < n; c++) {
      if (s.from[c] < 0) {
        o.put(0); // a column the image lacks: null, as a member the row's JSON lacks
      } else {
        o.put(s.cells.bytes, s.from[c], s.to[c]);
      }
    }
    return true;
  }

  /** One column's datum, written to {@code s.cells} as field {@code f}. False: not taken. */
  private boolean cell(
      AvroImage.Cell cell, AvroField f, byte[] b, int[] at, Scratch s, Encoding.Encoded out) {
    int start = at[0];
    AvroJson.Node type = AvroImage.branch(cell, b, at);
    if (type == null) {
      return false;
    }
    Encoding.Buffer o = s.cells;
    if (type.type == AvroJson.Type.NULL) {
      o.put(0);
      return f.nullable; // as the field reads JSON null
    }
    int mark = o.size;
    if (!direct(cell, type.type, f.type)) {
      at[0] = start;
      return throughJson(cell, f, b, at, s, mark, out);
    }
    if (f.nullable) {
      o.put(2);
    }
    switch (type.type) {
      case STRING:
        {
          int length = at[0];
          if (!AvroJson.string(b, at, null)) { // checked as it is read to JSON
            return false;
          }
          int end = at[0];
          at[0] = length;
          o.varint(AvroJson.varint(b, at)); // as Avro writes it, whatever the source's varint
          o.put(b, at[0], end);
          at[0] = end;
          return true;
        }
      case BOOLEAN:
        if (at[0] >= b.length || (b[at[0]] & 0xfe) != 0) {
          return false;
        }
        o.put(b[at[0]++]);
        return true;
      case INT:
      case LONG:
        {
          long v = AvroJson.varint(b, at);
          if (at[0] < 0 || (type.type == AvroJson.Type.INT && v != (int) v)) {
            return false;
          }
          return integer(v, f.type, o);
        }
      case FLOAT:
      case DOUBLE:
        {
          int width = type.type == AvroJson.Type.FLOAT ? 4 : 8;
          if (at[0] + width > b.length) {
            return false;
          }
          long bits = 0;
          for (int k = width - 1; k >= 0; k--) {
            bits = (bits << 8) | (b[at[0] + k] & 0xff);
          }
          at[0] += width;
          double d = width == 4 ? Float.intBitsToFloat((int) bits) : Double.longBitsToDouble(bits);
          return !Double.isNaN(d) && !Double.isInfinite(d) && real(d, f.type, o);
        }
      default: // BYTES, FIXED: a decimal
        {
          int length =
              type.type == AvroJson.Type.FIXED ? type.size : (int) AvroJson.varint(b, at);
          long scale = cell.column.per;
          if (at[0] < 0
              || length <= 0
              || length > 16
              || at[0] + length > b.length
              || scale < 0
              || scale > Nearest.MAX_SCALE) {
            at[0] = start; // none, no bytes (not taken), more than two longs: through JSON
            return throughJson(cell, f, b, at, s, mark, out);
          }
          double d = nearest(b, at[0], length, (int) scale);
          at[0] += length;
          return real(d, f.type, o);
        }
    }
  }

  /**
   * The nearest double to a decimal of {@code length} bytes of two's complement at {@code
   * b[from]} and {@code scale}, as float(text) of its JSON text: one division of two exact
   * doubles where it can be, else in integers ({@link Nearest}).
   */
  private static double nearest(byte[] b, int from, int length, int scale) {
    if (length <= 8 && scale < POWERS.length) {
      long unscaled = b[from]; // sign-extended, as BigInteger's two's complement
      for (int k = 1; k < length; k++) {
        unscaled = (unscaled << 8) | (b[from + k] & 0xff);
      }
      if (unscaled >= -EXACT && unscaled <= EXACT) {
        return unscaled / POWERS[scale];
      }
    }
    return Nearest.of(b, from, length, scale);
  }

  /**
   * Whether a column of {@code cell}'s kind, of Avro {@code source} type, is written to a field
   * of {@code field} type directly (else through its JSON text).
   */
  private static boolean direct(AvroImage.Cell cell, AvroJson.Type source, int field) {
    boolean real = field == AvroField.DOUBLE || field == AvroField.FLOAT;
    switch (cell.column.kind) {
      case KEEP:
        if (cell.viaJson) {
          return false;
        }
        switch (source) {
          case STRING:
            return field == AvroField.STRING;
          case BOOLEAN:
            return field == AvroField.BOOLEAN;
          case INT:
          case LONG:
            return field != AvroField.STRING && field != AvroField.BOOLEAN;
          case FLOAT:
          case DOUBLE:
            return real;
          default:
            return false;
        }
      case DECIMAL:
        return real && (source == AvroJson.Type.BYTES || source == AvroJson.Type.FIXED);
      default:
        return false;
    }
  }

  /** An integer as a number field writes its JSON digits (a float: Python's float(int)). */
  private static boolean integer(long v, int field, Encoding.Buffer o) {
    switch (field) {
      case AvroField.INT:
        if (v != (int) v) {
          return false;
        }
        o.varint(v);
        return true;
      case AvroField.LONG:
        o.varint(v);
        return true;
      default:
        return real((double) v, field, o);
    }
  }

  /** A finite double as a double or float field writes its JSON text's number. */
  private static boolean real(double d, int field, Encoding.Buffer o) {
    if (field == AvroField.DOUBLE) {
      o.fixed(Double.doubleToRawLongBits(d), 8);
      return true;
    }
    float f = (float) d;
    o.fixed(Float.floatToRawIntBits(f), 4);
    return !Float.isInfinite(f); // too large for a float: packing it raises
  }

  /**
   * A column written from its JSON text, as {@link Avro} reads and writes it, to {@code
   * s.cells} from {@code size} on (what a direct writing began there undone). The text is
   * followed by a comma, as in the envelope, so the field's reading ends where the value does.
   */
  private boolean throughJson(
      AvroImage.Cell cell,
      AvroField f,
      byte[] b,
      int[] at,
      Scratch s,
      int size,
      Encoding.Encoded out) {
    s.cells.size = size;
    Encoding.Buffer text = s.text;
    text.reset();
    if (!AvroImage.cell(cell, image.depth, b, at, text, s.json)) {
      return false;
    }
    int end = text.size;
    text.put(',');
    if (f.read(text.bytes, 0, 0, out) != end) {
      return false;
    }
    f.write(s.cells, text.bytes, 0, out);
    return true;
  }
}
