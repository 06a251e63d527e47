package dev.highwater.encoding;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.Random;
import org.junit.jupiter.api.Test;

/**
 * Connect's semantic values written without Java's strings (decimals that fit a long, dates,
 * timestamps) against the writing through BigInteger and java.time's text that they replace.
 * The draws change every run; a failure names its seed.
 */
class ConnectTest {
  private static final long SEED = System.nanoTime();

  private static String text(Encoding.Buffer out) {
    return new String(out.bytes, 0, out.size, StandardCharsets.US_ASCII);
  }

  private static void decimalAsBigInteger(long unscaled, long scale) {
    Encoding.Buffer fast = new Encoding.Buffer();
    Connect.decimal(unscaled, scale, fast);
    Encoding.Buffer big = new Encoding.Buffer();
    Connect.decimal(BigInteger.valueOf(unscaled), scale, big);
    assertEquals(text(big), text(fast), unscaled + " scale " + scale + " (seed " + SEED + ")");
  }

  @Test
  void a_decimal_that_fits_a_long_is_written_as_through_big_integer() {
    long[] edges = {0, 1, -1, 9, 10, -10, 99, 100, Long.MAX_VALUE, Long.MIN_VALUE,
        Long.MIN_VALUE + 1, 1_000_000_000_000_000_000L, -999_999_999_999_999_999L};
    for (long v : edges) {
      for (long scale = -70; scale <= 70; scale++) {
        decimalAsBigInteger(v, scale);
      }
    }
    Random random = new Random(SEED);
    for (int k = 0; k < 20_000; k++) {
      long v = random.nextLong() >> random.nextInt(64); // every magnitude
      decimalAsBigInteger(v, random.nextInt(141) - 70);
    }
  }

  @Test
  void a_decimal_of_up_to_16_bytes_is_written_as_through_big_integer() {
    Random random = new Random(SEED);
    for (int k = 0; k < 40_000; k++) {
      byte[] b = new byte[1 + random.nextInt(20)];
      random.nextBytes(b);
      int pattern = random.nextInt(8); // the bounds: -1, 2^(8n-1) and its neighbours, 0 runs
      if (pattern == 0) {
        java.util.Arrays.fill(b, (byte) (random.nextBoolean() ? 0xff : 0x00));
      } else if (pattern == 1) {
        java.util.Arrays.fill(b, (byte) (random.nextBoolean() ? 0xff : 0x00));
        b[0] = (byte) (random.nextBoolean() ? 0x80 : 0x7f);
      } else if (pattern == 2) {
        int run = random.nextInt(b.length);
        java.util.Arrays.fill(b, 0, run, (byte) (random.nextBoolean() ? 0xff : 0x00));
      }
      long scale = random.nextInt(4) == 0 ? random.nextInt(141) - 70 : random.nextInt(40);
      int from = random.nextInt(3);
      byte[] at = new byte[from + b.length + 2]; // not at the buffer's start or end
      System.arraycopy(b, 0, at, from, b.length);
      Encoding.Buffer fast = new Encoding.Buffer();
      Connect.decimal(at, from, b.length, scale, fast);
      Encoding.Buffer big = new Encoding.Buffer();
      Connect.decimal(new BigInteger(b), scale, big);
      assertEquals(text(big), text(fast),
          java.util.HexFormat.of().formatHex(b) + " scale " + scale + " (seed " + SEED + ")");
    }
  }

  /** Python's isoformat of a timestamp of {@code count} units ({@code per} a second). */
  private static String isoformat(long count, long per) {
    long seconds = Math.floorDiv(count, per);
    long fraction = Math.floorMod(count, per);
    LocalDateTime moment = LocalDateTime.ofEpochSecond(seconds, 0, ZoneOffset.UTC);
    String text = String.format("%sT%02d:%02d:%02d", moment.toLocalDate(), moment.getHour(),
        moment.getMinute(), moment.getSecond());
    if (fraction != 0) {
      String digits = Long.toString(fraction);
      text += "." + "0".repeat(Long.toString(per).length() - 1 - digits.length()) + digits;
    }
    return "\"" + text + "\"";
  }

  @Test
  void timestamps_and_dates_are_written_as_python_writes_them() {
    Random random = new Random(SEED);
    long first = LocalDateTime.of(1, 1, 1, 0, 0).toEpochSecond(ZoneOffset.UTC);
    long last = LocalDateTime.of(9999, 12, 31, 23, 59, 59).toEpochSecond(ZoneOffset.UTC);
    for (long per : new long[] {1_000L, 1_000_000L, 1_000_000_000L}) {
      Connect.Column column =
          new Connect.Column(new byte[] {'t'}, Connect.Kind.TIMESTAMP, per);
      for (int k = 0; k < 5_000; k++) {
        long seconds = first + (long) (random.nextDouble() * (last - first));
        long fraction = random.nextInt(4) == 0 ? 0 : Math.floorMod(random.nextLong(), per);
        if (random.nextInt(4) == 0) {
          fraction = fraction / (per / 1000) * (per / 1000); // trailing zeros
        }
        long count = seconds * per + fraction;
        Encoding.Buffer out = new Encoding.Buffer();
        Connect.moment(count, column, out);
        assertEquals(isoformat(count, per), text(out), count + " per " + per + " (seed " + SEED + ")");
      }
    }
    for (int k = 0; k < 5_000; k++) {
      long days = Math.floorDiv(first, 86_400) + random.nextInt(3_652_059);
      Encoding.Buffer out = new Encoding.Buffer();
      Connect.date(days, out);
      assertEquals("\"" + java.time.LocalDate.ofEpochDay(days) + "\"", text(out), days + " (seed " + SEED + ")");
    }
  }
}
