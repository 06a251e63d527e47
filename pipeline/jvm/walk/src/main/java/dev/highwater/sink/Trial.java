package dev.highwater.sink;

import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.clients.producer.ProducerRecord;

/**
 * A kept producer's piece on trial ({@link Pieces}): until Kafka took one of its records, the
 * records sent so far are kept, to send again under the id opened anew if Kafka answers that
 * the producer was fenced.
 */
final class Trial {
  private boolean on;
  private List<ProducerRecord<byte[], byte[]>> tried = new ArrayList<>();
  private long bytes;

  /** A piece starts: on trial ({@code on}: its producer was kept) or not. */
  void start(boolean on) {
    end();
    this.on = on;
  }

  boolean on() {
    return on;
  }

  /** One more record sent on trial. */
  void add(ProducerRecord<byte[], byte[]> record) {
    tried.add(record);
    bytes += Opening.size(record);
  }

  /** Whether the records kept are as many bytes as a piece may hold waiting. */
  boolean full() {
    return bytes >= Opening.WAITING_BYTES;
  }

  /** The trial is over (settled, or its records go again): the records it kept. */
  List<ProducerRecord<byte[], byte[]>> end() {
    List<ProducerRecord<byte[], byte[]>> kept = tried;
    on = false;
    tried = new ArrayList<>();
    bytes = 0;
    return kept;
  }
}
