package dev.highwater.sink;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.clients.producer.ProducerRecord;

/**
 * A kept producer's transaction on trial ({@link Pieces}): until Kafka took one of its records,
 * what the task did under it (pieces begun, records sent, pieces ended) is kept, to do again
 * under the id opened anew if Kafka answers that the producer was fenced.
 */
final class Trial {
  /** One thing the task did under the producer on trial. */
  sealed interface Step permits Begin, Send, End {}

  /** A piece begun ({@link Pieces#begin}). */
  record Begin(String topic, int partition, long first) implements Step {}

  /** One of its records sent ({@link Pieces#send}). */
  record Send(ProducerRecord<byte[], byte[]> record) implements Step {}

  /** The piece ended ({@link Pieces#end}). */
  record End(long nextOffset, String resolved, JsonNode position) implements Step {}

  private boolean on;
  private List<Step> steps = new ArrayList<>();
  private long bytes;

  /** A transaction starts: on trial ({@code on}: its producer was kept) or not. */
  void start(boolean on) {
    end();
    this.on = on;
  }

  boolean on() {
    return on;
  }

  /** One more step done on trial (none kept when not on trial). */
  void add(Step step) {
    if (!on) {
      return;
    }
    steps.add(step);
    if (step instanceof Send send) {
      bytes += Opening.size(send.record());
    }
  }

  /** Whether the records kept are as many bytes as a piece may hold waiting. */
  boolean full() {
    return bytes >= Opening.WAITING_BYTES;
  }

  /** The trial is over (settled, or its steps are done again): the steps it kept. */
  List<Step> end() {
    List<Step> kept = steps;
    on = false;
    steps = new ArrayList<>();
    bytes = 0;
    return kept;
  }
}
