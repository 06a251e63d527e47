package dev.highwater.encoding;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** What the encodings leave to the Python loop: anything they are not sure to write as it does. */
class EncodingTest {
  static final String T = "1700000000000000001.0000000000";

  static byte[] utf8(String text) {
    return text.getBytes(StandardCharsets.UTF_8);
  }

  /** The golden file's Avro spec with every envelope member (the table p, k, s l i d f b). */
  static JsonNode avroSpec() throws IOException {
    for (JsonNode encoding : Golden.read().get("avro")) {
      if (encoding.get("name").asText().equals("every_member_confluent")) {
        return encoding.get("walk");
      }
    }
    throw new IllegalStateException("no every_member_confluent encoding in the golden file");
  }

  static boolean avroTakes(String key, String value) throws IOException {
    return Encoding.of(avroSpec(), "out").encode(utf8(key), utf8(value), new Encoding.Encoded());
  }

  static String change(String after) {
    return "{\"after\":" + after + ",\"before\":null,\"updated\":\"" + T + "\"}";
  }

  @ParameterizedTest
  @ValueSource(
      strings = {
        "{\"i\":2147483648}", // beyond int: the Python loop calls it a misfit
        "{\"i\":-2147483649}",
        "{\"l\":9223372036854775808}", // 19 digits beyond a long
        "{\"l\":-9223372036854775809}",
        "{\"l\":12345678901234567890}", // 20 digits
        "{\"l\":1.0}", // a float into a long
        "{\"l\":1e3}",
        "{\"f\":3.5e38}", // a finite double too large for a float
        "{\"f\":-3.5e38}",
        "{\"d\":1e999999999999999999999999999999999999999999999999999999999999999}", // 65 chars
        "{\"d\":NaN}",
        "{\"d\":Infinity}",
        "{\"l\":\"1\"}", // a string into a long
        "{\"s\":1}", // a number into a string
        "{\"i\":true}",
        "{\"b\":1}",
        "{\"s\":\"a\",\"s\":\"b\"}", // a duplicate member
        "{\"zz\":1}", // a column the schema lacks: a schema change
        "{\"\\u0073\":\"x\"}", // an escaped name
        "{\"s\":\"\\ud83d\\ude00\"}", // an escaped surrogate pair
        "{\"s\":\"\\udc00\"}", // a lone one
        "[1]", // not an object
        "1",
      })
  void avro_leaves_values_it_cannot_write_as_python_does(String after) throws IOException {
    assertTrue(avroTakes("[1,\"a\"]", change("{\"s\":\"fits\"}")));
    assertFalse(avroTakes("[1,\"a\"]", change(after)), after);
  }

  @ParameterizedTest
  @ValueSource(
      strings = {
        "{\"l\":9223372036854775807}", // a bigint's 19 digits: Python's int fits the long
        "{\"l\":-9223372036854775808}",
        "{\"l\":1234567890123456789,\"d\":1234567890123456789,\"f\":-9999999999999999999}",
      })
  void avro_takes_integers_a_long_holds(String after) throws IOException {
    assertTrue(avroTakes("[1,\"a\"]", change(after)), after);
  }

  @ParameterizedTest
  @ValueSource(
      strings = {
        "[1]", // a key of fewer fields
        "[1,\"a\",2]",
        "[\"1\",\"a\"]", // of other types
        "[1,2]",
        "[null,\"a\"]", // a key field is never null
        "[1.5,\"a\"]",
        "[1,\"a\"",
        "{\"p\":1,\"k\":\"a\"}",
        "[1,\"a\"] x",
      })
  void avro_leaves_keys_that_do_not_fit_the_primary_key(String key) throws IOException {
    assertTrue(avroTakes(" [ 1 , \"a\" ] ", change("{}")));
    assertFalse(avroTakes(key, change("{}")), key);
  }

