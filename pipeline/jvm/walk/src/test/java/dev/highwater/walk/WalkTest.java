package dev.highwater.walk;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** The walk's markers and partition summaries (read by pipeline/core/batch/walk.py). */
class WalkTest {
  static final String T = "1700000000000000001.0000000042";

  static long[] marker(String text) {
    return Walk.marker(text.getBytes(StandardCharsets.UTF_8));
  }

  @Test
  void a_marker_is_a_resolved_time_and_nothing_else() {
    long[] ts = {1700000000000000001L, 42};
    assertArrayEquals(ts, marker("{\"resolved\":\"" + T + "\"}"));
    assertArrayEquals(ts, marker(" { \"resolved\" : \"" + T + "\" } "));
  }

  @ParameterizedTest
  @ValueSource(
      strings = {
        "{\"resolved\":\"1700000000000000001\"}", // a time written otherwise
        "{\"resolved\":1700000000000000001}",
        "{\"resolved\":\"T\",\"more\":1}",
        "{\"resolved\":\"T\"} x",
        "{\"\\u0072esolved\":\"T\"}",
        "{\"Resolved\":\"T\"}",
        "{}",
        "[]",
        "",
      })
  void anything_else_is_left_to_the_python_loop(String text) {
    assertNull(marker(text.replace("\"T\"", "\"" + T + "\"")), text);
  }

  @Test
  void the_summary_is_the_declared_one_with_times_as_the_python_loop_reads_them() {
    Seen seen = new Seen("src", 3, null, new long[] {5, 1}, null, 0);
    seen.end = 10;
    seen.emitted = 4;
    seen.duplicates = 2;
    seen.bytes = 99;
    assertEquals(
        "{\"transactions\":{},\"topic\":\"src\",\"partition\":3,\"next_offset\":10,"
            + "\"resolved\":null,\"emitted\":4,\"duplicates\":2,\"bad\":0,\"first_bad\":null,"
            + "\"bytes\":99,\"position\":null,\"resent\":0,\"deferred\":null,"
            + "\"schema_change\":null,\"reread\":null}",
        seen.summary(new ObjectMapper()));
    seen.resolved = new long[] {1700000000000000001L, 42};
    seen.deferred = 7;
    seen.deferredFloor = new long[] {6, 0};
    assertEquals(
        "{\"transactions\":{},\"topic\":\"src\",\"partition\":3,\"next_offset\":7,"
            + "\"resolved\":\""
            + T
            + "\",\"emitted\":4,\"duplicates\":2,\"bad\":0,\"first_bad\":null,\"bytes\":99,"
            + "\"position\":null,\"resent\":0,\"deferred\":[7,10,\"6.0000000000\",null],"
            + "\"schema_change\":null,\"reread\":null}",
        seen.summary(new ObjectMapper()));
  }

  @Test
  void a_debezium_summary_carries_the_position_and_each_transactions_places_and_times() {
    Seen seen = new Seen("pg", 0, null, new long[] {0, 0}, new long[] {1, 2}, 0);
    seen.saw("771", 30, new long[] {5, 3});
    seen.saw("771", 20, new long[] {5, 2});
    seen.saw("772", 40, new long[] {6, 0});
    seen.latest = new long[] {3, 40};
    seen.resent = 2;
    assertEquals(
        "{\"transactions\":{\"771\":[[30,20],\"5.0000000002\",\"5.0000000003\"],"
            + "\"772\":[[40],\"6.0000000000\",\"6.0000000000\"]},\"topic\":\"pg\","
            + "\"partition\":0,\"next_offset\":0,\"resolved\":null,\"emitted\":0,"
            + "\"duplicates\":0,\"bad\":0,\"first_bad\":null,\"bytes\":0,"
            + "\"position\":[3,40],\"resent\":2,\"deferred\":null,\"schema_change\":null,"
            + "\"reread\":null}",
        seen.summary(new ObjectMapper()));
  }

  @Test
  void positions_compare_element_by_element_then_the_longer() {
    assertEquals(-1, Walk.compare(new long[] {1, 9}, new long[] {2, 0, 0}));
    assertEquals(1, Walk.compare(new long[] {2, 0, 1}, new long[] {2, 0}));
  }

  @Test
  void times_compare_by_wall_then_logical() {
    assertEquals(-1, Walk.compare(new long[] {1, 9}, new long[] {2, 0}));
    assertEquals(1, Walk.compare(new long[] {2, 1}, new long[] {2, 0}));
    assertEquals(0, Walk.compare(new long[] {2, 1}, new long[] {2, 1}));
  }
}
