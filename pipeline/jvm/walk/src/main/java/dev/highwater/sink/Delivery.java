package dev.highwater.sink;

import java.io.Serializable;
import java.util.HashMap;
import java.util.Map;

/**
 * How a changefeed's rows are delivered: {@code at_least_once} (no instance of this class) or
 * {@code exactly_once}, whose settings travel in the writer options under {@code highwater.}
 * (pipeline/core/kafka_clients.py writes them; Spark's option checks never see them).
 *
 * <p>Exactly once: each source partition's rows of a batch are written in one Kafka transaction
 * with that partition's progress record ({@link Progress}), under a transactional id of the
 * changefeed and the source partition ({@link #transactionalId}), so that a retried or
 * speculative attempt, a restarted run and a second instance fence one another; the {@code
 * generation} (one per run, rising) tells a newer instance's claim from an older one's.
 */
public final class Delivery implements Serializable {
  private static final long serialVersionUID = 1L;
  static final String PREFIX = "highwater.";
  static final String MODE = PREFIX + "delivery";
  static final String IDS = PREFIX + "transactional.id.prefix";
  static final String TOPIC = PREFIX + "progress.topic";
  static final String GENERATION = PREFIX + "generation";

  final String ids; // transactional id prefix, e.g. highwater-<changefeed>
  final String progressTopic;
  final long generation;

  Delivery(String ids, String progressTopic, long generation) {
    this.ids = ids;
    this.progressTopic = progressTopic;
    this.generation = generation;
  }

  /** The delivery {@code options} ask for: null for at least once. */
  public static Delivery of(Map<String, String> options) {
    String mode = options.getOrDefault(MODE, "at_least_once");
    if (mode.equals("at_least_once")) {
      return null;
    }
    if (!mode.equals("exactly_once")) {
      throw new IllegalArgumentException(MODE + ": unknown delivery " + mode);
    }
    return new Delivery(
        required(options, IDS),
        required(options, TOPIC),
        Long.parseLong(required(options, GENERATION)));
  }

  /** {@code options} without ours: what Spark's Kafka writer checks. */
  public static Map<String, String> kafka(Map<String, String> options) {
    Map<String, String> kafka = new HashMap<>(options);
    kafka.keySet().removeIf(k -> k.startsWith(PREFIX));
    return kafka;
  }

  /** The transactional id of a source partition's stream writes. */
  String transactionalId(String topic, int partition) {
    return ids + "-rows-" + topic + "-" + partition;
  }

  private static String required(Map<String, String> options, String key) {
    String value = options.get(key);
    if (value == null) {
      throw new IllegalArgumentException(key + " is required with exactly_once delivery");
    }
    return value;
  }
}
