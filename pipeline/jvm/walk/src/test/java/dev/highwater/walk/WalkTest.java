package dev.highwater.walk;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/** The walk's markers and partition summaries (read by pipeline/core/walk.py). */
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
    Walk.Seen seen = new Walk.Seen("src", 3, null, new long[] {5, 1}, 0);
    seen.end = 10;
    seen.emitted = 4;
    seen.duplicates = 2;
    seen.bytes = 99;
    assertEquals(
        "{\"transactions\":{},\"topic\":\"src\",\"partition\":3,\"next_offset\":10,"
            + "\"resolved\":null,\"emitted\":4,\"duplicates\":2,\"bad\":0,\"first_bad\":null,"
            + "\"bytes\":99,\"position\":null,\"resent\":0,\"deferred\":null,"
            + "\"schema_change\":null}",
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
            + "\"schema_change\":null}",
        seen.summary(new ObjectMapper()));
  }

  @Test
  void times_compare_by_wall_then_logical() {
    assertEquals(-1, Walk.compare(new long[] {1, 9}, new long[] {2, 0}));
    assertEquals(1, Walk.compare(new long[] {2, 1}, new long[] {2, 0}));
    assertEquals(0, Walk.compare(new long[] {2, 1}, new long[] {2, 1}));
  }
}
