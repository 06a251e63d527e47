package dev.highwater.sink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.Test;

/**
 * The delivery options, progress rows and progress records as the Python side writes them
 * (tests/golden/boundary.json, written by tests/unit/test_boundary_golden.py from
 * pipeline/core/batch/boundary.py's models and the ledger's ProgressRecord), read by {@link
 * Delivery#parse}, {@link ProgressRow#parse} and {@link Progress#parse}: each field must be read
 * as the golden's {@code fields} say it was meant; and {@link Progress#value} writes the records
 * Python writes.
 */
class BoundaryTest {
  static final ObjectMapper JSON = new ObjectMapper();

  static JsonNode golden() throws IOException {
    String path = System.getProperty("highwater.boundary");
    if (path == null) {
      throw new IllegalStateException("the highwater.boundary system property names the file");
    }
    return JSON.readTree(Path.of(path).toFile());
  }

  static String text(JsonNode node) {
    return node.isNull() ? null : node.asText();
  }

  @Test
  void the_delivery_keys_are_the_ones_python_declares() throws IOException {
    JsonNode keys = golden().get("delivery").get("keys");
    assertEquals(keys.get("prefix").asText(), Delivery.PREFIX);
    assertEquals(keys.get("mode").asText(), Delivery.MODE);
    assertEquals(keys.get("ids").asText(), Delivery.IDS);
    assertEquals(keys.get("progress_topic").asText(), Delivery.TOPIC);
    assertEquals(keys.get("generation").asText(), Delivery.GENERATION);
    assertEquals(keys.get("kind").asText(), Delivery.KIND);
    assertEquals(keys.get("scan_time").asText(), Delivery.SCAN_TIME);
  }

  @Test
  void extra_headers_are_what_python_names_and_writes() throws IOException {
    JsonNode declared = golden().get("extra_headers");
    assertEquals(declared.get("interceptor").asText(), ExtraHeaders.class.getName());
    assertEquals(declared.get("config").asText(), ExtraHeaders.CONFIG);
    Map<String, String> settings = new HashMap<>();
    declared
        .get("settings")
        .fields()
        .forEachRemaining(e -> settings.put(e.getKey(), e.getValue().asText()));
    assertTrue(settings.get("interceptor.classes").endsWith("," + ExtraHeaders.class.getName()));
    ExtraHeaders interceptor = new ExtraHeaders();
    interceptor.configure(settings);
    List<String> expected = new ArrayList<>();
    declared.get("headers").forEach(h -> expected.add(h.get(0).asText() + "=" + h.get(1).asText()));
    assertEquals(
        expected, ExtraHeadersTest.names(interceptor.onSend(new ProducerRecord<>("t", new byte[0]))));
  }

  @Test
  void delivery_reads_each_of_pythons_options_as_meant() throws IOException {
    JsonNode examples = golden().get("delivery").get("examples");
    assertEquals(2, examples.size());
    for (JsonNode example : examples) {
      String name = example.get("name").asText();
      JsonNode fields = example.get("fields");
      Map<String, String> options = new HashMap<>();
      example
          .get("options")
          .fields()
          .forEachRemaining(e -> options.put(e.getKey(), e.getValue().asText()));
      Delivery d = Delivery.parse(options);
      assertEquals(fields.get("ids").asText(), d.ids, name);
      assertEquals(fields.get("progress_topic").asText(), d.progressTopic, name);
      assertEquals(fields.get("generation").asLong(), d.generation, name);
      assertEquals(fields.get("kind").asText(), d.kind, name);
      assertEquals(text(fields.get("scan_time")), d.scanTime, name);
      assertTrue(Delivery.kafka(options).isEmpty(), name); // Spark's Kafka writer sees none
    }
  }

  @Test
  void progress_rows_are_read_as_the_python_loop_and_scan_meant_them() throws IOException {
    JsonNode rows = golden().get("progress_rows");
    assertEquals(5, rows.size());
    for (JsonNode example : rows) {
      String name = example.get("name").asText();
      JsonNode fields = example.get("fields");
      boolean begins = fields.get("begins").asBoolean();
      ProgressRow row = ProgressRow.parse(example.get("text").asText(), begins);
      assertEquals(begins, row.begins(), name);
      assertEquals(fields.get("abandon").asBoolean(), row.abandon(), name);
      assertEquals(text(fields.get("topic")), row.topic(), name);
      assertEquals(fields.get("partition").asInt(), row.partition(), name);
      assertEquals(fields.get("first").asLong(), row.first(), name);
      assertEquals(fields.get("next_offset").asLong(), row.nextOffset(), name);
      assertEquals(text(fields.get("resolved")), row.resolved(), name);
      if (fields.get("position").isNull()) {
        assertTrue(row.position() == null || row.position().isNull(), name);
      } else {
        assertEquals(fields.get("position"), row.position(), name);
      }
    }
  }

  @Test
  void progress_records_are_read_and_written_as_python_reads_and_writes_them()
      throws IOException {
    JsonNode records = golden().get("progress_records");
    assertEquals(4, records.size());
    for (JsonNode example : records) {
      String name = example.get("name").asText();
      JsonNode fields = example.get("fields");
      byte[] written = example.get("text").asText().getBytes(StandardCharsets.UTF_8);
      Progress progress = Progress.parse(written);
      assertEquals(fields.get("next_offset").asLong(), progress.nextOffset, name);
      assertEquals(fields.get("generation").asLong(), progress.generation, name);
      assertEquals(text(fields.get("time")), progress.time, name);
      if (progress.nextOffset < 0) {
        continue; // a claim's of nothing yet: the driver's alone
      }
      byte[] value =
          Progress.value(
              fields.get("topic").asText(),
              fields.get("partition").asInt(),
              fields.get("next_offset").asLong(),
              text(fields.get("resolved")),
              fields.get("position").isNull() ? null : fields.get("position"),
              fields.get("generation").asLong(),
              text(fields.get("time")));
      ObjectNode python = (ObjectNode) JSON.readTree(written);
      if (python.get("time").isNull()) {
        python.remove("time"); // Java leaves out a stream's time (Python reads it as null)
      }
      assertEquals(python, JSON.readTree(value), name);
    }
  }
}
