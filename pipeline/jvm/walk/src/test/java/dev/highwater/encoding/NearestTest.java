package dev.highwater.encoding;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.Random;
import org.junit.jupiter.api.Test;

/**
 * {@link Nearest} against {@code Double.parseDouble} of the decimal's text (what the walk did
 * through JSON, and Python's {@code float()}): drawn unscaled values of 1 to 16 bytes at every
 * scale it takes, and the numbers where rounding is hardest: exactly halfway between two
 * doubles (ties to even), and one unit either side of that.
 */
class NearestTest {
  private static void same(BigInteger unscaled, int scale) {
    byte[] bytes = unscaled.toByteArray();
    if (bytes.length > 16) {
      return;
    }
    byte[] padded = new byte[bytes.length + 3]; // where it lies in a record, between others
    System.arraycopy(bytes, 0, padded, 2, bytes.length);
    String text = new BigDecimal(unscaled, scale).toPlainString();
    assertEquals(
        Double.parseDouble(text),
        Nearest.of(padded, 2, bytes.length, scale),
        () -> text + " (" + unscaled + " at scale " + scale + ")");
  }

  @Test
  void drawnDecimalsAreTheirTextsDouble() {
    Random r = new Random(20261207);
    for (int k = 0; k < 400_000; k++) {
      int bits = 1 + r.nextInt(127);
      BigInteger unscaled = new BigInteger(bits, r);
      same(r.nextBoolean() ? unscaled.negate() : unscaled, r.nextInt(Nearest.MAX_SCALE + 1));
    }
    BigInteger top = BigInteger.ONE.shiftLeft(127);
    for (int scale = 0; scale <= Nearest.MAX_SCALE; scale++) {
      for (BigInteger u :
          new BigInteger[] {
            BigInteger.ZERO, BigInteger.ONE, top.subtract(BigInteger.ONE), top.negate(),
            BigInteger.ONE.shiftLeft(53), BigInteger.ONE.shiftLeft(53).add(BigInteger.ONE),
            BigInteger.TEN.pow(scale), BigInteger.valueOf(Long.MAX_VALUE)
          }) {
        same(u, scale);
        same(u.negate(), scale);
      }
    }
  }

  @Test
  void halfwayBetweenTwoDoublesRoundsToEvenAndAUnitAsideDoesNot() {
    Random r = new Random(7);
    int ties = 0;
    for (int k = 0; k < 200_000; k++) {
      double d = Math.scalb(1 + r.nextDouble(), r.nextInt(126) - 40);
      BigDecimal mid =
          new BigDecimal(d).add(new BigDecimal(Math.nextUp(d))).divide(BigDecimal.valueOf(2));
      BigDecimal stripped = mid.stripTrailingZeros();
      int scale = Math.max(0, stripped.scale());
      if (scale > Nearest.MAX_SCALE) {
        continue;
      }
      BigInteger unscaled = stripped.setScale(scale).unscaledValue();
      for (int delta = -1; delta <= 1; delta++) {
        same(unscaled.add(BigInteger.valueOf(delta)), scale);
        same(unscaled.add(BigInteger.valueOf(delta)).negate(), scale);
      }
      ties++;
    }
    assertEquals(true, ties > 10_000, "ties drawn: " + ties);
  }
}
