package dev.highwater.encoding;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.charset.StandardCharsets;
import java.util.Random;
import org.junit.jupiter.api.Test;

/**
 * The walk's word-at-a-time scans and table-driven digits against the byte-at-a-time and
 * {@code String} ways they replace. The draws change every run; a failure names its seed.
 */
class DigitsTest {
  private static final long SEED = System.nanoTime();

  private static String text(Encoding.Buffer out) {
    return new String(out.bytes, 0, out.size, StandardCharsets.US_ASCII);
  }

  @Test
  void a_long_is_written_as_its_string_and_padded_as_format_pads_it() {
    Random random = new Random(SEED);
    long[] edges = {0, 1, 9, 10, 99, 100, 999_999_999_999_999_999L, 1_000_000_000_000_000_000L,
        Long.MAX_VALUE};
    for (int k = 0; k < 50_000; k++) {
      long v = k < edges.length ? edges[k] : (random.nextLong() >>> 1) >> random.nextInt(63);
      Encoding.Buffer out = new Encoding.Buffer();
      Digits.put(out, v);
      assertEquals(Long.toString(v), text(out), v + " (seed " + SEED + ")");
      int width = random.nextInt(25);
      String padded = String.format("%0" + Math.max(width, 1) + "d", v);
      out = new Encoding.Buffer();
      Digits.put(out, v, width);
      assertEquals(padded.substring(Math.max(0, padded.length() - width)), text(out),
          v + " in " + width + " (seed " + SEED + ")");
    }
  }

  @Test
  void a_time_is_written_as_hlc_text_spells_it() {
    Random random = new Random(SEED);
    for (int k = 0; k < 20_000; k++) {
      long[] ts = {random.nextLong() >> random.nextInt(64), random.nextLong() >> random.nextInt(64)};
      if (k % 3 == 0) {
        ts[1] = Math.abs(ts[1] % 10_000_000_000L); // the logical part HLC times carry
      }
      Encoding.Buffer out = new Encoding.Buffer();
      Envelope.updated(out, ts);
      assertEquals(",\"updated\":\"" + Hlc.text(ts) + "\"}", text(out),
          ts[0] + "," + ts[1] + " (seed " + SEED + ")");
    }
  }

  /** A byte string of plain ASCII with, now and then, a byte of each kind the scans stop at. */
  private static byte[] draw(Random random) {
    byte[] b = new byte[random.nextInt(40)];
    byte[] rare = {'"', '\\', 0x00, 0x1f, 0x20, 0x7f, (byte) 0x80, (byte) 0xc3, (byte) 0xff};
    for (int i = 0; i < b.length; i++) {
      b[i] = random.nextInt(12) == 0 ? rare[random.nextInt(rare.length)] : (byte) (0x21 + random.nextInt(0x5e));
    }
    return b;
  }

  @Test
  void the_scans_stop_where_a_byte_at_a_time_stops() {
    Random random = new Random(SEED);
    for (int k = 0; k < 200_000; k++) {
      byte[] b = draw(random);
      int from = b.length == 0 ? 0 : random.nextInt(b.length + 1);
      int to = from + random.nextInt(b.length - from + 1);
      int plain = from;
      while (plain < to && b[plain] >= 0x20 && b[plain] != '"' && b[plain] != '\\') {
        plain++;
      }
      int ascii = from;
      while (ascii < to && b[ascii] >= 0) {
        ascii++;
      }
      boolean escaped = false;
      for (int i = from; i < to; i++) {
        int c = b[i] & 0xff;
        escaped |= c == '"' || c == '\\' || c < 0x20;
      }
      String where = java.util.HexFormat.of().formatHex(b) + " [" + from + ", " + to + ") (seed " + SEED + ")";
      assertEquals(plain, Json.plain(b, from, to), where);
      assertEquals(ascii, Json.ascii(b, from, to), where);
      assertEquals(escaped, Json.escaped(b, from, to), where);
    }
  }
}
