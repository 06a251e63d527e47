package dev.highwater.encoding;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.Random;
import org.junit.jupiter.api.Test;

/**
 * An image's columns read by their compiled ops ({@link AvroImage#read}) as reading their types
 * ({@link AvroJson#read}) writes them, byte for byte, and taken exactly when that takes them:
 * {@code [T, null]} as well as {@code [null, T]}, and a union's branch number written in more
 * bytes than one (Avro's varints allow it; AvroConverter writes one byte), which the compiled
 * ops hand to the general reading. AvroEventTest holds whole events, of AvroConverter's shapes.
 */
class AvroImageTest {
  private static final String[] TYPES = {
    "['string','null']", "['null','string']", "['long','null']", "['null','int']",
    "['boolean','null']", "'string'", "'long'", "'boolean'"
  };

  @Test
  void every_union_order_and_branch_spelling_is_read_as_its_type_reads_it() throws Exception {
    StringBuilder fields = new StringBuilder();
    Connect.Column[] columns = new Connect.Column[TYPES.length];
    for (int k = 0; k < TYPES.length; k++) {
      fields.append(k > 0 ? "," : "").append("{'name':'c").append(k).append("','type':").append(TYPES[k]).append('}');
      columns[k] = new Connect.Column(("c" + k).getBytes(StandardCharsets.UTF_8), Connect.Kind.KEEP, 0);
    }
    String schema = "{'type':'record','name':'Row','fields':[" + fields + "]}";
    AvroJson.Node record = AvroJson.parse(new ObjectMapper().readTree(schema.replace('\'', '"')));
    AvroImage image = AvroImage.of(record, columns);
    assertNotNull(image);
    long seed = System.nanoTime();
    Random random = new Random(seed);
    int taken = 0;
    for (int n = 0; n < 20_000; n++) {
      byte[] b = datum(random);
      Encoding.Buffer expected = new Encoding.Buffer();
      int[] at = {0};
      boolean read = AvroJson.read(record, b, at, expected, 2) && at[0] == b.length;
      Encoding.Buffer actual = new Encoding.Buffer();
      int[] from = {0};
      boolean compiled = image.read(b, from, actual, new Encoding.Buffer()) && from[0] == b.length;
      String where = java.util.HexFormat.of().formatHex(b) + " (seed " + seed + ")";
      assertEquals(read, compiled, where);
      if (read) {
        taken++;
        assertEquals(text(expected), text(actual), where);
      }
    }
    assertEquals(true, taken > 10_000, "taken: " + taken);
  }

  /** One datum of the row: each column's branch now and then spelled long, or one not there. */
  private static byte[] datum(Random r) {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    for (String type : TYPES) {
      boolean union = type.startsWith("[");
      int nullAt = type.startsWith("['null'") ? 0 : 1;
      boolean isNull = union && r.nextInt(3) == 0;
      if (union) {
        int branch = isNull ? nullAt : 1 - nullAt;
        int spelling = r.nextInt(40);
        if (spelling == 0) {
          out.write(0x80 | (2 * branch)); // the same number in two bytes
          out.write(0);
        } else if (spelling == 1) {
          out.write(4); // branch 2: there is none
        } else {
          out.write(2 * branch);
        }
      }
      if (isNull) {
        continue;
      }
      String value = union ? type.replace("'null'", "").replaceAll("[\\[\\],']", "") : type.replace("'", "");
      switch (value) {
        case "string":
          byte[] text = (r.nextBoolean() ? "plain text, eight+" : "\"é\\\u0001").getBytes(StandardCharsets.UTF_8);
          out.write(2 * text.length);
          out.write(text, 0, text.length);
          break;
        case "boolean":
          out.write(r.nextInt(20) == 0 ? 2 : r.nextInt(2)); // 2: not a boolean
          break;
        default: // long, int: a zig-zag varint, beyond an int now and then
          long v = r.nextInt(10) == 0 ? r.nextLong() : r.nextInt(1000) - 500;
          long z = (v << 1) ^ (v >> 63);
          while ((z & ~0x7fL) != 0) {
            out.write((int) ((z & 0x7f) | 0x80));
            z >>>= 7;
          }
          out.write((int) z);
      }
    }
    return out.toByteArray();
  }

  private static String text(Encoding.Buffer b) {
    return new String(b.bytes, 0, b.size, StandardCharsets.UTF_8);
  }
}
