package dev.highwater.encoding;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.math.BigDecimal;
import java.math.MathContext;
import java.math.RoundingMode;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.HashMap;
import java.util.Map;

/**
 * Avro's binary encoding read by its writer schema and written as JSON, as
 * pipeline/core/sources/wire.py reads it ({@code fastavro} without logical types, then {@code
 * _json_like}): records as objects of their fields in order, unions as their branch, bytes and
 * fixed as base64 text (as Kafka Connect's {@code JsonConverter} writes them), enums as their
 * symbol, floats and doubles as orjson writes the Python float ({@link #number}). What it does
 * not read exactly so (a NaN, text that is not UTF-8, bytes left over, nesting deeper than
 * {@link #MAX_DEPTH}) is not taken: -1.
 */
final class AvroJson {
  static final int MAX_DEPTH = 64;
  private static final ObjectMapper JSON = new ObjectMapper();

  enum Type {
    NULL,
    BOOLEAN,
    INT,
    LONG,
    FLOAT,
    DOUBLE,
    BYTES,
    STRING,
    RECORD,
    ENUM,
    ARRAY,
    MAP,
    UNION,
    FIXED
  }

  /** A schema's node: its type, and what that type needs to be read. */
  static final class Node {
    final Type type;
    byte[][] names; // RECORD: each field's name, quoted; ENUM: each symbol, quoted
    Node[] children; // RECORD: the fields' types; ARRAY, MAP: one; UNION: the branches
    int size; // FIXED

    Node(Type type) {
      this.type = type;
    }
  }

  private AvroJson() {}

  /** The reading of a writer schema (Avro's JSON form); IllegalArgumentException if not one. */
  static Node parse(JsonNode schema) {
    return parse(schema, null, new HashMap<>());
  }

  private static Node parse(JsonNode s, String namespace, Map<String, Node> named) {
    if (s.isTextual()) {
      String name = s.textValue();
      Node primitive = primitive(name);
      if (primitive != null) {
        return primitive;
      }
      Node found = named.get(name.contains(".") || namespace == null ? name : namespace + "." + name);
      found = found == null ? named.get(name) : found;
      if (found == null) {
        throw new IllegalArgumentException("unknown type " + name);
      }
      return found;
    }
    if (s.isArray()) {
      Node union = new Node(Type.UNION);
      union.children = new Node[s.size()];
      for (int k = 0; k < s.size(); k++) {
        union.children[k] = parse(s.get(k), namespace, named);
      }
      return union;
    }
    if (s.path("type").isContainerNode()) { // {"type": <a schema>}: that schema
      return parse(s.get("type"), namespace, named);
    }
    String type = s.path("type").asText("");
    switch (type) {
      case "record":
      case "error":
        {
          Node record = new Node(Type.RECORD);
          String space = name(s, namespace, record, named);
          JsonNode fields = s.path("fields");
          record.names = new byte[fields.size()][];
          record.children = new Node[fields.size()];
          for (int k = 0; k < fields.size(); k++) {
            record.names[k] = quoted(fields.get(k).path("name").asText());
            record.children[k] = parse(fields.get(k).path("type"), space, named);
          }
          return record;
        }
      case "enum":
        {
          Node e = new Node(Type.ENUM);
          name(s, namespace, e, named);
          JsonNode symbols = s.path("symbols");
          e.names = new byte[symbols.size()][];
          for (int k = 0; k < symbols.size(); k++) {
            e.names[k] = quoted(symbols.get(k).asText());
          }
          return e;
        }
      case "fixed":
        {
          Node f = new Node(Type.FIXED);
          name(s, namespace, f, named);
          f.size = s.path("size").asInt(-1);
          if (f.size < 0) {
            throw new IllegalArgumentException("a fixed without its size");
          }
          return f;
        }
      case "array":
        {
          Node a = new Node(Type.ARRAY);
          a.children = new Node[] {parse(s.path("items"), namespace, named)};
          return a;
        }
      case "map":
        {
          Node m = new Node(Type.MAP);
          m.children = new Node[] {parse(s.path("values"), namespace, named)};
          return m;
        }
      default:
        Node primitive = primitive(type);
        if (primitive == null) {
          throw new IllegalArgumentException("not an Avro schema: " + s);
        }
        return primitive; // {"type": "long", "logicalType": …}: read as it is stored
    }
  }

