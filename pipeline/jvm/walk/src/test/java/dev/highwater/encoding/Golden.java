package dev.highwater.encoding;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.nio.file.Path;

/**
 * tests/golden/walk.json: source records and the bytes the Python loop writes for them
 * (written by tests/unit/test_walk_golden.py, which checks the Python side against it).
 */
final class Golden {
  private Golden() {}

  static JsonNode read() throws IOException {
    String path = System.getProperty("highwater.golden");
    if (path == null) {
      throw new IllegalStateException("the highwater.golden system property names the file");
    }
    return new ObjectMapper().readTree(Path.of(path).toFile());
  }

  static String hex(byte[] b) {
    StringBuilder out = new StringBuilder(b.length * 2);
    for (byte x : b) {
      out.append(Character.forDigit((x >> 4) & 0xf, 16)).append(Character.forDigit(x & 0xf, 16));
    }
    return out.toString();
  }
}
