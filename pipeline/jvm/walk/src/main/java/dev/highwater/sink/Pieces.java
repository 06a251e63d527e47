package dev.highwater.sink;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.spark.TaskContext;

/**
 * One task's writes under exactly-once delivery ({@link Delivery}): each source partition's
 * piece of a batch (its rows in offset order, and its dead letters) in one Kafka transaction
 * that commits the partition's {@link Progress} last.
 *
 * <p>{@link #begin} takes the partition's transactional producer (kept per executor between
 * batches; a new one's {@code initTransactions} fences every other holder of the id and ends
 * its open transaction) and decides <b>write or skip</b>: a piece whose first offset is below
 * the committed next offset was committed already (an earlier attempt of this task), so its
 * rows are walked again for the summary but not sent; a progress record of a newer generation
 * means a newer instance claimed the partition, and this one stops. A piece with no row
 * commits nothing. Any failure aborts the open transaction and closes the producer, so a retry
 * starts from what Kafka committed.
 */
public final class Pieces implements AutoCloseable {
  static final String TAKEN = "another instance of this changefeed took over its writes";

  /** Where producers and committed progress come from (Kafka; tests give their own). */
  interface Kafka {
    Producer<byte[], byte[]> open(Map<String, Object> config);

    /** The latest committed progress of {@code key} (in {@code slot}), or null. */
    Progress read(String key, int slot) throws IOException;
  }

  /** A transactional producer kept by an executor, and what it last knew to be committed. */
  static final class Held {
    final String id;
    final long generation; // the run it was opened for: a later run's claim fenced it
    final Producer<byte[], byte[]> producer;
    Progress committed; // null until read
    boolean inUse;
    long released; // System.nanoTime() when last released

    Held(String id, long generation, Producer<byte[], byte[]> producer) {
      this.id = id;
      this.generation = generation;
      this.producer = producer;
    }
  }

  private static final Map<String, Held> HELD = new HashMap<>(); // guarded by itself
  private static final Set<String> FAULTED = ConcurrentHashMap.newKeySet();
  static long IDLE_NANOS = 10L * 60 * 1_000_000_000L; // ten minutes (tests shorten it)
  private static final long SLOW_COMMIT_MS = 20_000L;

  private final Delivery delivery;
  private final Map<String, Object> config;
  private final Kafka kafka;
  private final int slots;
  private final long answerMillis;
  private Held held;
  private String topic;
  private int partition;
  private boolean skip;
  private boolean open;
  private Sink.Acks acks;

  Pieces(Delivery delivery, Map<String, Object> config, Kafka kafka, int slots) {
    this.delivery = delivery;
    this.config = config;
    this.kafka = kafka;
    this.slots = slots;
    this.answerMillis = Sink.deliveryTimeout(config) + 30_000L;
  }

  /** A task's pieces on the cluster of {@code producer} (Spark's Kafka writer settings). */
  public static Pieces of(Delivery delivery, Map<String, Object> producer) {
    Map<String, Object> config = new HashMap<>(producer);
    Object timeout = config.get(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG);
    // how long another partition's open transaction may hold a progress read back
    long transactionTimeout = (timeout == null ? 60_000L : Long.parseLong(timeout.toString()))
        + 15_000L;
    config.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
    config.put(ProducerConfig.ACKS_CONFIG, "all");
    // initTransactions always retries once (its InitProducerId waits for the coordinator's
    // lookup) and sleeps retry.backoff.ms first: 100 ms of Kafka's default, per partition of a
    // run; from 10 ms, retries still back off exponentially (retry.backoff.max.ms)
    config.putIfAbsent(ProducerConfig.RETRY_BACKOFF_MS_CONFIG, "10");
    Kafka kafka =
        new Kafka() {
          @Override
          public Producer<byte[], byte[]> open(Map<String, Object> settings) {
            return new KafkaProducer<>(settings);
          }

          @Override
          public Progress read(String key, int slot) throws IOException {
            return ProgressReader.read(config, delivery.progressTopic, slot, key, transactionTimeout);
          }
        };
    return new Pieces(delivery, config, kafka, slots(config, delivery.progressTopic));
  }

  private static final Map<String, Integer> SLOTS = new HashMap<>(); // guarded by itself

