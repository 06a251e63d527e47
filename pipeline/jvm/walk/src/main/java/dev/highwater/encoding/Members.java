package dev.highwater.encoding;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/** Reading the members of a JSON object by name, for the Debezium events' envelopes. */
final class Members {
  private Members() {}

  static byte[] utf8(String text) {
    return text.getBytes(StandardCharsets.UTF_8);
  }

  /** Whether {@code members} (an envelope's, as the walk's plan names them) has {@code name}. */
  static boolean has(byte[][] members, String name) {
    for (byte[] m : members) {
      if (Arrays.equals(m, utf8(name))) {
        return true;
      }
    }
    return false;
  }

  static byte[][] names(String... names) {
    byte[][] out = new byte[names.length][];
    for (int k = 0; k < names.length; k++) {
      out[k] = names[k].getBytes(StandardCharsets.UTF_8);
    }
    return out;
  }

  /**
   * Reads the object at {@code i}: where each of {@code names} has its value ({@code found[2k]},
   * {@code [2k+1]}: from, to; -1 when absent), how many members it has (the last slot). A name
   * spelled with escapes, or one of {@code names} twice, is not taken (-1). {@code cached}: a
   * value already read whole for the first name, skipped when it comes again as it was.
   */
  static int read(byte[] b, int i, byte[][] names, int[] found, byte[][] cached) {
    Arrays.fill(found, -1);
    int count = 0;
    i = Json.ws(b, i + 1);
    if (i < b.length && b[i] == '}') {
      found[found.length - 1] = 0;
      return i + 1;
    }
    while (i < b.length && b[i] == '"') {
      int name = i;
      i = Json.string(b, i, false);
      if (i < 0) {
        return -1;
      }
      int slot = -1;
      for (int k = 0; k < names.length; k++) {
        if (Json.named(b, name, i, names[k])) {
          slot = k;
        }
      }
      if (slot >= 0 && found[2 * slot] >= 0) {
        return -1;
      }
      i = Json.ws(b, i);
      if (i >= b.length || b[i] != ':') {
        return -1;
      }
      int from = Json.ws(b, i + 1);
      byte[] known = slot == 0 && cached != null ? cached[0] : null;
      if (known != null && from + known.length <= b.length
          && Arrays.equals(b, from, from + known.length, known, 0, known.length)) {
        i = from + known.length; // an object read whole before: the same again
      } else {
        i = Json.value(b, from, 1);
      }
      if (i < 0) {
        return -1;
      }
      if (slot >= 0) {
        found[2 * slot] = from;
        found[2 * slot + 1] = i;
      }
      count++;
      i = Json.ws(b, i);
      if (i < b.length && b[i] == '}') {
        found[found.length - 1] = count;
        return i + 1;
      }
      if (i >= b.length || b[i] != ',') {
        return -1;
      }
      i = Json.ws(b, i + 1);
    }
    return -1;
  }

  /** The names of one object read so far: each next one is taken once, spelled plainly. */
  static final class Names {
    private int[] spans = new int[16]; // from, to of each name (quotes included)
    private int count;

    /** The name at {@code i}: the index past it; -1 when escaped or read before. */
    int read(byte[] b, int i) {
      int end = Json.string(b, i, false);
      if (end < 0 || twice(b, spans, count, i, end)) {
        return -1;
      }
      if (2 * count + 2 > spans.length) {
        spans = Arrays.copyOf(spans, 2 * spans.length);
      }
      spans[2 * count] = i;
      spans[2 * count + 1] = end;
      count++;
      return end;
    }

    int count() {
      return count;
    }
  }

  /** Whether the name at {@code [from, to)} is one of the {@code count} names before it. */
  static boolean twice(byte[] b, int[] names, int count, int from, int to) {
    for (int k = 0; k < count; k++) {
      if (Arrays.equals(b, names[2 * k], names[2 * k + 1], b, from, to)) {
        return true;
      }
    }
    return false;
  }
}
