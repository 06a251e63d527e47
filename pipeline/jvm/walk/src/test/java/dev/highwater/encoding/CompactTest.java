package dev.highwater.encoding;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.charset.StandardCharsets;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * {@link Compact}: JSON text that written again by the Python loop (orjson, numbers as their
 * text) is itself, and what is not.
 */
class CompactTest {
  static int end(String text) {
    byte[] b = text.getBytes(StandardCharsets.UTF_8);
    int end = Compact.value(b, 0, 0);
    return end == b.length ? end : -1;
  }

  @ParameterizedTest
  @ValueSource(
      strings = {
        "{}",
        "[]",
        "{\"a\":1,\"b\":[1,2.50,-0,1E+2,1e400],\"c\":{\"a\":null}}", // a name again, nested
        "{\"é\":\"ü ✓ \u2028\u007f\"}", // characters orjson writes as they are
        "\"x\"",
        "true",
        "[{},[],{\"a\":[{}]}]",
      })
  void compactTextIsTaken(String text) {
    assertEquals(text.getBytes(StandardCharsets.UTF_8).length, end(text), text);
  }

  @ParameterizedTest
  @ValueSource(
      strings = {
        "{ }",
        "{\"a\": 1}",
        "[1, 2]",
        " {}",
        "{\"a\":1,\"a\":2}", // named twice: a parse keeps one
        "{\"o\":{\"a\":1,\"b\":2,\"a\":3}}",
        "{\"a\":\"\\u00e9\"}", // an escape orjson would not write
        "{\"a\":\"\\\"\"}", // one it would: still not taken (no escapes at all)
        "{\"\\u0061\":1}",
        "{\"a\":1",
        "[1,]",
        "{\"a\":NaN}",
      })
  void anythingElseIsLeft(String text) {
    assertEquals(-1, end(text), text);
  }
}
