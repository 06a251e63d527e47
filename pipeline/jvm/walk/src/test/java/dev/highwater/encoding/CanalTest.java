package dev.highwater.encoding;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** What the Canal-JSON reading leaves to the Python loop (its bytes: GoldenTest). */
class CanalTest {
  private static final String EVENT =
      "{\"pkNames\":[\"id\"],\"isDdl\":false,\"type\":\"INSERT\",\"mysqlType\":{\"id\":\"int\","
          + "\"n\":\"decimal(10,2)\",\"s\":\"text\"},\"data\":[{\"id\":\"1\",\"n\":\"1.50\","
          + "\"s\":\"x\"}],\"old\":null,\"_tidb\":{\"commitTs\":445800000000000000}}";
  private static final Encoding CANAL =
      new Canal(new byte[][] {bytes("after"), bytes("before"), bytes("updated")});

  private static byte[] bytes(String text) {
    return text.getBytes(StandardCharsets.UTF_8);
  }

  @ParameterizedTest
  @ValueSource(
      strings = {
        "\"n\":\"1.50\"=>\"n\":1.50", // a numeric column's value not text: a bad record
        "\"n\":\"1.50\"=>\"n\":\"1,50\"", // text that spells no number
        "\"n\":\"1.50\"=>\"n\":\"\\u0031\"", // escaped: the Python side reads \"1\"
        "[\"id\"]=>[\"key\"]", // no such column
        "[\"id\"]=>[]", // no primary key
        "\"data\":[{\"id\":\"1\",=>\"data\":[{\"id\":\"1\",\"id\":\"2\",", // a column twice
        "\"type\":\"INSERT\"=>\"type\":\"UPDATE\"", // an update without old rows
        "\"decimal(10,2)\"=>\"d\\u00e9cimal\"", // a type with escapes
        "\"type\"=>\"typ\\u0065\"", // an escaped name
        "445800000000000000=>-1", // no TSO
        "\"_tidb\"=>\"_tidx\"", // no _tidb object
      })
  void leaves_to_the_python_loop(String edit) {
    String[] parts = edit.split("=>", -1);
    String event = EVENT.replace(parts[0], parts[1]);
    assertTrue(!event.equals(EVENT), edit);
    assertFalse(CANAL.encode(new byte[0], bytes(event), new Encoding.Encoded()), event);
    assertTrue(CANAL.encode(new byte[0], bytes(EVENT), new Encoding.Encoded()));
  }

  /**
   * A row's columns are matched to the last row's at their places (CanalRow's shortcut): the
   * same reading, event after event, when the order or the types change under the same names.
   */
  @Test
  void each_row_is_read_by_its_own_columns_and_types() {
    Encoding canal = new Canal(new byte[][] {bytes("after"), bytes("updated")});
    Encoding.Encoded out = new Encoding.Encoded();
    assertTrue(canal.encode(new byte[0], bytes(EVENT), out));
    assertEquals("{\"after\":{\"id\":1,\"n\":1.50,\"s\":\"x\"}", after(out));
    String turned = EVENT.replace("{\"id\":\"1\",\"n\":\"1.50\",\"s\":\"x\"}",
        "{\"s\":\"x\",\"n\":\"1.50\",\"id\":\"1\"},{\"id\":\"2\",\"n\":\"2\"}");
    assertTrue(canal.encode(new byte[0], bytes(turned), out));
    assertEquals("{\"after\":{\"s\":\"x\",\"n\":1.50,\"id\":1}", after(out));
    assertEquals("{\"after\":{\"id\":2,\"n\":2}", after(out, 1));
    String twice = EVENT.replace("\"s\":\"x\"}", "\"s\":\"x\",\"n\":\"3\"}");
    assertFalse(canal.encode(new byte[0], bytes(twice), out), twice);
    // the same names, n now text: its value as it came, then a number again by the first's
    String text = EVENT.replace("decimal(10,2)", "text").replace("\"1.50\"", "\"1,50\"");
    assertTrue(canal.encode(new byte[0], bytes(text), out));
    assertEquals("{\"after\":{\"id\":1,\"n\":\"1,50\",\"s\":\"x\"}", after(out));
    assertFalse(canal.encode(new byte[0], bytes(EVENT.replace("\"1.50\"", "\"1,50\"")), out));
    assertTrue(canal.encode(new byte[0], bytes(EVENT), out));
    assertEquals("{\"after\":{\"id\":1,\"n\":1.50,\"s\":\"x\"}", after(out));
  }

  private static String after(Encoding.Encoded out) {
    return after(out, 0);
  }

  /** Row {@code k}'s envelope up to its after's end. */
  private static String after(Encoding.Encoded out, int k) {
    String value = new String(out.rowValues.get(k), StandardCharsets.UTF_8);
    return value.substring(0, value.indexOf('}') + 1);
  }
}
