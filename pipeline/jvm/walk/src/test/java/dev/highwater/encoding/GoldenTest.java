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
  /**
   * Debezium's events to Avro output: each the Python loop writes (alone) and the walk takes
   * comes out byte for byte; those it leaves to the loop are not taken. {@code taken}: per
   * encoding, how many the walk takes (under key_only the loop writes the keys of values that
   * do not fit the table; the walk, which reads them as for any envelope, leaves them to it).
   */
  @Test
  void debezium_events_to_avro_are_written_as_the_python_loop_writes_them() throws IOException {
    int[] taken = {14, 14, 14};
    int e = 0;
    for (JsonNode encoding : Golden.read().get("debezium_avro")) {
      Encoding avro = Encoding.of(encoding.get("walk"), "out", "debezium");
      assertTrue(avro instanceof AvroOut);
      Encoding.Encoded out = new Encoding.Encoded(); // reused, as a task reuses it
      int took = 0;
      for (JsonNode record : encoding.get("records")) {
        String what = encoding.get("name").asText() + ": " + record.get("value").asText();
        boolean took1 =
            avro.encode(utf8(record.get("key").asText()), utf8(record.get("value").asText()), out);
        if (record.get("loop_only").asBoolean()) {
          assertFalse(took1, what);
        } else if (took1) {
          assertRecord(record.get("rows").get(0), out.key, out.value, what);
          took++;
        }
      }
      assertEquals(taken[e++], took, encoding.get("name").asText());
    }
    assertEquals(3, e);
  }

  /** Canal-JSON's events to Avro output: each row as the loop writes it, taken whole or not. */
  @Test
  void canal_events_to_avro_are_written_row_by_row_as_the_python_loop_writes_them()
      throws IOException {
    int[] rows = {7, 9, 9}; // every member: diff reads old's extra, a column the table lacks
    int e = 0;
    for (JsonNode encoding : Golden.read().get("canal_avro")) {
      Encoding avro = Encoding.of(encoding.get("walk"), "out", "canal-json");
      Encoding.Encoded out = new Encoding.Encoded();
      int written = 0;
      for (JsonNode record : encoding.get("records")) {
        String what = encoding.get("name").asText() + ": " + record.get("value").asText();
        boolean took = avro.encode(new byte[0], utf8(record.get("value").asText()), out);
        if (record.get("loop_only").asBoolean()) {
          assertFalse(took, what);
          continue;
        }
        if (!took) {
          continue; // key_only: a value that does not fit (counted below)
        }
        JsonNode marker = record.get("marker");
        assertEquals(marker.isNull() ? null : marker.asText(),
            out.marker == null ? null : Hlc.text(out.marker), what);
        assertEquals(record.get("rows").size(), out.rowKeys.size(), what);
        for (int k = 0; k < out.rowKeys.size(); k++) {
          assertRecord(record.get("rows").get(k), out.rowKeys.get(k), out.rowValues.get(k), what);
          written++;
        }
      }
      assertEquals(rows[e++], written, encoding.get("name").asText());
    }
    assertEquals(3, e);
  }

  /** A record's key and value (hex; a null value: a tombstone) as the golden file has them. */
  private static void assertRecord(JsonNode expected, byte[] key, byte[] value, String what) {
    assertEquals(expected.get(0).asText(), Golden.hex(key), what);
    if (expected.get(1).isNull()) {
      assertNull(value, what);
    } else {
      assertEquals(expected.get(1).asText(), Golden.hex(value), what);
    }
  }
}
