package dev.highwater.encoding;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/** The encodings write, byte for byte, what the Python loop writes (tests/golden/walk.json). */
class GoldenTest {
  private static final Pattern UPDATED = Pattern.compile("\"updated\"\\s*:\\s*\"([^\"]*)\"");

  static byte[] utf8(String text) {
    return text.getBytes(StandardCharsets.UTF_8);
  }

  /** The time a source value's updated member holds, as its text. */
  static String updated(String value) {
    Matcher m = UPDATED.matcher(value);
    assertTrue(m.find(), value);
    return m.group(1);
  }

  @Test
  void avro_writes_the_python_loops_bytes() throws IOException {
    JsonNode encodings = Golden.read().get("avro");
    assertEquals(3, encodings.size());
    int checked = 0;
    for (JsonNode encoding : encodings) {
      Encoding avro = Encoding.of(encoding.get("walk"), encoding.get("topic").asText());
      assertTrue(avro instanceof Avro);
      Encoding.Encoded out = new Encoding.Encoded(); // reused, as a task reuses it
      for (JsonNode record : encoding.get("records")) {
        String what = encoding.get("name").asText() + ": " + record.get("value").asText();
        byte[] value = utf8(record.get("value").asText());
        assertTrue(avro.encode(utf8(record.get("key").asText()), value, out), what);
        assertEquals(record.get("out_key").asText(), Golden.hex(out.key), what);
        if (record.get("out_value").isNull()) {
          assertNull(out.value, what);
        } else {
          assertEquals(record.get("out_value").asText(), Golden.hex(out.value), what);
        }
        assertEquals(updated(record.get("value").asText()), Hlc.text(out.ts), what);
        checked++;
      }
    }
    assertEquals(66, checked);
  }

  @Test
  void verbatim_passes_the_records_on_as_they_came_with_their_time() throws IOException {
    JsonNode verbatim = Golden.read().get("verbatim");
    Encoding encoding = Encoding.of(verbatim.get("walk"), "out");
    assertTrue(encoding instanceof Verbatim);
    Encoding.Encoded out = new Encoding.Encoded();
    JsonNode records = verbatim.get("records");
    assertEquals(6, records.size());
    for (JsonNode record : records) {
      byte[] key = utf8(record.get("key").asText());
      byte[] value = utf8(record.get("value").asText());
      assertTrue(encoding.encode(key, value, out), record.toString());
      assertSame(key, out.key);
      assertSame(value, out.value);
      assertEquals(updated(record.get("value").asText()), Hlc.text(out.ts), record.toString());
    }
  }

  @Test
  void debezium_events_are_written_as_the_python_loop_writes_them() throws IOException {
    JsonNode debezium = Golden.read().get("debezium");
    Encoding encoding = Encoding.of(debezium.get("walk"), "out", "debezium");
    assertTrue(encoding instanceof Debezium);
    Encoding.Encoded out = new Encoding.Encoded(); // reused, as a task reuses it
    JsonNode records = debezium.get("records");
    assertEquals(20, records.size());
    for (JsonNode record : records) {
      String what = record.get("value").asText();
      if (record.path("loop_only").asBoolean()) { // a snapshot's read: the Python loop times it
        assertFalse(encoding.encode(utf8(record.get("key").asText()), utf8(what), out), what);
        continue;
      }
      assertTrue(
          encoding.encode(utf8(record.get("key").asText()), utf8(what), out), what);
      assertEquals(record.get("out_key").asText(), new String(out.key, StandardCharsets.UTF_8));
      String value = record.get("out_value").asText();
      assertEquals(value, new String(out.value, StandardCharsets.UTF_8), what);
      assertEquals(updated(value), Hlc.text(out.ts), what);
    }
  }

  @Test
  void canal_events_are_written_row_by_row_as_the_python_loop_writes_them() throws IOException {
    JsonNode canal = Golden.read().get("canal");
    Encoding encoding = Encoding.of(canal.get("walk"), "out", "canal-json");
    assertTrue(encoding instanceof Canal);
    Encoding.Encoded out = new Encoding.Encoded();
    int rows = 0;
    for (JsonNode record : canal.get("records")) {
      String what = record.get("value").asText();
      assertTrue(encoding.encode(new byte[0], utf8(what), out), what);
      JsonNode marker = record.get("marker");
      assertEquals(marker.isNull() ? null : marker.asText(),
          out.marker == null ? null : Hlc.text(out.marker), what);
      assertEquals(record.get("rows").size(), out.rowKeys.size(), what);
      for (int k = 0; k < out.rowKeys.size(); k++) {
        JsonNode row = record.get("rows").get(k);
        assertEquals(row.get(0).asText(), new String(out.rowKeys.get(k), StandardCharsets.UTF_8));
        assertEquals(row.get(1).asText(), new String(out.rowValues.get(k), StandardCharsets.UTF_8));
        rows++;
      }
    }
    assertEquals(7, rows);
  }
}
