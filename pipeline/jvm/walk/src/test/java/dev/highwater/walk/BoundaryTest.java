package dev.highwater.walk;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;

/**
 * The walk's and the scan's plans as the Python side writes them (tests/golden/boundary.json,
 * written by tests/unit/test_boundary_golden.py from pipeline/core/batch/boundary.py's models),
 * read by {@link Walk}'s and {@link Scan}'s own constructors: each field must be read as the
 * golden's {@code fields} say it was meant.
 */
class BoundaryTest {
  static JsonNode golden() throws IOException {
    String path = System.getProperty("highwater.boundary");
    if (path == null) {
      throw new IllegalStateException("the highwater.boundary system property names the file");
    }
    return new ObjectMapper().readTree(Path.of(path).toFile());
  }

  static long[] longs(JsonNode array) {
    long[] out = new long[array.size()];
    for (int k = 0; k < out.length; k++) {
      out[k] = array.get(k).asLong();
    }
    return out;
  }

  static Set<String> names(JsonNode object) {
    Set<String> names = new HashSet<>();
    object.fieldNames().forEachRemaining(names::add);
    return names;
  }

  /** {@code actual} holds exactly {@code expected}'s keys, each with its numbers. */
  static void assertLongs(JsonNode expected, Map<String, long[]> actual, String what) {
    assertEquals(names(expected), actual.keySet(), what);
    expected
        .fields()
        .forEachRemaining(
            e -> assertArrayEquals(longs(e.getValue()), actual.get(e.getKey()), what + e.getKey()));
  }

  @Test
  void the_walk_reads_each_plan_as_python_meant_it() throws IOException {
    JsonNode plans = golden().get("walk_plans");
    assertEquals(2, plans.size());
    for (JsonNode plan : plans) {
      String name = plan.get("name").asText() + ": ";
      JsonNode fields = plan.get("fields");
      Walk walk = new Walk(plan.get("text").asText(), new int[5], null);
      JsonNode routes = fields.get("routes");
      assertEquals(names(routes), walk.routes.keySet(), name);
      routes
          .fields()
          .forEachRemaining(
              e -> {
                String what = name + e.getKey() + ": ";
                Walk.Route route = walk.routes.get(e.getKey());
                JsonNode expected = e.getValue();
                assertEquals(expected.get("topic").asText(), route.topic, what + "topic");
                assertNotNull(route.encoding, what + "encoding");
                assertEquals(
                    expected.get("debezium").asBoolean(), route.debezium, what + "debezium");
                assertEquals(expected.get("canal").asBoolean(), route.rows, what + "canal");
                assertEquals(expected.get("counted").asBoolean(), route.counted, what + "counted");
                assertLongs(expected.get("commits"), route.commits, what + "commits ");
              });
      assertLongs(fields.get("thresholds"), walk.thresholds, name + "thresholds ");
      assertLongs(fields.get("positions"), walk.positions, name + "positions ");
      long[] floor = longs(fields.get("new_partition_floor"));
      assertArrayEquals(floor, walk.newPartitionFloor, name + "new partition floor");
      assertEquals(fields.get("room").asInt(), walk.room, name + "room");
    }
  }

  @Test
  void the_scan_reads_each_plan_as_python_meant_it() throws IOException {
    JsonNode plans = golden().get("scan_plans");
    assertEquals(2, plans.size());
    for (JsonNode plan : plans) {
      String name = plan.get("name").asText();
      JsonNode fields = plan.get("fields");
      Scan scan = new Scan(plan.get("text").asText(), new int[4], null);
      assertEquals(fields.get("source").asText(), scan.source, name);
      assertEquals(fields.get("partition").asInt(), scan.partition, name);
      assertEquals(fields.get("first").asLong(), scan.first, name);
      assertEquals(fields.get("end").asLong(), scan.end, name);
      assertEquals(fields.get("topic").asText(), scan.topic, name);
      List<String> members = new ArrayList<>();
      fields.get("members").forEach(m -> members.add(m.asText()));
      assertEquals(members, scan.envelope.members(), name);
      assertArrayEquals(longs(fields.get("statement_time")), scan.statement, name);
      if (fields.get("end_time").isNull()) {
        assertNull(scan.endTime, name);
      } else {
        assertArrayEquals(longs(fields.get("end_time")), scan.endTime, name);
      }
      assertEquals(fields.get("changes").asBoolean(), scan.changes, name);
      assertEquals(fields.get("room").asInt(), scan.room, name);
    }
  }
}