  /** The progress topic's partitions (looked up once per executor). */
  private static int slots(Map<String, Object> config, String topic) {
    synchronized (SLOTS) {
      Integer known = SLOTS.get(topic);
      if (known != null) {
        return known;
      }
    }
    int slots;
    try (Producer<byte[], byte[]> probe = new KafkaProducer<>(withoutId(config))) {
      slots = probe.partitionsFor(topic).size();
    }
    synchronized (SLOTS) {
      SLOTS.put(topic, slots);
    }
    return slots;
  }

  private static Map<String, Object> withoutId(Map<String, Object> config) {
    Map<String, Object> c = new HashMap<>(config);
    c.remove(ProducerConfig.TRANSACTIONAL_ID_CONFIG);
    return c;
  }

  /** The piece of {@code topic}/{@code partition} whose first record is at {@code first}. */
  public void begin(String topic, int partition, long first) throws IOException {
    if (held != null) {
      throw new IllegalStateException("piece of " + this.topic + "/" + this.partition + " open");
    }
    this.topic = topic;
    this.partition = partition;
    String id = delivery.transactionalId(topic, partition);
    held = acquire(id);
    try {
      if (held.committed == null) { // a new producer: Kafka says what is committed
        String key = Progress.key(delivery.kind, topic, partition);
        Progress read = kafka.read(key, Progress.slot(key, slots));
        held.committed = read == null ? new Progress(-1, 0) : read;
      }
      if (held.committed.generation > delivery.generation) {
        throw new IOException(
            TAKEN
                + ": source partition "
                + where()
                + " was claimed by run generation "
                + held.committed.generation
                + " (this run is generation "
                + delivery.generation
                + ")");
      }
      skip = delivery.committed(held.committed, first);
    } catch (IOException | RuntimeException e) {
      close();
      throw e;
    }
  }

  /** Whether the open piece's rows are sent (false: committed already by an earlier attempt). */
  public boolean writing() {
    return !skip;
  }

  /** One of the open piece's records. */
  public void send(ProducerRecord<byte[], byte[]> record) throws IOException {
    if (skip) {
      return;
    }
    try {
      if (!open) {
        held.producer.beginTransaction();
        acks = new Sink.Acks();
        open = true;
      }
      acks.send(held.producer, record);
    } catch (KafkaException e) {
      throw failed(e);
    }
  }

  /**
   * The piece ends where the partition's next batch starts ({@code nextOffset}, the floor
   * {@code resolved} there): its progress record, then the commit; returns once committed.
   */
  public void end(long nextOffset, String resolved, JsonNode position)
      throws IOException, InterruptedException {
    try {
      if (open) {
        String key = Progress.key(delivery.kind, topic, partition);
        byte[] value =
            Progress.value(
                topic,
                partition,
                nextOffset,
                resolved,
                position,
                delivery.generation,
                delivery.scanTime);
        acks.send(
            held.producer,
            new ProducerRecord<>(
                delivery.progressTopic,
                Progress.slot(key, slots),
                key.getBytes(StandardCharsets.UTF_8),
                value));
        fault("slow_commit");
        held.producer.commitTransaction();
        open = false;
        if (delivery.committed != null) {
          delivery.committed.add(1);
        }
        acks.await(answerMillis);
        held.committed = new Progress(nextOffset, delivery.generation, delivery.scanTime);
        fault("after_commit");
      }
    } catch (KafkaException e) {
      throw failed(e);
    }
    release(held, true);
    held = null;
  }

  /** Ends the task's use: an open piece's transaction is aborted (a failed task's). */
  @Override
  public void close() {
    if (held == null) {
      return;
    }
    if (open) {
      try {
        held.producer.abortTransaction();
      } catch (RuntimeException e) {
        // fenced or broken: closing the producer is what is left; the next holder aborts it
      }
      open = false;
      if (delivery.aborted != null) {
        delivery.aborted.add(1);
      }
    }
    release(held, false);
    held = null;
  }

