package dev.highwater.encoding;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * {@code key_column} on a native JSON route: the keys it writes (the Python loop's, {@code
 * tests/spark/test_walk_key_column_on_spark.py} holds them to it) and what it leaves.
 */
class KeyColumnTest {
  static final String T = "1700000000000000001.0000000000";

  static Encoding keyed(String column) throws Exception {
    JsonNode spec =
        new ObjectMapper()
            .readTree(
                "{\"kind\":\"verbatim\",\"members\":[\"after\",\"before\",\"updated\"],"
                    + "\"key_column\":\""
                    + column
                    + "\"}");
    return Encoding.of(spec, "out");
  }

  static Encoding.Encoded encoded(String column, String after, String before) throws Exception {
    String value = "{\"after\":" + after + ",\"before\":" + before + ",\"updated\":\"" + T + "\"}";
    Encoding.Encoded out = new Encoding.Encoded();
    boolean taken =
        keyed(column)
            .encode("[1]".getBytes(StandardCharsets.UTF_8), value.getBytes(StandardCharsets.UTF_8), out);
    return taken ? out : null;
  }

  @ParameterizedTest
  @CsvSource(
      delimiter = '|',
      value = {
        "{\"id\":1,\"c\":42}|null|[42]",
        "{\"c\":\"east\",\"id\":1}|null|[\"east\"]",
        "{\"c\":\"é\"}|null|[\"é\"]",
        "{\"c\":-7}|{\"c\":8}|[-7]", // the new version's
        "{ \"id\" : 1 , \"c\" : 0 }|null|[0]", // spaced as sources write
        "{\"c\":true}|null|[true]",
        "{\"c\":null}|null|[null]",
        "null|{\"id\":1,\"c\":9}|[9]", // a delete: its old version's
        "{\"c\":{}}|null|", // not compact-key values: left
        "{\"c\":[1]}|null|",
        "{\"c\":1.5}|null|",
        "{\"c\":1e3}|null|",
        "{\"c\":-0}|null|",
        "{\"c\":1234567890123456789}|null|", // 19 digits
        "{\"c\":\"a\\\"b\"}|null|", // an escape in the value
        "{\"id\":1}|null|", // no such column
        "{\"c\":1,\"c\":2}|null|", // named twice: the Python loop's parse keeps the last
        "{\"\\u0063\":1}|null|", // an escaped name (it is c)
        "{\"c\":1,\"\\u0063\":2}|null|",
        "null|null|", // a delete without its old version
        "null|{\"id\":1}|",
        "{}|null|",
      })
  void keysLikeThePythonLoopOrLeavesIt(String after, String before, String key) throws Exception {
    Encoding.Encoded out = encoded("c", after, before);
    if (key == null) {
      assertEquals(null, out, after + " / " + before);
    } else {
      assertEquals(key, new String(out.key, StandardCharsets.UTF_8));
      assertTrue(new String(out.value, StandardCharsets.UTF_8).contains(after.substring(0, 1)));
    }
  }

  @ParameterizedTest
  @ValueSource(strings = {"région", "a b"})
  void columnNamesAsTheyAreWritten(String column) throws Exception {
    Encoding.Encoded out = encoded(column, "{\"" + column + "\":3}", "null");
    assertEquals("[3]", new String(out.key, StandardCharsets.UTF_8));
    assertFalse(encoded(column, "{\"other\":3}", "null") != null);
  }
}
