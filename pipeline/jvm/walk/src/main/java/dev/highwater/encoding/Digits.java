package dev.highwater.encoding;

/**
 * A non-negative long's decimal digits written straight into a buffer, two at a time from a
 * table (no {@code String}, one division by 100 per pair): what the walk writes for every
 * number, decimal, time and HLC of an event.
 */
final class Digits {
  private static final byte[] PAIRS = new byte[200]; // "00" to "99"
  private static final long[] POWERS = new long[19]; // 10^0 to 10^18

  static {
    for (int k = 0; k < 100; k++) {
      PAIRS[2 * k] = (byte) ('0' + k / 10);
      PAIRS[2 * k + 1] = (byte) ('0' + k % 10);
    }
    POWERS[0] = 1;
    for (int k = 1; k < POWERS.length; k++) {
      POWERS[k] = POWERS[k - 1] * 10;
    }
  }

  private Digits() {}

  /** 10^k, for k from 0 to 18. */
  static long power(int k) {
    return POWERS[k];
  }

  /** How many digits {@code v} (at least 0) has: 1 for 0. */
  static int count(long v) {
    int below = ((63 - Long.numberOfLeadingZeros(v | 1)) * 1233) >>> 12; // log10 of v's top bit
    return below + 1 + (below < 18 && v >= POWERS[below + 1] ? 1 : 0);
  }

  /** {@code v}'s digits, as many as it has. */
  static void put(Encoding.Buffer o, long v) {
    put(o, v, count(v));
  }

  /** {@code v}'s last {@code width} digits, zeros before them where it has fewer. */
  static void put(Encoding.Buffer o, long v, int width) {
    o.room(width);
    byte[] b = o.bytes;
    int k = o.size + width;
    int start = o.size;
    o.size = k;
    while (v > Integer.MAX_VALUE && k - start >= 2) {
      long q = v / 100;
      int pair = (int) (v - q * 100) * 2;
      v = q;
      b[--k] = PAIRS[pair + 1];
      b[--k] = PAIRS[pair];
    }
    // the rest in ints; where the width ran out first, at most one digit is left to write
    int u = (int) (v > Integer.MAX_VALUE ? v % 100 : v);
    while (k - start >= 2) {
      int q = u / 100;
      int pair = (u - q * 100) * 2;
      u = q;
      b[--k] = PAIRS[pair + 1];
      b[--k] = PAIRS[pair];
    }
    if (k > start) {
      b[--k] = (byte) ('0' + u % 10);
    }
  }
}
