package dev.highwater.encoding;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
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
}
