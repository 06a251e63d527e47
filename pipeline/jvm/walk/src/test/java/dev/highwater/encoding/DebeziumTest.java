package dev.highwater.encoding;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.junit.jupiter.api.Test;

/**
 * What the Debezium reading takes and what it leaves to the Python loop (its bytes against the
 * Python loop's: GoldenTest; against the whole loop on Spark: tests/spark).
 */
class DebeziumTest {
  private static final String KEY = "{\"id\":7}";
  private static final String EVENT =
      "{\"before\":null,\"after\":{\"id\":7,\"d\":\"AeJA\"},\"source\":{\"connector\":\"postgresql\","
          + "\"ts_ms\":1700000000123,\"ts_us\":1700000000123456,\"snapshot\":\"false\","
          + "\"sequence\":\"[\\\"24023900\\\",\\\"24023984\\\"]\",\"lsn\":24023984},"
          + "\"transaction\":{\"id\":\"771:24023984\",\"total_order\":1},\"op\":\"c\"}";

  /** The event with a schema: its after image's d a decimal of scale 2. */
  private static String schemad(String event) {
    return "{\"schema\":{\"type\":\"struct\",\"fields\":[{\"field\":\"after\",\"fields\":["
        + "{\"field\":\"id\",\"type\":\"int32\"},{\"field\":\"d\",\"type\":\"bytes\","
        + "\"name\":\"org.apache.kafka.connect.data.Decimal\",\"parameters\":{\"scale\":\"2\"}}]}]},"
        + "\"payload\":"
        + event
        + "}";
  }

  private static final Encoding DEBEZIUM =
      new Debezium(
          new byte[][] {bytes("after"), bytes("before"), bytes("updated")},
          Map.of("0-1-42", new long[] {1700000001000000000L, 0}));

  private static byte[] bytes(String text) {
    return text.getBytes(StandardCharsets.UTF_8);
  }

  private static Encoding.Encoded encode(String key, String value) {
    Encoding.Encoded out = new Encoding.Encoded();
    return DEBEZIUM.encode(bytes(key), bytes(value), out) ? out : null;
  }

  @Test
  void a_postgresql_change_gives_its_position_and_its_transactions_place() {
    Encoding.Encoded out = encode(KEY, EVENT);
    assertArrayEquals(new long[] {24023900, 24023984}, out.position);
    assertEquals("771", out.tx); // <xid>:<lsn>: the xid names the transaction
    assertEquals(24023984, out.within);
    assertEquals("[7]", new String(out.key, StandardCharsets.UTF_8));
    // below the microsecond: the LSN's distance from the last commit's, around the middle
    assertEquals("1700000000123456500.0000000084", Hlc.text(out.ts));
  }

  @Test
  void with_a_schema_values_are_read_by_their_semantic_types() {
    Encoding.Encoded out = encode(KEY, schemad(EVENT));
    assertEquals(
        "{\"after\":{\"id\":7,\"d\":1234.56},\"before\":null,"
            + "\"updated\":\"1700000000123456500.0000000084\"}",
        new String(out.value, StandardCharsets.UTF_8));
  }

  /** A MariaDB event of transaction {@code tx} (or none) at binlog file 3, pos 4000, row 1. */
  private static String binlog(String tx) {
    return EVENT
        .replace("\"connector\":\"postgresql\"", "\"connector\":\"mariadb\",\"file\":\"mysql-bin.000003\"")
        .replace("\"lsn\":24023984", "\"pos\":4000,\"row\":1")
        .replace("\"transaction\":{\"id\":\"771:24023984\",", tx == null ? "\"transaction\":null,\"x\":{" : "\"transaction\":{\"id\":\"" + tx + "\",");
  }

