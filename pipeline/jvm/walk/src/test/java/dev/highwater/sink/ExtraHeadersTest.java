package dev.highwater.sink;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.junit.jupiter.api.Test;

/**
 * The fixed headers go after a record's own, in the configured order, as UTF-8; the record
 * given is left as it was, so a record sent again (a producer on trial) gets them once.
 */
class ExtraHeadersTest {
  static ExtraHeaders configured(String json) {
    ExtraHeaders interceptor = new ExtraHeaders();
    interceptor.configure(json == null ? Map.of() : Map.of(ExtraHeaders.CONFIG, json));
    return interceptor;
  }

  static List<String> names(ProducerRecord<byte[], byte[]> record) {
    List<String> out = new ArrayList<>();
    for (Header h : record.headers()) {
      out.add(h.key() + "=" + new String(h.value(), StandardCharsets.UTF_8));
    }
    return out;
  }

  static ProducerRecord<byte[], byte[]> deadLetter() {
    return new ProducerRecord<>(
        "dlq",
        1,
        42L,
        new byte[] {1},
        new byte[] {2},
        List.of(new RecordHeader("highwater.error", "bad".getBytes(StandardCharsets.UTF_8))));
  }

  @Test
  void adds_the_headers_after_the_records_own_in_order() {
    ExtraHeaders interceptor = configured("{\"zone\": \"eu-west\", \"app\": \"örders ✓\"}");
    ProducerRecord<byte[], byte[]> given = deadLetter();
    ProducerRecord<byte[], byte[]> sent = interceptor.onSend(given);
    assertEquals(List.of("highwater.error=bad", "zone=eu-west", "app=örders ✓"), names(sent));
    assertEquals("dlq", sent.topic());
    assertEquals(1, sent.partition());
    assertEquals(42L, sent.timestamp());
    assertArrayEquals(new byte[] {1}, sent.key());
    assertArrayEquals(new byte[] {2}, sent.value());
    // the record given is untouched: sent again (a kept producer's replay), it gets them once
    assertEquals(List.of("highwater.error=bad"), names(given));
    // as the producer leaves a record it sent
    ((org.apache.kafka.common.header.internals.RecordHeaders) given.headers()).setReadOnly();
    assertEquals(3, names(interceptor.onSend(given)).size());
  }

  @Test
  void without_headers_the_record_goes_as_it_is() {
    ProducerRecord<byte[], byte[]> given = deadLetter();
    assertSame(given, configured(null).onSend(given));
    assertSame(given, configured("{}").onSend(given));
  }

  @Test
  void refuses_what_is_not_an_object_of_strings() {
    assertThrows(IllegalArgumentException.class, () -> configured("[\"zone\"]"));
    assertThrows(IllegalArgumentException.class, () -> configured("{\"zone\": 1}"));
    assertThrows(RuntimeException.class, () -> configured("{\"zone\": "));
  }
}
