package dev.highwater.encoding;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** An initial scan's rows of a native source (its bytes against the Python scan: on Spark). */
class ScanEnvelopeTest {
  private static final long[] T = {1700000000000000010L, 5};
  private static final ScanEnvelope ALL =
      new ScanEnvelope(List.of("after", "before", "updated", "mvcc_timestamp"));

  private static byte[] bytes(String text) {
    return text.getBytes(StandardCharsets.UTF_8);
  }

  private static String text(byte[] b) {
    return b == null ? null : new String(b, StandardCharsets.UTF_8);
  }

  @Test
  void reads_the_time_at_a_values_tail_as_the_python_scan_does() {
    assertArrayEquals(
        new long[] {123, 5}, ScanEnvelope.time(bytes("{\"after\":{},\"updated\":\"123.0000000005\"}")));
    assertArrayEquals(
        new long[] {123, 0}, ScanEnvelope.time(bytes("{\"updated\" :\f\"123\" }\n")));
    assertArrayEquals(
        new long[] {8999999999999999999L, 1},
        ScanEnvelope.time(bytes("{\"updated\":\"8999999999999999999.1\"}")));
    assertArrayEquals(
        new long[] {7, 0}, ScanEnvelope.time(bytes("{\"x\":1,\"updated\":\"007.0\"}")));
  }

  @ParameterizedTest
  @ValueSource(
      strings = {
        "{\"updated\":\"9000000000000000000.1\"}", // beyond the wall's 19 digits, the first 0 - 8
        "{\"updated\":\"12345678901234567890\"}", // twenty digits
        "{\"updated\":\"1.12345678901\"}", // a logical of eleven
        "{\"updated\":\"1.\"}",
        "{\"updated\":\".1\"}",
        "{\"updated\":\"-1\"}",
        "{\"updated\":\"1\",\"after\":{}}", // not the last member
        "{\"updated\":1}",
        "{\"updatedx\":\"1\"}",
        "{\"updated\":\"1\"}}",
        "{\"updated\":\"1\"\u000b}", // \v is not RE2's \s
      })
  void leaves_a_time_it_cannot_read_there(String value) {
    assertNull(ScanEnvelope.time(bytes(value)), value);
  }

  @Test
  void reads_no_further_than_the_last_64_bytes() {
    String pad = " ".repeat(64 - "\"updated\":\"1\"}".length());
    assertArrayEquals(new long[] {1, 0}, ScanEnvelope.time(bytes("{\"updated\":\"1\"" + pad + "}")));
    assertNull(ScanEnvelope.time(bytes("{\"updated\":\"1\" " + pad + "}")));
  }

  @Test
  void writes_a_snapshot_row_at_the_statement_time() {
    Encoding.Encoded out = new Encoding.Encoded();
    String value =
        "{\"after\":{\"s\":\"\\u00e9\\/\",\"n\":1.50,\"e\":1E400},\"before\":{\"x\":1},"
            + "\"updated\":\"1700000000000000003.0000000000\"}";
    assertTrue(ALL.write(bytes("[ 1, \"a\" ]"), bytes(value), T, true, out));
    assertEquals("[1,\"a\"]", text(out.key));
    assertEquals(
        "{\"after\":{\"s\":\"é/\",\"n\":1.50,\"e\":1E400},\"before\":null,"
            + "\"updated\":\"1700000000000000010.0000000005\","
            + "\"mvcc_timestamp\":\"1700000000000000003.0000000000\"}",
        text(out.value));
    assertArrayEquals(new long[] {1700000000000000003L, 0}, out.ts);
  }

  @Test
  void writes_a_later_change_at_its_own_time_with_its_before() {
    Encoding.Encoded out = new Encoding.Encoded();
    String value = "{\"after\":null,\"before\":{\"x\":[1,{}]},\"updated\":\"9.0000000001\"}";
    assertTrue(ALL.write(bytes("[1]"), bytes(value), null, false, out));
    assertEquals(
        "{\"after\":null,\"before\":{\"x\":[1,{}]},\"updated\":\"9.0000000001\","
            + "\"mvcc_timestamp\":\"9.0000000001\"}",
        text(out.value));
    ScanEnvelope plain = new ScanEnvelope(List.of("after", "updated"));
    assertTrue(plain.write(bytes("[1]"), bytes("{\"after\":{},\"updated\":\"9.0000000001\"}"), null, false, out));
    assertEquals("{\"after\":{},\"updated\":\"9.0000000001\"}", text(out.value));
  }

  @Test
  void a_deleted_keys_snapshot_is_no_row() {
    Encoding.Encoded out = new Encoding.Encoded();
    assertTrue(ALL.write(bytes("[1]"), bytes("{\"after\":null,\"updated\":\"9.0000000001\"}"), T, true, out));
    assertNull(out.value);
  }

  @ParameterizedTest
  @ValueSource(
      strings = {
        "{\"before\":null,\"after\":{},\"updated\":\"9.0000000001\"}", // reordered
        "{\"after\":{},\"updated\":\"9.0000000001\",\"x\":1}", // another member
        "{\"after\":{},\"updated\":\"9.1\"}", // a time not written as the changefeed writes one
        "{\"after\":[],\"updated\":\"9.0000000001\"}",
        "{\"after\":{\"a\":1,\"a\":2},\"updated\":\"9.0000000001\"}", // a name twice
        "{\"after\":{},\"before\":{\"a\":},\"updated\":\"9.0000000001\"}", // not JSON
        "{\"after\":{\"a\":\"\u0001\"},\"updated\":\"9.0000000001\"}", // a control character
        "{\"after\":{},\"updated\":\"9.0000000001\"} x",
      })
  void leaves_to_the_python_scan(String value) {
    assertFalse(ALL.write(bytes("[1]"), bytes(value), T, true, new Encoding.Encoded()), value);
  }

  @Test
  void leaves_a_key_that_is_not_an_array() {
    byte[] value = bytes("{\"after\":{},\"updated\":\"9.0000000001\"}");
    assertFalse(ALL.write(bytes("{\"k\":1}"), value, T, true, new Encoding.Encoded()));
    assertFalse(ALL.write(bytes("[1"), value, T, true, new Encoding.Encoded()));
  }
}