  @Test
  void a_binlog_change_is_timed_by_its_transactions_end_when_the_driver_read_it() {
    Encoding.Encoded out = encode(KEY, binlog("0-1-42"));
    assertArrayEquals(new long[] {3, 4000, 1}, out.position);
    assertEquals("0-1-42", out.tx);
    assertEquals(4000 * 100_000 + 1, out.within);
    // within the END's millisecond: the file's last digits (3) and the position
    assertEquals("1700000001000000001.2884905888", Hlc.text(out.ts)); // 3 * 2^32 + 4000
    Encoding.Encoded waiting = encode(KEY, binlog("0-1-43")); // its END not read yet
    assertNull(waiting.ts);
    assertNull(waiting.value);
    assertEquals("0-1-43", waiting.tx);
    Encoding.Encoded alone = encode(KEY, binlog(null)); // no transaction metadata
    assertNull(alone.tx);
    assertEquals("1700000000123456001.2884905888", Hlc.text(alone.ts)); // the statement's
  }

  @Test
  void a_snapshot_read_is_timed_by_the_python_loop_from_what_its_partition_passed() {
    // debezium.py's snapshot_read: Debezium's own time for a read is not its snapshot's point
    assertNull(encode(KEY, EVENT.replace("\"op\":\"c\"", "\"op\":\"r\"")));
    String mariadb = EVENT.replace("\"connector\":\"postgresql\"", "\"connector\":\"mariadb\"");
    assertNull(encode(KEY, mariadb.replace("\"op\":\"c\"", "\"op\":\"r\"")));
  }

  @Test
  void another_connectors_snapshot_read_has_no_position_nor_transaction() {
    String other = EVENT.replace("\"connector\":\"postgresql\"", "\"connector\":\"sqlserver\"");
    Encoding.Encoded out = encode(KEY, other.replace("\"op\":\"c\"", "\"op\":\"r\""));
    assertNull(out.position);
    assertNull(out.tx);
    assertEquals("1700000000123456000.0000000000", Hlc.text(out.ts));
  }

  /** Records the Python loop decides: its reading differs, or it names them bad. */
  @ParameterizedTest
  @ValueSource(
      strings = {
        "\"connector\":\"postgresql\"=>\"connector\":\"mysql\"", // a binlog's, with no place
        "\"op\":\"c\"=>\"\\u006fp\":\"c\"", // a name spelled with escapes
        "\"op\":\"c\"=>\"op\":\"c\",\"op\":\"u\"", // a member twice
        "\"op\":\"c\"=>\"op\":\"t\"", // a truncate
        "\"before\":null=>\"before\":[]", // an image that is no object
        "\"op\":\"c\"=>\"op\":\"d\"", // a delete with an after image
        "AeJA=>AeJ=", // stray bits: not base64's canonical spelling
        "AeJA=>AeJ", // unpadded: Python refuses it
        "AeJA=>Ae-A", // not base64's alphabet
        "\"ts_us\":1700000000123456=>\"ts_us\":1.7e15", // a clock that is no integer
        "\\\"24023900\\\",=>", // a sequence of one LSN
        "\"snapshot\":\"false\"=>\"snapshot\":0", // 0 == False to Python
        "\"id\":\"771:24023984\"=>\"id\":\"\\u0037\"", // an id with escapes
        "{\"id\":7,=>{\"id\":7,\"id\":8,", // a column twice
        "\"sequence\"=>\"sequencing\"", // no place in PostgreSQL's history
      })
  void leaves_to_the_python_loop(String edit) {
    String[] parts = edit.split("=>", -1);
    String event = EVENT.replace(parts[0], parts[1]);
    assertTrue(!event.equals(EVENT), edit);
    assertNull(encode(KEY, schemad(event)), event);
  }

  @Test
  void leaves_keys_and_envelopes_it_does_not_read_to_the_python_loop() {
    assertNull(encode("{\"id\":7,\"id\":8}", EVENT)); // a key field twice
    assertNull(encode("{}", EVENT)); // a key of no fields
    assertNull(encode("[7]", EVENT));
    assertNull(encode(KEY, "{\"schema\":null,\"payload\":null}")); // a tombstone spelled out
    assertNull(encode(KEY, EVENT + " x"));
    assertFalse(encode(KEY, "{\"schema\":null,\"payload\":" + EVENT + "}") == null);
  }
}