  private IOException failed(KafkaException e) {
    if (fenced(e)) {
      return new IOException(
          TAKEN
              + " (or another attempt of this task did, or the transaction outlived"
              + " transaction.timeout.ms and its coordinator aborted it): source partition "
              + where()
              + ", transactional id "
              + held.id
              + ": "
              + e,
          e);
    }
    return new IOException("writing to Kafka failed: " + e, e);
  }

  private static boolean fenced(Throwable e) {
    for (Throwable t = e; t != null; t = t.getCause()) {
      if (t instanceof ProducerFencedException || t instanceof InvalidProducerEpochException) {
        return true;
      }
    }
    return false;
  }

  private String where() {
    return topic + "/" + partition;
  }

  private Held acquire(String id) {
    evictIdle();
    Held stale = null;
    synchronized (HELD) {
      Held kept = HELD.get(id);
      if (kept != null && !kept.inUse && kept.generation == delivery.generation) {
        kept.inUse = true;
        return kept;
      }
      if (kept != null && !kept.inUse) { // an earlier run's, here (fenced by this run's claim)
        HELD.remove(id);
        stale = kept;
      }
    }
    if (stale != null) {
      stale.producer.close(Duration.ZERO);
    }
    Map<String, Object> settings = new HashMap<>(config);
    settings.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, id);
    Producer<byte[], byte[]> producer = kafka.open(settings);
    try {
      producer.initTransactions(); // fences every other holder of the id, ends its transaction
    } catch (RuntimeException e) {
      producer.close(Duration.ZERO);
      throw e;
    }
    Held fresh = new Held(id, delivery.generation, producer);
    fresh.inUse = true;
    synchronized (HELD) {
      HELD.put(id, fresh); // one in use by another attempt here is fenced; it closes on release
    }
    return fresh;
  }

  /**
   * Closes the producers no task used for {@link #IDLE_NANOS} (a partition this executor no
   * longer gets, a changefeed that stopped): each holds a network thread and its buffer.
   */
  static void evictIdle() {
    List<Held> idle = new ArrayList<>();
    long now = System.nanoTime();
    synchronized (HELD) {
      HELD.values()
          .removeIf(
              h -> {
                boolean old = !h.inUse && now - h.released > IDLE_NANOS;
                if (old) {
                  idle.add(h);
                }
                return old;
              });
    }
    idle.forEach(h -> h.producer.close(Duration.ofSeconds(5)));
    ProgressReader.evictIdle(IDLE_NANOS);
  }

  private static void release(Held held, boolean ok) {
    synchronized (HELD) {
      boolean kept = HELD.get(held.id) == held;
      if (ok && kept) {
        held.inUse = false;
        held.released = System.nanoTime();
        return;
      }
      if (kept) {
        HELD.remove(held.id);
      }
    }
    held.producer.close(Duration.ofSeconds(5));
  }

  /** The producers kept (tests). */
  static int kept() {
    synchronized (HELD) {
      return HELD.size();
    }
  }

  /** Drops every kept producer (tests). */
  static void forget() {
    synchronized (HELD) {
      HELD.values().forEach(h -> h.producer.close(Duration.ZERO));
      HELD.clear();
    }
    ProgressReader.evictIdle(0);
    FAULTED.clear();
  }

  /**
   * Tests' fault points, {@code HIGHWATER_TASK_FAULT=<point>[,<point>]}, each reached once per
   * executor, by a task's first attempt: {@code after_commit} fails the task after its commit,
   * before it reports; {@code slow_commit} holds the commit back 20 s, past a short {@code
   * transaction.timeout.ms} and the coordinator's sweep of timed-out transactions (10 s), so
   * the coordinator aborts it first.
   */
  private static void fault(String point) throws IOException, InterruptedException {
    String asked = System.getenv("HIGHWATER_TASK_FAULT");
    if (asked == null || !Arrays.asList(asked.split(",")).contains(point)) {
      return;
    }
    TaskContext task = TaskContext.get();
    if (task == null || task.attemptNumber() != 0 || !FAULTED.add(point)) {
      return;
    }
    System.err.println("fault injected " + point + " (HIGHWATER_TASK_FAULT)");
    if (point.equals("slow_commit")) {
      Thread.sleep(SLOW_COMMIT_MS);
      return;
    }
    throw new IOException("fault injected " + point + " (HIGHWATER_TASK_FAULT)");
  }
}