  @ParameterizedTest
  @ValueSource(
      strings = {
        "{}", // no time
        "{\"after\":{}}",
        "{\"after\":{},\"updated\":\"1700000000000000001\"}", // a time written otherwise
        "{\"after\":{},\"updated\":1700000000000000001}",
        "{\"after\":{},\"updated\":\"" + T + "\",\"updated\":\"" + T + "\"}",
        "{\"after\":{},\"after\":{},\"updated\":\"" + T + "\"}",
        "{\"after\":[1],\"updated\":\"" + T + "\"}",
        "{\"after\":{},\"updated\":\"" + T + "\"} x",
        "{\"after\":{},\"updated\":\"" + T + "\",}",
        "{\"after\":{},\"op\":NaN,\"updated\":\"" + T + "\"}", // any member must be valid JSON
      })
  void avro_leaves_envelopes_that_are_not_changes_it_reads(String value) throws IOException {
    assertFalse(avroTakes("[1,\"a\"]", value), value);
  }

  @ParameterizedTest
  @ValueSource(strings = {"bytes", "date", "decimal", "timestamp-micros", "uuid", "null", "record"})
  void avro_refuses_a_spec_with_types_other_than_the_six_primitives(String type)
      throws IOException {
    ObjectNode spec = avroSpec().deepCopy();
    ((ArrayNode) spec.get("columns")).add(new ObjectMapper().createArrayNode().add("x").add(type).add(true));
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> Encoding.of(spec, "out"));
    assertTrue(e.getMessage().startsWith("not a walkable Avro type"), e.getMessage());
  }

  static boolean verbatimTakes(String key, String value) {
    JsonNode spec =
        new ObjectMapper()
            .createObjectNode()
            .put("kind", "verbatim")
            .set("members", new ObjectMapper().createArrayNode().add("after").add("before").add("updated"));
    return Encoding.of(spec, "out").encode(utf8(key), utf8(value), new Encoding.Encoded());
  }

  @ParameterizedTest
  @ValueSource(
      strings = {
        "[ 1]", // keys are written compact
        "[\"a\\\"b\"]",
        "[-0]",
        "[1.0]",
      })
  void verbatim_leaves_keys_the_python_loop_writes_again(String key) {
    String value = change("{}");
    assertTrue(verbatimTakes("[1]", value));
    assertFalse(verbatimTakes(key, value), key);
  }

  @ParameterizedTest
  @ValueSource(
      strings = {
        "{\"before\":null,\"after\":{},\"updated\":\"T\"}", // other order
        "{\"after\":{},\"updated\":\"T\"}", // a member missing
        "{\"after\":{},\"before\":null,\"updated\":\"T\",\"op\":\"c\"}", // one more
        "{\"after\":{},\"before\":null,\"updated\":\"1700000000000000001\"}",
        "{\"after\":1,\"before\":null,\"updated\":\"T\"}",
        "{\"after\":{\"a\":tru},\"before\":null,\"updated\":\"T\"}",
        "{\"after\":{\"a\":\"\\ud800\"},\"before\":null,\"updated\":\"T\"}",
        "{\"after\":{},\"before\":null,\"updated\":\"T\"}x",
        "{\"after\":{},\"before\":null,\"updated\":\"T\"",
        "{\"\\u0061fter\":{},\"before\":null,\"updated\":\"T\"}",
      })
  void verbatim_leaves_values_that_are_not_exactly_the_envelope(String value) {
    assertTrue(verbatimTakes("[1]", " { \"after\" : {} , \"before\" : null , \"updated\" : \"" + T + "\" } "));
    assertFalse(verbatimTakes("[1]", value.replace("\"T\"", "\"" + T + "\"")), value);
  }

  @Test
  void longs_are_zig_zag_base_128_varints_as_avro_writes_them() {
    long[] values = {0, -1, 1, -64, 64, 127, -128, 8192, Long.MAX_VALUE, Long.MIN_VALUE};
    String[] written = {
      "00", "01", "02", "7f", "8001", "fe01", "ff01", "808001",
      "feffffffffffffffff01", "ffffffffffffffffff01"
    };
    for (int k = 0; k < values.length; k++) {
      Encoding.Buffer buffer = new Encoding.Buffer();
      buffer.varint(values[k]);
      assertEquals(written[k], Golden.hex(buffer.copy(0)), Long.toString(values[k]));
    }
    Encoding.Buffer buffer = new Encoding.Buffer();
    buffer.fixed(Double.doubleToRawLongBits(1.5), 8);
    assertEquals("000000000000f83f", Golden.hex(buffer.copy(0))); // little-endian, as Avro
  }
}
