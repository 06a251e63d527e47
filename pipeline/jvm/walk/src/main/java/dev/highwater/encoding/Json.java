package dev.highwater.encoding;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;

/**
 * Strict JSON reading over bytes, for the walk's fast path: no objects are built.
 *
 * <p>Every method answers with the index just past what it read, or -1 when the text is not
 * what the fast path takes. -1 never means "bad record": the record then goes to the Python
 * loop, which decides. So what is accepted here must be a subset of what the Python loop
 * accepts and reads the same way: RFC 8259 JSON, UTF-8 checked, nesting to {@link #MAX_DEPTH},
 * numbers of at most {@link #MAX_NUMBER} characters, no escaped surrogates.
 */
public final class Json {
  static final int MAX_DEPTH = 256;
  static final int MAX_NUMBER = 64;

  /** The bytes a string may hold as they are: printable ASCII but the quote and backslash. */
  static final boolean[] PLAIN = new boolean[256];

  // a string's bytes read eight at a time, as a little-endian long
  private static final VarHandle WORDS =
      MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);
  private static final long ONES = 0x0101010101010101L;
  private static final long HIGHS = 0x8080808080808080L;

  static {
    for (int c = 0x20; c < 0x80; c++) {
      PLAIN[c] = c != '"' && c != '\\';
    }
  }

  private Json() {}

  /** The first index from {@code i} (below {@code end}) of a byte that is not {@link #PLAIN}. */
  static int plain(byte[] b, int i, int end) {
    for (; i + 8 <= end; i += 8) { // eight bytes at once: the first not plain is the lowest flag
      long w = word(b, i);
      long flags = special(w) | (w & HIGHS);
      if (flags != 0) {
        return i + (Long.numberOfTrailingZeros(flags) >>> 3);
      }
    }
    while (i < end && PLAIN[b[i] & 0xff]) {
      i++;
    }
    return i;
  }

  /** Whether any of {@code b[from, to)} is written escaped: a quote, backslash or control. */
  static boolean escaped(byte[] b, int from, int to) {
    int i = from;
    while (i + 8 <= to && special(word(b, i)) == 0) {
      i += 8;
    }
    for (; i < to; i++) {
      int c = b[i] & 0xff;
      if (c == '"' || c == '\\' || c < 0x20) {
        return true;
      }
    }
    return false;
  }

  /** The first index from {@code i} (below {@code end}) of a byte that is not ASCII. */
  static int ascii(byte[] b, int i, int end) {
    for (; i + 8 <= end; i += 8) {
      long flags = word(b, i) & HIGHS;
      if (flags != 0) {
        return i + (Long.numberOfTrailingZeros(flags) >>> 3);
      }
    }
    while (i < end && b[i] >= 0) {
      i++;
    }
    return i;
  }

  private static long word(byte[] b, int i) {
    return (long) WORDS.get(b, i);
  }

  /**
   * Non-zero where one of a word's eight bytes (little-endian) is a quote, a backslash or below
   * 0x20; bytes from 0x80 on are not flagged. A borrow may flag a byte above one that is flagged
   * rightly, never below: the lowest flag is the first such byte.
   */
  private static long special(long w) {
    long quote = w ^ (ONES * '"');
    long slash = w ^ (ONES * '\\');
    return (((quote - ONES) & ~quote) | ((slash - ONES) & ~slash) | ((w - ONES * 0x20) & ~w))
        & HIGHS;
  }

  /** As {@link #ws(byte[], int)}, in {@code b[i, end)}: the first index not white space. */
  static int ws(byte[] b, int i, int end) {
    while (i < end) {
      byte c = b[i];
      if (c != ' ' && c != '\n' && c != '\r' && c != '\t') {
        break;
      }
      i++;
    }
    return i;
  }

  public static int ws(byte[] b, int i) {
    return ws(b, i, b.length);
  }

  /** Any JSON value starting at {@code i}. */
  static int value(byte[] b, int i, int depth) {
    if (i >= b.length) {
      return -1;
    }
    switch (b[i]) {
      case '{':
        return object(b, i, depth + 1);
      case '[':
        return array(b, i, depth + 1);
      case '"':
        return string(b, i, true);
      case 't':
        return literal(b, i, TRUE);
      case 'f':
        return literal(b, i, FALSE);
      case 'n':
        return literal(b, i, NULL);
      default:
        return number(b, i);
    }
  }

  static int object(byte[] b, int i, int depth) {
    if (depth > MAX_DEPTH) {
      return -1;
    }
    i = ws(b, i + 1);
    if (i < b.length && b[i] == '}') {
      return i + 1;
    }
    while (i < b.length && b[i] == '"') {
      i = string(b, i, true);
      if (i < 0) {
        return -1;
      }
      i = ws(b, i);
      if (i >= b.length || b[i] != ':') {
        return -1;
      }
      i = value(b, ws(b, i + 1), depth);
      if (i < 0) {
        return -1;
      }
      i = ws(b, i);
      if (i < b.length && b[i] == '}') {
        return i + 1;
      }
      if (i >= b.length || b[i] != ',') {
        return -1;
      }
      i = ws(b, i + 1);
    }
    return -1;
  }

  static int array(byte[] b, int i, int depth) {
    if (depth > MAX_DEPTH) {
      return -1;
    }
    i = ws(b, i + 1);
    if (i < b.length && b[i] == ']') {
      return i + 1;
    }
    while (true) {
      i = value(b, i, depth);
      if (i < 0) {
        return -1;
      }
      i = ws(b, i);
      if (i < b.length && b[i] == ']') {
        return i + 1;
      }
      if (i >= b.length || b[i] != ',') {
        return -1;
      }
      i = ws(b, i + 1);
    }
  }

  /**
   * A string at {@code i} (its opening quote). {@code escapes}: whether backslash escapes are
   * taken (a key's strings are taken only when the output writes them the same way: none).
   */
  public static int string(byte[] b, int i, boolean escapes) {
    i++;
    while (i < b.length) {
      int c = b[i] & 0xff;
      if (PLAIN[c]) { // most bytes of most strings: one look-up each
        i++;
        continue;
      }
      if (c == '"') {
        return i + 1;
      }
      if (c == '\\') {
        if (!escapes || i + 1 >= b.length) {
          return -1;
        }
        i = escape(b, i + 1);
        if (i < 0) {
          return -1;
        }
      } else if (c < 0x80) {
        return -1; // a control character
      } else {
        i = utf8(b, i, c);
        if (i < 0) {
          return -1;
        }
      }
    }
    return -1;
  }

  /** An escape at {@code i} (past the backslash), as {@link Canonical#unescape} reads it. */
  private static int escape(byte[] b, int i) {
    return Canonical.unescape(b, i) < 0 ? -1 : i + (b[i] == 'u' ? 5 : 1);
  }

  /** One multi-byte UTF-8 sequence led by {@code c} at {@code i} (RFC 3629, Table 3-7). */
  static int utf8(byte[] b, int i, int c) {
    int more;
    int low = 0x80;
    int high = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) {
      more = 1;
    } else if (c >= 0xe0 && c <= 0xef) {
      more = 2;
      if (c == 0xe0) {
        low = 0xa0;
      } else if (c == 0xed) {
        high = 0x9f;
      }
    } else if (c >= 0xf0 && c <= 0xf4) {
      more = 3;
      if (c == 0xf0) {
        low = 0x90;
      } else if (c == 0xf4) {
        high = 0x8f;
      }
    } else {
      return -1;
    }
    if (i + more >= b.length) {
      return -1;
    }
    int second = b[i + 1] & 0xff;
    if (second < low || second > high) {
      return -1;
    }
    for (int k = 2; k <= more; k++) {
      int next = b[i + k] & 0xff;
      if (next < 0x80 || next > 0xbf) {
        return -1;
      }
    }
    return i + 1 + more;
  }

  static int number(byte[] b, int i) {
    int start = i;
    if (i < b.length && b[i] == '-') {
      i++;
    }
    if (i >= b.length) {
      return -1;
    }
    if (b[i] == '0') {
      i++;
    } else if (b[i] >= '1' && b[i] <= '9') {
      i = digits(b, i);
    } else {
      return -1;
    }
    if (i < b.length && b[i] == '.') {
      int end = digits(b, i + 1);
      if (end == i + 1) {
        return -1;
      }
      i = end;
    }
    if (i < b.length && (b[i] == 'e' || b[i] == 'E')) {
      i++;
      if (i < b.length && (b[i] == '+' || b[i] == '-')) {
        i++;
      }
      int end = digits(b, i);
      if (end == i) {
        return -1;
      }
      i = end;
    }
    return i - start > MAX_NUMBER ? -1 : i;
  }

  static int digits(byte[] b, int i) {
    while (i < b.length && b[i] >= '0' && b[i] <= '9') {
      i++;
    }
    return i;
  }

  static final byte[] TRUE = "true".getBytes(StandardCharsets.US_ASCII);
  static final byte[] FALSE = "false".getBytes(StandardCharsets.US_ASCII);
  static final byte[] NULL = "null".getBytes(StandardCharsets.US_ASCII);

  static int literal(byte[] b, int i, byte[] word) {
    if (i + word.length > b.length) {
      return -1;
    }
    for (int k = 0; k < word.length; k++) {
      if (b[i + k] != word[k]) {
        return -1;
      }
    }
    return i + word.length;
  }

  /**
   * Whether a key is a JSON array exactly as the changefeed writes keys (compact, as orjson
   * prints what it read): strings without escapes, integers of at most 18 digits (not -0),
   * true, false, null. Such a key is written out as it came.
   */
  static boolean compactKey(byte[] b) {
    if (b.length < 2 || b[0] != '[') {
      return false;
    }
    int i = 1;
    if (b[i] == ']') {
      return b.length == 2;
    }
    while (i < b.length) {
      switch (b[i]) {
        case '"':
          i = string(b, i, false);
          break;
        case 't':
          i = literal(b, i, TRUE);
          break;
        case 'f':
          i = literal(b, i, FALSE);
          break;
        case 'n':
          i = literal(b, i, NULL);
          break;
        default:
          i = integer(b, i);
      }
      if (i < 0 || i >= b.length) {
        return false;
      }
      if (b[i] == ']') {
        return i + 1 == b.length;
      }
      if (b[i] != ',') {
        return false;
      }
      i++;
    }
    return false;
  }

  private static int integer(byte[] b, int i) {
    int start = i;
    if (b[i] == '-') {
      i++;
    }
    if (i >= b.length || b[i] < '1' || b[i] > '9') {
      // a lone 0 is written as it came; -0 and leading zeros are not
      return i == start && b[i] == '0' ? i + 1 : -1;
    }
    int end = digits(b, i);
    return end - i > 18 ? -1 : end;
  }

  /**
   * Where the member {@code name} of the object at {@code i} (nested {@code depth} deep) holds
   * its value: {start, end}. Null when the object has no such member or names it twice (which
   * one counts is the reader's choice), spells a member name with an escape (it could be
   * {@code name} spelled so), or is not a valid object.
   */
  static int[] member(byte[] b, int i, byte[] name, int depth) {
    i = ws(b, i);
    if (i >= b.length || b[i] != '{' || depth > MAX_DEPTH) {
      return null;
    }
    int[] found = null;
    i = ws(b, i + 1);
    if (i < b.length && b[i] == '}') {
      return null;
    }
    while (i < b.length && b[i] == '"') {
      int from = i;
      i = string(b, i, false);
      if (i < 0) {
        return null;
      }
      int to = i;
      i = ws(b, i);
      if (i >= b.length || b[i] != ':') {
        return null;
      }
      int start = ws(b, i + 1);
      i = value(b, start, depth);
      if (i < 0) {
        return null;
      }
      if (named(b, from, to, name)) {
        if (found != null) {
          return null;
        }
        found = new int[] {start, i};
      }
      i = ws(b, i);
      if (i < b.length && b[i] == '}') {
        return found;
      }
      if (i >= b.length || b[i] != ',') {
        return null;
      }
      i = ws(b, i + 1);
    }
    return null;
  }

  /** Whether the string {@code [from, to)} (quotes included) is {@code "name"}. */
  public static boolean named(byte[] b, int from, int to, byte[] name) {
    if (to - from != name.length + 2) {
      return false;
    }
    for (int k = 0; k < name.length; k++) {
      if (b[from + 1 + k] != name[k]) {
        return false;
      }
    }
    return true;
  }
}