  /** Registers a named type under its name and full name; the namespace its fields take. */
  private static String name(JsonNode s, String namespace, Node node, Map<String, Node> named) {
    String name = s.path("name").asText();
    String space = name.contains(".") ? name.substring(0, name.lastIndexOf('.')) : null;
    if (space == null) {
      space = s.hasNonNull("namespace") ? s.get("namespace").asText() : namespace;
    }
    named.put(name, node);
    if (space != null && !space.isEmpty() && !name.contains(".")) {
      named.put(space + "." + name, node);
    }
    return space;
  }

  private static Node primitive(String name) {
    switch (name) {
      case "null":
        return new Node(Type.NULL);
      case "boolean":
        return new Node(Type.BOOLEAN);
      case "int":
        return new Node(Type.INT);
      case "long":
        return new Node(Type.LONG);
      case "float":
        return new Node(Type.FLOAT);
      case "double":
        return new Node(Type.DOUBLE);
      case "bytes":
        return new Node(Type.BYTES);
      case "string":
        return new Node(Type.STRING);
      default:
        return null;
    }
  }

  private static byte[] quoted(String text) {
    try {
      return JSON.writeValueAsBytes(text);
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }

  /** Reads the datum of {@code n} at {@code b[at[0]]}, written to {@code out}; false: not taken. */
  static boolean read(Node n, byte[] b, int[] at, Encoding.Buffer out, int depth) {
    if (depth > MAX_DEPTH) {
      return false;
    }
    switch (n.type) {
      case NULL:
        out.put(Json.NULL, 0, Json.NULL.length);
        return true;
      case BOOLEAN:
        return bool(b, at, out);
      case INT:
      case LONG:
        return integer(b, at, n.type == Type.INT, out);
      case FLOAT:
      case DOUBLE:
        {
          int width = n.type == Type.FLOAT ? 4 : 8;
          if (at[0] + width > b.length) {
            return false;
          }
          long bits = littleEndian(b, at[0], width);
          at[0] += width;
          double d = width == 4 ? Float.intBitsToFloat((int) bits) : Double.longBitsToDouble(bits);
          String text = number(d);
          if (text == null) {
            return false;
          }
          ascii(text, out);
          return true;
        }
      case BYTES:
      case FIXED:
        {
          int length = n.type == Type.FIXED ? n.size : length(b, at);
          if (length < 0 || at[0] + length > b.length) {
            return false;
          }
          out.put('"');
          byte[] text = Base64.getEncoder().encode(java.util.Arrays.copyOfRange(b, at[0], at[0] + length));
          out.put(text, 0, text.length);
          out.put('"');
          at[0] += length;
          return true;
        }
      case STRING:
        return string(b, at, out);
      case ENUM:
        {
          long symbol = varint(b, at);
          if (at[0] < 0 || symbol < 0 || symbol >= n.names.length) {
            return false;
          }
          byte[] name = n.names[(int) symbol];
          out.put(name, 0, name.length);
          return true;
        }
      case UNION:
        {
          long branch = varint(b, at);
          if (at[0] < 0 || branch < 0 || branch >= n.children.length) {
            return false;
          }
          return read(n.children[(int) branch], b, at, out, depth + 1);
        }
      case RECORD:
        out.put('{');
        for (int k = 0; k < n.children.length; k++) {
          if (k > 0) {
            out.put(',');
          }
          out.put(n.names[k], 0, n.names[k].length);
          out.put(':');
          if (!read(n.children[k], b, at, out, depth + 1)) {
            return false;
          }
        }
        out.put('}');
        return true;
      default: // ARRAY, MAP: blocks of items, a count of 0 last
        return blocks(n, b, at, out, depth);
    }
  }

  /** A boolean's datum at {@code b[at[0]]} as {@code true} or {@code false}. */
  static boolean bool(byte[] b, int[] at, Encoding.Buffer out) {
    if (at[0] >= b.length || (b[at[0]] & 0xfe) != 0) {
      return false;
    }
    byte[] word = b[at[0]++] == 1 ? Json.TRUE : Json.FALSE;
    out.put(word, 0, word.length);
    return true;
  }

  /** A long's datum (an int's: within its range) at {@code b[at[0]]} as its digits. */
  static boolean integer(byte[] b, int[] at, boolean isInt, Encoding.Buffer out) {
    long v = varint(b, at);
    if (at[0] < 0 || (isInt && v != (int) v)) {
      return false;
    }
    digits(v, out);
    return true;
  }

  /**
   * Reads past the datum of {@code n} at {@code b[at[0]]}, writing nothing: false where {@link
   * #read} would not take it (so a datum read past is taken exactly when it would be read).
   */
  static boolean skip(Node n, byte[] b, int[] at, int depth) {
    if (depth > MAX_DEPTH) {
      return false;
    }
    switch (n.type) {
      case NULL:
        return true;
      case BOOLEAN:
        return at[0] < b.length && (b[at[0]++] & 0xfe) == 0;
      case INT:
      case LONG:
        {
          long v = varint(b, at);
          return at[0] >= 0 && (n.type == Type.LONG || v == (int) v);
        }
      case FLOAT:
        if (at[0] + 4 > b.length) {
          return false;
        }
        at[0] += 4;
        return Float.isFinite(Float.intBitsToFloat((int) littleEndian(b, at[0] - 4, 4)));
      case DOUBLE:
        if (at[0] + 8 > b.length) {
          return false;
        }
        at[0] += 8;
        return Double.isFinite(Double.longBitsToDouble(littleEndian(b, at[0] - 8, 8)));
      case BYTES:
      case FIXED:
        {
          int length = n.type == Type.FIXED ? n.size : length(b, at);
          if (length < 0 || at[0] + length > b.length) {
            return false;
          }
          at[0] += length;
          return true;
        }
      case STRING:
        return string(b, at, null);
      case ENUM:
        {
          long symbol = varint(b, at);
          return at[0] >= 0 && symbol >= 0 && symbol < n.names.length;
        }
      case UNION:
        {
          long branch = varint(b, at);
          return at[0] >= 0 && branch >= 0 && branch < n.children.length
              && skip(n.children[(int) branch], b, at, depth + 1);
        }
      case RECORD:
        for (Node field : n.children) {
          if (!skip(field, b, at, depth + 1)) {
            return false;
          }
        }
        return true;
      default: // ARRAY, MAP
        while (true) {
          long count = varint(b, at);
          if (at[0] < 0) {
            return false;
          }
          if (count == 0) {
            return true;
          }
          if (count < 0) {
            count = -count;
            varint(b, at);
            if (at[0] < 0) {
              return false;
            }
          }
          for (long k = 0; k < count; k++) {
            if ((n.type == Type.MAP && !string(b, at, null))
                || !skip(n.children[0], b, at, depth + 1)) {
              return false;
            }
          }
        }
    }
  }

  /** A float's or double's bits: {@code width} bytes at {@code from}, little-endian. */
  private static long littleEndian(byte[] b, int from, int width) {
    long bits = 0;
    for (int k = width - 1; k >= 0; k--) {
      bits = (bits << 8) | (b[from + k] & 0xff);
    }
    return bits;
  }

  private static boolean blocks(Node n, byte[] b, int[] at, Encoding.Buffer out, int depth) {
    boolean map = n.type == Type.MAP;
    out.put(map ? '{' : '[');
    boolean first = true;
    while (true) {
      long count = varint(b, at);
      if (at[0] < 0) {
        return false;
      }
      if (count == 0) {
        out.put(map ? '}' : ']');
        return true;
      }
      if (count < 0) { // followed by the block's size in bytes
        count = -count;
        varint(b, at);
        if (at[0] < 0) {
          return false;
        }
      }
      for (long k = 0; k < count; k++) {
        if (!first) {
          out.put(',');
        }
        first = false;
        if (map) {
          if (!string(b, at, out)) {
            return false;
          }
          out.put(':');
        }
        if (!read(n.children[0], b, at, out, depth + 1)) {
          return false;
        }
      }
    }
  }

  /**
   * A string's UTF-8 as a JSON string (quotes, backslashes and control characters escaped);
   * {@code out} null: only checked.
   */
  static boolean string(byte[] b, int[] at, Encoding.Buffer out) {
    int length = length(b, at);
    if (length < 0 || at[0] + length > b.length) {
      return false;
    }
    int end = at[0] + length;
    if (out == null) {
      for (int i = Json.ascii(b, at[0], end); i < end; i = Json.ascii(b, i, end)) {
        i = Json.utf8(b, i, b[i] & 0xff);
        if (i < 0 || i > end) {
          return false;
        }
      }
      at[0] = end;
      return true;
    }
    out.put('"');
    int i = at[0];
    while (i < end) {
      int c = b[i] & 0xff;
      if (c == '"' || c == '\\' || c < 0x20) {
        Canonical.character(c, out); // escaped as orjson escapes it
        i++;
      } else if (c < 0x80) {
        int plain = Json.plain(b, i + 1, end); // a run of bytes as they are, copied at once
        out.put(b, i, plain);
        i = plain;
      } else {
        int next = Json.utf8(b, i, c);
        if (next < 0 || next > end) {
          return false;
        }
        out.put(b, i, next);
        i = next;
      }
    }
    out.put('"');
    at[0] = end;
    return true;
  }

  private static int length(byte[] b, int[] at) {
    long length = varint(b, at);
    return at[0] < 0 || length < 0 || length > Integer.MAX_VALUE ? -1 : (int) length;
  }

  /** A zig-zag varint at {@code b[at[0]]}; {@code at[0]} past it, or -1 if it runs out. */
  static long varint(byte[] b, int[] at) {
    int first = at[0];
    if (first < b.length && b[first] >= 0) { // one byte: a length, a branch, a small number
      at[0] = first + 1;
      return (b[first] >>> 1) ^ -(b[first] & 1);
    }
    long n = 0;
    int shift = 0;
    int i = at[0];
    while (true) {
      if (i >= b.length || shift > 63) {
        at[0] = -1;
        return 0;
      }
      int c = b[i++];
      n |= (long) (c & 0x7f) << shift;
      if ((c & 0x80) == 0) {
        break;
      }
      shift += 7;
    }
    at[0] = i;
    return (n >>> 1) ^ -(n & 1);
  }

  /** A long's decimal digits (Long.toString's, without the String). */
  private static void digits(long v, Encoding.Buffer out) {
    if (v == Long.MIN_VALUE) {
      ascii(Long.toString(v), out);
      return;
    }
    if (v < 0) {
      out.put('-');
      v = -v;
    }
    Digits.put(out, v);
  }

  private static void ascii(String text, Encoding.Buffer out) {
    out.room(text.length());
    for (int k = 0; k < text.length(); k++) {
      out.bytes[out.size++] = (byte) text.charAt(k);
    }
  }

  /**
   * A double as orjson writes the Python float: the shortest digits that read back to it
   * (the closest such), in plain notation for exponents from -5 to 15 ({@code 0.00001}, {@code
   * 1000000000000000.0}), else as {@code 1.5e+16}, {@code 1e-6}; null for NaN and infinities
   * (not taken).
   */
  static String number(double d) {
    if (Double.isNaN(d) || Double.isInfinite(d)) {
      return null;
    }
    String sign = (Double.doubleToRawLongBits(d) < 0) ? "-" : "";
    if (d == 0) {
      return sign + "0.0";
    }
    BigDecimal exact = new BigDecimal(Math.abs(d));
    BigDecimal shortest = exact;
    for (int p = 1; p <= 17; p++) {
      BigDecimal rounded = exact.round(new MathContext(p, RoundingMode.HALF_EVEN));
      if (rounded.doubleValue() == Math.abs(d)) {
        shortest = rounded;
        break;
      }
    }
    String digits = shortest.unscaledValue().toString();
    int trailing = digits.length();
    while (trailing > 1 && digits.charAt(trailing - 1) == '0') {
      trailing--;
    }
    int exponent = digits.length() - 1 - shortest.scale(); // of the first digit
    digits = digits.substring(0, trailing);
    StringBuilder text = new StringBuilder(sign);
    if (exponent >= -5 && exponent < 16) {
      if (exponent < 0) {
        text.append("0.").append("0".repeat(-exponent - 1)).append(digits);
      } else if (digits.length() <= exponent + 1) {
        text.append(digits).append("0".repeat(exponent + 1 - digits.length())).append(".0");
      } else {
        text.append(digits, 0, exponent + 1).append('.').append(digits, exponent + 1, digits.length());
      }
    } else {
      text.append(digits.charAt(0));
      if (digits.length() > 1) {
        text.append('.').append(digits, 1, digits.length());
      }
      text.append('e').append(exponent > 0 ? "+" : "-").append(Math.abs(exponent));
    }
    return text.toString();
  }
}
