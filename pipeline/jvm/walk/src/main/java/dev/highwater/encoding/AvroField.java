package dev.highwater.encoding;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;

/**
 * A field of the records {@link Avro} writes: its name, its type (string, long, int, double,
 * float, boolean), whether it is [null, T]; its JSON value read into a slot ({@link #read})
 * and written from there ({@link #write}) as the compiled writer (encoders/avro_writer.py)
 * writes the Python value of that JSON text: an integral number is an int (into a double or
 * float: the nearest one, as Python's float(int)), any other a float (the nearest double:
 * Python's float(text)), strings unescaped to UTF-8. What it is not sure of is not read (-1):
 * a value of another type, an integer beyond its type's range, a number that overflows its
 * type as Python's conversions raise (an infinite fraction or exponent is written as
 * infinite), an escaped surrogate.
 */
final class AvroField implements Serializable {
  private static final long serialVersionUID = 1L;

  static final int STRING = 0;
  static final int LONG = 1;
  static final int INT = 2;
  static final int DOUBLE = 3;
  static final int FLOAT = 4;
  static final int BOOLEAN = 5;
  private static final String[] TYPES = {"string", "long", "int", "double", "float", "boolean"};

  private static final int NULL = -1; // a slot's start when its value is JSON null
  private static final byte[] NULL_TEXT = ascii("null");
  private static final byte[] TRUE_TEXT = ascii("true");
  private static final byte[] FALSE_TEXT = ascii("false");
  private static final double[] POWERS = { // 10^0 to 10^15, each exact
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15
  };

  final byte[] name;
  final int type;
  final boolean nullable;

  /** The field a plan's spec describes: {@code [name, type, nullable]}. */
  AvroField(JsonNode spec) {
    name = spec.get(0).asText().getBytes(StandardCharsets.UTF_8);
    type = java.util.Arrays.asList(TYPES).indexOf(spec.get(1).asText());
    nullable = spec.get(2).asBoolean();
    if (type < 0) {
      throw new IllegalArgumentException("not a walkable Avro type: " + spec);
    }
  }

  /** Its JSON value at {@code v} into {@code slot}, read as its type. The index past it, or -1. */
  int read(byte[] b, int v, int slot, Encoding.Encoded out) {
    if (v >= b.length) {
      return -1;
    }
    if (b[v] == 'n') {
      out.from[slot] = NULL;
      return nullable ? Json.literal(b, v, NULL_TEXT) : -1;
    }
    out.from[slot] = v;
    switch (type) {
      case STRING:
        int end = b[v] == '"' ? Json.string(b, v, true) : -1;
        out.to[slot] = end;
        return end;
      case BOOLEAN:
        out.bits[slot] = b[v] == 't' ? 1 : 0;
        return Json.literal(b, v, b[v] == 't' ? TRUE_TEXT : FALSE_TEXT);
      default:
        return number(b, v, type, slot, out);
    }
  }

  private static int number(byte[] b, int v, int type, int slot, Encoding.Encoded out) {
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

  /**
   * Python's float(text): the double nearest the number. A fraction of at most 15 digits and
   * no exponent is its digits over a power of ten, both exact doubles, so the one division
   * rounds to the nearest (Clinger's fast path); any other is Java's parsing, also the nearest.
   */
  private static double parse(byte[] b, int from, int to) {
    int k = b[from] == '-' ? from + 1 : from;
    if (to - k <= 16) { // at most 15 digits and the point
      long digits = 0;
      int scale = -1; // digits after the point; -1: none met yet
      for (; k < to; k++) {
        int c = b[k];
        if (c == '.') {
          scale = 0;
        } else if (c >= '0' && c <= '9') {
          digits = digits * 10 + (c - '0');
          scale += scale < 0 ? 0 : 1;
        } else {
          break; // an exponent
        }
      }
      if (k == to && scale >= 0) {
        double d = digits / POWERS[scale];
        return b[from] == '-' ? -d : d;
      }
    }
    return Double.parseDouble(new String(b, from, to - from, StandardCharsets.US_ASCII));
  }

  /** The value read into {@code slot} (from {@code b}), written as Avro writes this field. */
  void write(Encoding.Buffer buf, byte[] b, int slot, Encoding.Encoded out) {
    int from = out.from[slot];
    if (from < 0) {
      buf.put(0); // null (a non-nullable field never reads one)
      return;
    }
    if (nullable) {
      buf.put(2);
    }
    switch (type) {
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

  /**
   * The end of this field's datum at {@code i} as a row record holds it, {@code [null, T]} (the
   * branch's byte first), written by this walk: its bytes are known good.
   */
  int skip(byte[] b, int i) {
    if (b[i++] == 0) {
      return i; // null
    }
    switch (type) {
      case STRING:
        long length = 0;
        for (int shift = 0; ; shift += 7) {
          byte next = b[i++];
          length |= (long) (next & 0x7f) << shift;
          if (next >= 0) {
            break;
          }
        }
        return i + (int) (length >>> 1); // zig-zag: a length is never negative
      case DOUBLE:
        return i + 8;
      case FLOAT:
        return i + 4;
      case BOOLEAN:
        return i + 1;
      default: // LONG, INT: a varint
        while (b[i] < 0) {
          i++;
        }
        return i + 1;
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

  private static byte[] ascii(String text) {
    return text.getBytes(StandardCharsets.US_ASCII);
  }
}
