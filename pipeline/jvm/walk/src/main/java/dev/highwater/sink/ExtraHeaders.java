package dev.highwater.sink;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.producer.ProducerInterceptor;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;

/**
 * The changefeed's fixed headers ({@code sink.extra_headers}, CockroachDB's {@code
 * extra_headers}) on every record its rows' producers send.
 *
 * <p>One place for every way rows are written (the walk and the Python loop's rows, at least
 * and exactly once, the initial scan): each of their producers is made from Spark's Kafka
 * writer options, which name this interceptor ({@code interceptor.classes}) and the headers
 * ({@link #CONFIG}: a JSON object of names to string values, in order). A record's own
 * headers come first (a dead letter's reason and source), then these, each value its UTF-8.
 */
public final class ExtraHeaders implements ProducerInterceptor<byte[], byte[]> {
  /** The producer setting holding the headers, a JSON object (names to strings). */
  public static final String CONFIG = "highwater.extra.headers";

  private List<Header> headers = List.of();

  @Override
  public void configure(Map<String, ?> configs) {
    Object text = configs.get(CONFIG);
    headers = text == null ? List.of() : parse(text.toString());
  }

  /** The headers of {@code json}, a JSON object of names to strings, in its order. */
  static List<Header> parse(String json) {
    JsonNode object;
    try {
      object = new ObjectMapper().readTree(json);
    } catch (IOException e) {
      throw new UncheckedIOException("not a JSON object of headers: " + CONFIG, e);
    }
    if (object == null || !object.isObject()) {
      throw new IllegalArgumentException(CONFIG + " must be a JSON object of header names");
    }
    List<Header> out = new ArrayList<>();
    for (Iterator<Map.Entry<String, JsonNode>> it = object.fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> e = it.next();
      if (!e.getValue().isTextual()) {
        throw new IllegalArgumentException(CONFIG + "." + e.getKey() + " must be a string");
      }
      out.add(new RecordHeader(e.getKey(), e.getValue().asText().getBytes(StandardCharsets.UTF_8)));
    }
    return List.copyOf(out);
  }

  /**
   * {@code record} with the headers after its own, as a new record: the one given is left as
   * it was (a producer on trial sends its kept records again, {@link Trial}).
   */
  @Override
  public ProducerRecord<byte[], byte[]> onSend(ProducerRecord<byte[], byte[]> record) {
    if (headers.isEmpty()) {
      return record;
    }
    List<Header> all = new ArrayList<>(headers.size() + 2);
    for (Header h : record.headers()) {
      all.add(h);
    }
    all.addAll(headers);
    return new ProducerRecord<>(
        record.topic(),
        record.partition(),
        record.timestamp(),
        record.key(),
        record.value(),
        all);
  }

  @Override
  public void onAcknowledgement(RecordMetadata metadata, Exception exception) {}

  @Override
  public void close() {}
}
