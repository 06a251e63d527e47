package dev.highwater.encoding;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * What the walk's JSON reader takes (a subset of what the Python loop reads the same way) and
 * what it leaves to the Python loop (-1: not taken, never "bad").
 */
class JsonTest {
  static byte[] utf8(String text) {
    return text.getBytes(StandardCharsets.UTF_8);
  }

  /** Whether {@code text} is one JSON value the reader takes, to its last byte. */
  static boolean taken(String text) {
    return taken(utf8(text));
  }

  static boolean taken(byte[] b) {
    return Json.value(b, 0, 0) == b.length;
  }

  @ParameterizedTest
  @ValueSource(
      strings = {
        "\"\"",
        "\"plain ascii ~ and DEL \u007f\"",
        "\"\\\"\"",
        "\"\\\\\"",
        "\"\\/\"",
        "\"\\b\\f\\n\\r\\t\"",
        "\"\\u0000\\u001f\\u007f\"",
        "\"\\u00e9\\u00E9\\u20ac\\uffff\"",
        "\"\\u2028\\u2029\"",
        "\"raw \u2028 \u2029\"",
        "\"é€😀\"",
      })
  void strings_with_every_escape_and_utf8_are_taken(String text) {
    assertTrue(taken(text), text);
  }

  @ParameterizedTest
  @ValueSource(
      strings = {
        "\"\\ud83d\\ude00\"", // a surrogate pair, escaped: the Python loop reads it
        "\"\\ud800\"", // a lone high surrogate: a bad record, the Python loop says so
        "\"\\udc00\"", // a lone low one
        "\"\\x41\"", // no such escape
        "\"\\u12\"", // too short
        "\"\\u12g4\"",
        "\"\\'\"",
        "\"unterminated",
        "\"tab\tinside\"", // control characters must be escaped
        "\"nl\ninside\"",
        "\"\u0001\"",
      })
  void escaped_surrogates_bad_escapes_and_control_characters_are_not_taken(String text) {
    assertFalse(taken(text), text);
  }

  @Test
  void malformed_utf8_is_not_taken() {
    byte[][] bad = {
      {'"', (byte) 0xc0, (byte) 0x80, '"'}, // overlong NUL
      {'"', (byte) 0xc1, (byte) 0xbf, '"'}, // overlong
      {'"', (byte) 0xe0, (byte) 0x80, (byte) 0x80, '"'}, // overlong three bytes
      {'"', (byte) 0xed, (byte) 0xa0, (byte) 0x80, '"'}, // a surrogate, UTF-8 encoded
      {'"', (byte) 0xf0, (byte) 0x80, (byte) 0x80, (byte) 0x80, '"'}, // overlong four bytes
      {'"', (byte) 0xf4, (byte) 0x90, (byte) 0x80, (byte) 0x80, '"'}, // beyond U+10FFFF
      {'"', (byte) 0xf5, (byte) 0x80, (byte) 0x80, (byte) 0x80, '"'},
      {'"', (byte) 0xff, '"'},
      {'"', (byte) 0x80, '"'}, // a continuation byte alone
      {'"', (byte) 0xe2, (byte) 0x82, '"'}, // truncated
      {'"', (byte) 0xe2, (byte) 0x28, (byte) 0xa1, '"'}, // a bad continuation
    };
    for (byte[] b : bad) {
      assertFalse(taken(b), java.util.Arrays.toString(b));
    }
    byte[] edges = {
      '"', (byte) 0xc2, (byte) 0x80, (byte) 0xdf, (byte) 0xbf, // U+0080, U+07FF
      (byte) 0xe0, (byte) 0xa0, (byte) 0x80, (byte) 0xed, (byte) 0x9f, (byte) 0xbf, // U+0800, U+D7FF
      (byte) 0xee, (byte) 0x80, (byte) 0x80, // U+E000
      (byte) 0xf0, (byte) 0x90, (byte) 0x80, (byte) 0x80, // U+10000
      (byte) 0xf4, (byte) 0x8f, (byte) 0xbf, (byte) 0xbf, '"' // U+10FFFF
    };
    assertTrue(taken(edges));
  }

  @ParameterizedTest
  @ValueSource(
      strings = {
        "0",
        "-0",
        "7",
        "-7",
        "123456789012345678901234567890",
        "-123456789012345678901234567890",
        "0.5",
        "-0.0",
        "3.141592653589793238462643383279502884197",
        "1e5",
        "1E5",
        "1e+5",
        "1e-5",
        "-1.5E-300",
        "1e400",
        "0e0",
        // 64 characters: the longest number taken
        "1234567890123456789012345678901234567890123456789012345678901234",
      })
  void numbers_of_every_form_are_taken(String text) {
    assertTrue(taken(text), text);
    assertEquals(text.length(), Json.number(utf8(text), 0));
  }

  @ParameterizedTest
  @ValueSource(
      strings = {
        "01",
        "-01",
        "+1",
        "1.",
        ".5",
        "-",
        "1e",
        "1e+",
        "1.e5",
        "0x10",
        "NaN",
        "-NaN",
        "Infinity",
        "-Infinity",
        "infinity",
        // 65 characters: left to the Python loop
        "12345678901234567890123456789012345678901234567890123456789012345",
      })
  void other_numbers_nan_and_infinity_are_not_taken(String text) {
    assertFalse(taken(text), text);
  }

  @Test
  void literals_objects_arrays_and_nesting_to_the_limit() {
    for (String text :
        new String[] {"true", "false", "null", "{}", "[]", "{\"a\" : [1, {\"b\":null}] }"}) {
      assertEquals(text.length(), Json.value(utf8(text), 0, 0), text);
    }
    for (String text : new String[] {"tru", "nul", "{\"a\"}", "{\"a\":1,}", "[1,]", "{1:2}", "[1 2]"}) {
      assertFalse(taken(text), text);
    }
    String deepest = "[".repeat(Json.MAX_DEPTH) + "]".repeat(Json.MAX_DEPTH);
    assertTrue(taken(deepest));
    String deeper = "[".repeat(Json.MAX_DEPTH + 1) + "]".repeat(Json.MAX_DEPTH + 1);
    assertFalse(taken(deeper));
  }

  @Test
  void strings_without_escapes_are_read_only_where_escapes_are_refused() {
    assertEquals(5, Json.string(utf8("\"abc\""), 0, false));
    assertEquals(-1, Json.string(utf8("\"a\\nc\""), 0, false));
    assertEquals(6, Json.string(utf8("\"a\\nc\""), 0, true));
  }

  @ParameterizedTest
  @ValueSource(
      strings = {
        "[]",
        "[0]",
        "[1]",
        "[-5]",
        "[123456789012345678]", // 18 digits
        "[-123456789012345678]",
        "[\"a\",true,false,null,1]",
        "[\"é😀\"]",
      })
  void compact_keys_are_written_as_they_came(String key) {
    assertTrue(Json.compactKey(utf8(key)), key);
  }

  @ParameterizedTest
  @ValueSource(
      strings = {
        "",
        "[",
        "[ 1]",
        "[1, 2]",
        "[-0]", // orjson writes 0
        "[01]",
        "[1234567890123456789]", // 19 digits: written again by the Python loop
        "[1.5]",
        "[1e3]",
        "[\"a\\\"b\"]", // escapes are written again
        "[\"\\u00e9\"]",
        "[[1]]",
        "[{}]",
        "{}",
        "[1]x",
        "[1,]",
      })
  void other_keys_are_left_to_the_python_loop(String key) {
    assertFalse(Json.compactKey(utf8(key)), key);
  }
}
