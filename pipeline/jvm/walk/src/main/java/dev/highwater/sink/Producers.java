package dev.highwater.sink;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerConfig;

/**
 * The transactional producers an executor keeps between batches under exactly-once delivery,
 * one per transactional id (a task's: its first source partition's): a task takes its id's, a
 * new one is opened only for an id this executor did not write under in this run. A producer
 * remembers what it committed of each partition, so a kept one needs no progress read for
 * them. One of an earlier run (its
 * generation) is never reused: that run's claim fenced it. A failed task's producer is closed,
 * not kept; producers no task used for {@link #IDLE_NANOS} are closed.
 */
final class Producers {
  static long IDLE_NANOS = 10L * 60 * 1_000_000_000L; // ten minutes (tests shorten it)

  /** A transactional producer kept by an executor, and what it last knew to be committed. */
  static final class Held {
    final String id;
    final long generation; // the run it was opened for: a later run's claim fenced it
    final Producer<byte[], byte[]> producer;
    // each partition's committed progress (by progress key) as this producer last read or
    // committed it; a partition missing is read before the task writes it
    final Map<String, Progress> committed = new HashMap<>();
    boolean inUse;
    long released; // System.nanoTime() when last released
    // System.nanoTime() when its next transaction was begun, its partitions added (Priming);
    // 0: none begun
    long primed;
    long taken; // System.nanoTime() when a piece last took it (0: none yet)
    long gap; // from the piece before's taking to the last one's (0: one piece so far)

    Held(String id, long generation, Producer<byte[], byte[]> producer) {
      this.id = id;
      this.generation = generation;
      this.producer = producer;
    }
  }

  private static final Map<String, Held> HELD = new HashMap<>(); // guarded by itself

  private Producers() {}

  /** The producer this executor kept for {@code id} in this run, taken; or null. */
  static Held reuse(String id, long generation) {
    evictIdle();
    Held stale = null;
    synchronized (HELD) {
      Held kept = HELD.get(id);
      if (kept != null && !kept.inUse && kept.generation == generation) {
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
    return null;
  }

  /** A new producer for {@code id} (run {@code generation}), transactions initialized, kept. */
  static Held open(Pieces.Kafka kafka, Map<String, Object> config, String id, long generation) {
    Map<String, Object> settings = new HashMap<>(config);
    settings.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, id);
    Producer<byte[], byte[]> producer = kafka.open(settings);
    try {
      producer.initTransactions(); // fences every other holder of the id, ends its transaction
    } catch (RuntimeException e) {
      producer.close(Duration.ZERO);
      throw e;
    }
    Held fresh = new Held(id, generation, producer);
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

  /** Gives {@code held} back: kept ({@code ok}) or closed (a failed task's, or a fenced one). */
  static void release(Held held, boolean ok) {
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

  /** Drops every kept producer and progress reader (tests). */
  static void forget() {
    synchronized (HELD) {
      HELD.values().forEach(h -> h.producer.close(Duration.ZERO));
      HELD.clear();
    }
    ProgressReader.evictIdle(0);
  }
}
