package dev.highwater.encoding;

/**
 * A JSON value written again as the Python loop writes what it read (orjson's {@code loads},
 * then {@code dumps}): compact, strings escaped as orjson escapes them, numbers as they came
 * (the exact reader keeps every number's text). An object with a name twice (orjson keeps one
 * of them) is not taken; so is anything {@link Json} does not take.
 *
 * <p>Each method writes to {@code out} and answers with the index just past what it read, or
 * -1 (then {@code out} holds a part: the caller drops the record).
 */
final class Canonical {
  static final int MAX_DEPTH = 128; // within orjson's limits for reading and writing alike
  private static final byte[] HEX =
      "0123456789abcdef".getBytes(java.nio.charset.StandardCharsets.US_ASCII);

  /** The control characters orjson writes as a short escape ({@code \\n}), by code. */
  private static final byte[] SHORT = new byte[0x20];

  static {
    SHORT['\b'] = 'b';
    SHORT['\f'] = 'f';
    SHORT['\n'] = 'n';
    SHORT['\r'] = 'r';
    SHORT['\t'] = 't';
  }

  private Canonical() {}

  static int value(byte[] b, int i, Encoding.Buffer out, int depth) {
    if (i >= b.length) {
      return -1;
    }
    switch (b[i]) {
      case '{':
        return object(b, i, out, depth + 1);
      case '[':
        return array(b, i, out, depth + 1);
      case '"':
        return string(b, i, out);
      case 't':
        return copy(b, i, Json.literal(b, i, Json.TRUE), out);
      case 'f':
        return copy(b, i, Json.literal(b, i, Json.FALSE), out);
      case 'n':
        return copy(b, i, Json.literal(b, i, Json.NULL), out);
      default:
        return copy(b, i, Json.number(b, i), out);
    }
  }

  private static int copy(byte[] b, int from, int to, Encoding.Buffer out) {
    if (to >= 0) {
      out.put(b, from, to);
    }
    return to;
  }

  private static int object(byte[] b, int i, Encoding.Buffer out, int depth) {
    if (depth > MAX_DEPTH) {
      return -1;
    }
    out.put('{');
    i = Json.ws(b, i + 1);
    if (i < b.length && b[i] == '}') {
      out.put('}');
      return i + 1;
    }
    int[] names = new int[8]; // where each name was written: from, to
    int count = 0;
    while (i < b.length && b[i] == '"') {
      int from = out.size;
      i = string(b, i, out);
      if (i < 0 || Members.twice(out.bytes, names, count, from, out.size)) {
        return -1;
      }
      if (2 * count + 2 > names.length) {
        names = java.util.Arrays.copyOf(names, names.length * 2);
      }
      names[2 * count] = from;
      names[2 * count + 1] = out.size;
      count++;
      i = Json.ws(b, i);
      if (i >= b.length || b[i] != ':') {
        return -1;
      }
      out.put(':');
      i = value(b, Json.ws(b, i + 1), out, depth);
      if (i < 0) {
        return -1;
      }
      i = Json.ws(b, i);
      if (i < b.length && b[i] == '}') {
        out.put('}');
        return i + 1;
      }
      if (i >= b.length || b[i] != ',') {
        return -1;
      }
      out.put(',');
      i = Json.ws(b, i + 1);
    }
    return -1;
  }

  private static int array(byte[] b, int i, Encoding.Buffer out, int depth) {
    if (depth > MAX_DEPTH) {
      return -1;
    }
    out.put('[');
    i = Json.ws(b, i + 1);
    if (i < b.length && b[i] == ']') {
      out.put(']');
      return i + 1;
    }
    while (true) {
      i = value(b, i, out, depth);
      if (i < 0) {
        return -1;
      }
      i = Json.ws(b, i);
      if (i < b.length && b[i] == ']') {
        out.put(']');
        return i + 1;
      }
      if (i >= b.length || b[i] != ',') {
        return -1;
      }
      out.put(',');
      i = Json.ws(b, i + 1);
    }
  }

