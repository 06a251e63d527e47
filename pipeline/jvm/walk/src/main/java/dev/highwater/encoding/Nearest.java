package dev.highwater.encoding;

import java.math.BigInteger;

/**
 * The double nearest a decimal's number (ties to even), from its unscaled value and scale, as
 * {@code float()} of its text gives it in Python and {@code Double.parseDouble} in Java,
 * without writing the text and parsing it again: the unscaled value over {@code 5^scale},
 * divided exactly in integers to 55 bits and a remainder, rounded once, then scaled by
 * {@code 2^-scale} (exact: every such number is a normal double).
 */
final class Nearest {
  static final int MAX_SCALE = 27; // 5^27 is the largest power of five a long holds
  private static final BigInteger[] FIVES = new BigInteger[MAX_SCALE + 1];

  static {
    for (int s = 0; s <= MAX_SCALE; s++) {
      FIVES[s] = BigInteger.valueOf(5).pow(s);
    }
  }

  private Nearest() {}

  /**
   * The double of the decimal whose unscaled value is {@code length} big-endian two's
   * complement bytes at {@code b[from]} (at least one) at {@code scale} (0 to {@link
   * #MAX_SCALE}).
   */
  static double of(byte[] b, int from, int length, int scale) {
    BigInteger unscaled = new BigInteger(b, from, length);
    int sign = unscaled.signum();
    if (sign == 0) {
      return 0.0;
    }
    BigInteger m = unscaled.abs();
    BigInteger five = FIVES[scale];
    int shift = 55 + five.bitLength() - m.bitLength(); // the quotient: 55 or 56 bits
    boolean sticky = false; // a bit below the quotient's is not zero
    if (shift >= 0) {
      m = m.shiftLeft(shift);
    } else {
      sticky = m.getLowestSetBit() < -shift;
      m = m.shiftRight(-shift);
    }
    BigInteger[] qr = m.divideAndRemainder(five);
    long q = qr[0].longValueExact();
    sticky |= qr[1].signum() != 0;
    int drop = 64 - Long.numberOfLeadingZeros(q) - 53; // 2 or 3 bits below the mantissa's
    long mantissa = q >>> drop;
    long rest = q & ((1L << drop) - 1);
    long half = 1L << (drop - 1);
    if (rest > half || (rest == half && (sticky || (mantissa & 1) == 1))) {
      mantissa++; // 2^53 at most: still exact
    }
    double value = Math.scalb((double) mantissa, drop - shift - scale);
    return sign < 0 ? -value : value;
  }
}
