package dev.highwater.encoding;

/**
 * Whether JSON text is already what the Python loop writes when it reads it and writes it
 * again (orjson, numbers kept as their text: {@code schemas/jsontext.py}): no space between
 * tokens, strings without escapes (their characters as they are: orjson escapes only the quote,
 * the backslash and control characters, which a string without escapes cannot hold), no
 * object naming a member twice (a parse keeps one), numbers as they came. Such text written
 * again is itself, so the walk may write it, or a part of it, as it is.
 */
final class Compact {
  private Compact() {}

  /** The end of the compact value at {@code i}, or -1. */
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
        return Json.string(b, i, false);
      case 't':
        return Json.literal(b, i, Json.TRUE);
      case 'f':
        return Json.literal(b, i, Json.FALSE);
      case 'n':
        return Json.literal(b, i, Json.NULL);
      default:
        return Json.number(b, i);
    }
  }

  private static int object(byte[] b, int i, int depth) {
    if (depth > Json.MAX_DEPTH) {
      return -1;
    }
    i++;
    if (i < b.length && b[i] == '}') {
      return i + 1;
    }
    int[] names = new int[8]; // each member name's start and end
    int count = 0;
    while (i < b.length && b[i] == '"') {
      int end = Json.string(b, i, false);
      if (end < 0 || twice(b, names, count, i, end)) {
        return -1;
      }
      if (2 * count + 2 > names.length) {
        names = java.util.Arrays.copyOf(names, names.length * 2);
      }
      names[2 * count] = i;
      names[2 * count + 1] = end;
      count++;
      if (end >= b.length || b[end] != ':') {
        return -1;
      }
      i = value(b, end + 1, depth);
      if (i < 0 || i >= b.length) {
        return -1;
      }
      if (b[i] == '}') {
        return i + 1;
      }
      if (b[i] != ',') {
        return -1;
      }
      i++;
    }
    return -1;
  }

  /** Whether the name {@code [from, to)} is one of the {@code count} in {@code names}. */
  private static boolean twice(byte[] b, int[] names, int count, int from, int to) {
    int length = to - from;
    for (int n = 0; n < count; n++) {
      int other = names[2 * n];
      if (names[2 * n + 1] - other == length
          && java.util.Arrays.equals(b, from, to, b, other, other + length)) {
        return true;
      }
    }
    return false;
  }

  private static int array(byte[] b, int i, int depth) {
    if (depth > Json.MAX_DEPTH) {
      return -1;
    }
    i++;
    if (i < b.length && b[i] == ']') {
      return i + 1;
    }
    while (true) {
      i = value(b, i, depth);
      if (i < 0 || i >= b.length) {
        return -1;
      }
      if (b[i] == ']') {
        return i + 1;
      }
      if (b[i] != ',') {
        return -1;
      }
      i++;
    }
  }
}