  /** A string: as it came when it has no escapes (most), else escaped again. */
  static int string(byte[] b, int i, Encoding.Buffer out) {
    int start = i++;
    while (i < b.length) {
      int c = b[i] & 0xff;
      if (Json.PLAIN[c]) {
        i++;
      } else if (c == '"') {
        out.put(b, start, i + 1);
        return i + 1;
      } else if (c == '\\') {
        return escaped(b, start, out, true);
      } else if (c < 0x80) {
        return -1; // a control character
      } else {
        i = Json.utf8(b, i, c);
        if (i < 0) {
          return -1;
        }
      }
    }
    return -1;
  }

  /**
   * The string at {@code start} (its opening quote) read: its text escaped again as orjson
   * escapes ({@code quoted}), or its raw UTF-8 (no quotes).
   */
  static int escaped(byte[] b, int start, Encoding.Buffer out, boolean quoted) {
    if (quoted) {
      out.put('"');
    }
    int i = start + 1;
    while (i < b.length) {
      int c = b[i] & 0xff;
      if (Json.PLAIN[c]) {
        int plain = Json.plain(b, i + 1, b.length); // a run of bytes as they are, copied at once
        out.put(b, i, plain);
        i = plain;
      } else if (c == '"') {
        if (quoted) {
          out.put('"');
        }
        return i + 1;
      } else if (c == '\\') {
        if (i + 1 >= b.length) {
          return -1;
        }
        int code = unescape(b, i + 1);
        if (code < 0) {
          return -1;
        }
        i += b[i + 1] == 'u' ? 6 : 2;
        if (quoted) {
          character(code, out);
        } else {
          utf8(code, out);
        }
      } else if (c < 0x80) {
        return -1;
      } else {
        int end = Json.utf8(b, i, c);
        if (end < 0) {
          return -1;
        }
        out.put(b, i, end);
        i = end;
      }
    }
    return -1;
  }

  /**
   * The character an escape at {@code i} (past the backslash) stands for; -1 for none, and for
   * surrogates, paired or not (a lone one is a bad record: the Python loop says so).
   */
  static int unescape(byte[] b, int i) {
    switch (b[i]) {
      case '"':
      case '\\':
      case '/':
        return b[i];
      case 'b':
        return '\b';
      case 'f':
        return '\f';
      case 'n':
        return '\n';
      case 'r':
        return '\r';
      case 't':
        return '\t';
      case 'u':
        if (i + 4 >= b.length) {
          return -1;
        }
        int code = 0;
        for (int k = 1; k <= 4; k++) {
          int d = Character.digit(b[i + k], 16);
          if (d < 0) {
            return -1;
          }
          code = code * 16 + d;
        }
        // Surrogates, paired or not, go to the Python loop (a lone one is a bad record).
        return code >= 0xd800 && code <= 0xdfff ? -1 : code;
      default:
        return -1;
    }
  }

  /** One character as orjson writes it in a string. */
  static void character(int code, Encoding.Buffer out) {
    if (code == '"' || code == '\\') {
      out.put('\\');
      out.put(code);
    } else if (code >= 0x20) {
      utf8(code, out);
    } else if (SHORT[code] != 0) {
      out.put('\\');
      out.put(SHORT[code]);
    } else {
      out.put('\\');
      out.put('u');
      out.put('0');
      out.put('0');
      out.put(HEX[code >> 4]);
      out.put(HEX[code & 0xf]);
    }
  }

  private static void utf8(int code, Encoding.Buffer out) {
    if (code < 0x80) {
      out.put(code);
    } else if (code < 0x800) {
      out.put(0xc0 | code >> 6);
      out.put(0x80 | code & 0x3f);
    } else {
      out.put(0xe0 | code >> 12);
      out.put(0x80 | code >> 6 & 0x3f);
      out.put(0x80 | code & 0x3f);
    }
  }
}
