package dev.highwater.encoding;

/**
 * Times as the changefeed writes them ({@code <wall>.<10 digits>}, Python's {@code str(Hlc)}),
 * kept as two longs {wall, logical}.
 */
public final class Hlc {
  private Hlc() {}

  /**
   * An HLC string's content {@code [from, to)} written as the changefeed writes times
   * ({@code <wall>.<10 digits>}, the wall without leading zeros, of at most 19 digits the first
   * of which is below 9, so within a long): the time
   * as {wall, logical}, or null.
   */
  public static long[] parse(byte[] b, int from, int to) {
    int dot = to - 11;
    int digits = dot - from; // at most 19, the first below 9: within a long
    if (dot <= from
        || b[dot] != '.'
        || digits > 19
        || (digits == 19 && b[from] > '8')
        || (b[from] == '0' && digits > 1)) {
      return null;
    }
    long wall = 0;
    for (int k = from; k < dot; k++) {
      int d = b[k] - '0';
      if (d < 0 || d > 9) {
        return null;
      }
      wall = wall * 10 + d;
    }
    long logical = 0;
    for (int k = dot + 1; k < to; k++) {
      int d = b[k] - '0';
      if (d < 0 || d > 9) {
        return null;
      }
      logical = logical * 10 + d;
    }
    return new long[] {wall, logical};
  }

  /** A time as the changefeed writes it. */
  public static String text(long[] t) {
    String logical = Long.toString(t[1]); // zero-padded to 10 digits, as Python's str(Hlc)
    return t[0] + "." + "0000000000".substring(Math.min(10, logical.length())) + logical;
  }
}
