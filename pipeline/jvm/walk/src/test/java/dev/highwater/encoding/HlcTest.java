package dev.highwater.encoding;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** Times as text: read only as the changefeed writes them, written as Python's str(Hlc). */
class HlcTest {
  static long[] parse(String text) {
    byte[] b = text.getBytes(StandardCharsets.US_ASCII);
    return Hlc.parse(b, 0, b.length);
  }

  @Test
  void the_golden_times_read_and_write_as_python_reads_and_writes_them() throws IOException {
    JsonNode vectors = Golden.read().get("hlc");
    assertEquals(5, vectors.size());
    for (JsonNode v : vectors) {
      long[] ts = {v.get("wall").asLong(), v.get("logical").asLong()};
      assertArrayEquals(ts, parse(v.get("text").asText()), v.toString());
      assertEquals(v.get("text").asText(), Hlc.text(ts));
    }
  }

  @Test
  void the_logical_part_is_zero_padded_to_ten_digits() {
    assertEquals("1700000000000000001.0000000000", Hlc.text(new long[] {1700000000000000001L, 0}));
    assertEquals("5.0000000042", Hlc.text(new long[] {5, 42}));
    assertEquals("0.9999999999", Hlc.text(new long[] {0, 9_999_999_999L}));
    assertEquals(Long.MAX_VALUE + ".9999999999", Hlc.text(new long[] {Long.MAX_VALUE, 9_999_999_999L}));
  }

  @Test
  void within_a_string_only_its_content_is_read() {
    byte[] b = "{\"updated\":\"12.0000000003\"}".getBytes(StandardCharsets.US_ASCII);
    assertArrayEquals(new long[] {12, 3}, Hlc.parse(b, 12, 25));
  }

  @ParameterizedTest
  @ValueSource(
      strings = {
        "1700000000000000001", // a time without its logical part: the Python loop reads it
        "1700000000000000001.0",
        "1.000000000", // nine digits
        "1.00000000000", // eleven
        ".0000000000",
        "01.0000000000", // a leading zero
        "-1.0000000000",
        "+1.0000000000",
        "1.-000000001",
        "1.000000000a",
        "1e3.0000000000",
        "1,0000000000",
        "9000000000000000000.0000000000", // 19 digits from 9: may not fit a long
        "9223372036854775807.0000000000",
        "12345678901234567890.0000000000", // 20 digits
        "",
      })
  void other_texts_are_left_to_the_python_loop(String text) {
    assertNull(parse(text), text);
  }
}
