package dev.highwater.sink;

import java.io.Serializable;
import java.util.HashMap;
import java.util.Map;
import org.apache.spark.SparkContext;
import org.apache.spark.util.LongAccumulator;
import scala.Option;

/**
 * How a changefeed's rows are delivered: {@code at_least_once} (no instance of this class) or
 * {@code exactly_once}, whose settings travel in the writer options under {@code highwater.}
 * (pipeline/core/batch/boundary.py declares them: DeliveryOptions; Spark's option checks never
 * see them). tests/golden/boundary.json holds the keys and examples, which BoundaryTest reads.
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
  static final String KIND = PREFIX + "piece.kind";
  static final String SCAN_TIME = PREFIX + "scan.time";

  final String ids; // transactional id prefix, e.g. highwater-<changefeed>
  final String progressTopic;
  final long generation;
  final String kind; // rows (the stream's) or scan (an initial scan's chunks)
  final String scanTime; // scan: the snapshot's time (a chunk is done for that scan only)
  // the write's transactions, failed tasks' too (null: not counted, in tests)
  final LongAccumulator committed;
  final LongAccumulator aborted;
  // kept producers found fenced at a piece's start and opened anew (Pieces: on trial)
  final LongAccumulator reopened;

  Delivery(String ids, String progressTopic, long generation) {
    this(ids, progressTopic, generation, "rows", null, null, null, null);
  }

  Delivery(String ids, String progressTopic, long generation, String kind, String scanTime) {
    this(ids, progressTopic, generation, kind, scanTime, null, null, null);
  }

  private Delivery(
      String ids,
      String progressTopic,
      long generation,
      String kind,
      String scanTime,
      LongAccumulator committed,
      LongAccumulator aborted,
      LongAccumulator reopened) {
    this.ids = ids;
    this.progressTopic = progressTopic;
    this.generation = generation;
    this.kind = kind;
    this.scanTime = scanTime;
    this.committed = committed;
    this.aborted = aborted;
    this.reopened = reopened;
  }

  /** This write's counts: transactions committed, aborted ({0, 0} at least once). */
  public static long[] counts(Delivery delivery) {
    if (delivery == null || delivery.committed == null) {
      return new long[] {0, 0};
    }
    return new long[] {delivery.committed.value(), delivery.aborted.value()};
  }

  /** A counter of one write's transactions, on the driver; a failed task's count too. */
  private static LongAccumulator counter(String name) {
    LongAccumulator counter = new LongAccumulator();
    counter.register(SparkContext.getOrCreate(), Option.apply(name), true);
    return counter;
  }

  /**
   * The delivery {@code options} ask for, for a write on the driver: null for at least once;
   * exactly once with its counters registered with the running SparkContext.
   */
  public static Delivery of(Map<String, String> options) {
    Delivery d = parse(options);
    if (d == null) {
      return null;
    }
    return new Delivery(
        d.ids,
        d.progressTopic,
        d.generation,
        d.kind,
        d.scanTime,
        counter("highwater transactions committed"),
        counter("highwater transactions aborted"),
        counter("highwater producers reopened"));
  }

  /** The delivery {@code options} ask for (not counted): null for at least once. */
  static Delivery parse(Map<String, String> options) {
    String mode = options.getOrDefault(MODE, "at_least_once");
    if (mode.equals("at_least_once")) {
      return null;
    }
    if (!mode.equals("exactly_once")) {
      throw new IllegalArgumentException(MODE + ": unknown delivery " + mode);
    }
    String kind = options.getOrDefault(KIND, "rows");
    if (!kind.equals("rows") && !kind.equals("scan")) {
      throw new IllegalArgumentException(KIND + ": unknown piece kind " + kind);
    }
    String scanTime = kind.equals("scan") ? required(options, SCAN_TIME) : null;
    return new Delivery(
        required(options, IDS),
        required(options, TOPIC),
        Long.parseLong(required(options, GENERATION)),
        kind,
        scanTime);
  }

  /** {@code options} without ours: what Spark's Kafka writer checks. */
  public static Map<String, String> kafka(Map<String, String> options) {
    Map<String, String> kafka = new HashMap<>(options);
    kafka.keySet().removeIf(k -> k.startsWith(PREFIX));
    return kafka;
  }

  /** The transactional id of a source partition's writes of this kind. */
  String transactionalId(String topic, int partition) {
    return ids + "-" + kind + "-" + topic + "-" + partition;
  }

  /** Whether a piece from {@code first} was committed already, by what Kafka says is. */
  boolean committed(Progress progress, long first) {
    boolean sameScan = scanTime == null || scanTime.equals(progress.time);
    return sameScan && progress.nextOffset > first;
  }

  private static String required(Map<String, String> options, String key) {
    String value = options.get(key);
    if (value == null) {
      throw new IllegalArgumentException(key + " is required with exactly_once delivery");
    }
    return value;
  }

  /** One more (a Spark accumulator's add is not atomic: commits end on their own threads). */
  static void add(LongAccumulator counter) {
    if (counter != null) {
      synchronized (counter) {
        counter.add(1);
      }
    }
  }
}
