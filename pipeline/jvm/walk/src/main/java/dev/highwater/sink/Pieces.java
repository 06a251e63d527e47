package dev.highwater.sink;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletionException;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One task's writes under exactly-once delivery ({@link Delivery}): its pieces (each source
 * partition's rows of the batch in offset order, and its dead letters, then the partition's
 * {@link Progress} record) in one Kafka transaction, under the transactional id of the task's
 * first source partition, committed when the task ends.
 *
 * <p><b>One transaction a task</b>: what exactly once costs over at least once is Kafka's per
 * transaction (adding its partitions, the commit's round trip, a commit marker in every
 * partition it wrote, replicated), so a task pays it once, not once per source partition.
 * Every attempt of a task has the same first piece, so the same id: a retried or speculative
 * attempt fences the others; another run's claim fences every partition's id, so every task's
 * (progress/claim.py). The transaction is committed between two pieces before the task's end
 * only when it is old (half of {@code transaction.timeout.ms}) or the next piece's partition
 * has to be read (a producer new to it): a read_committed read of the progress topic waits for
 * the open transactions in its partition, this task's own too.
 *
 * <p>{@link #begin} takes the id's producer (kept per executor between batches; a new one's
 * {@code initTransactions} fences every other holder of the id and ends its open transaction;
 * it opens while the first piece's records wait: {@link Opening}) and decides, piece by piece,
 * <b>write or skip</b>: a piece whose first offset is below the partition's committed next
 * offset was committed already (an earlier attempt of this task), so its rows are walked again
 * for the summary but not sent; a progress record of a newer generation means a newer
 * instance claimed the partition, and this one stops. A piece with no row writes nothing. Any
 * failure aborts the open transaction and closes the producer, so a retry starts from what
 * Kafka committed.
 *
 * <p><b>A kept producer is on trial</b> until Kafka took one of its transaction's records: the
 * task may have run on another executor since (Spark places a batch's tasks where a core is
 * free), whose new producer fenced this one. Kafka says so only when the producer next talks
 * to its coordinator, i.e. at the first records. Found fenced then, nothing was written (no
 * partition was added to the transaction): the producer is closed, the id opened anew ({@code
 * initTransactions}: it fences the other executor's, which meets the same at its next task)
 * and what the task did so far is done again under it ({@link Trial}), each piece's progress
 * read, so a piece the other executor committed is dropped. So a task moving between executors
 * costs an {@code initTransactions} and progress reads, not a failed task. A fence met once
 * Kafka took a record (a newer instance, or another attempt writing now) fails the task.
 */
public final class Pieces implements AutoCloseable {
  private static final Logger LOG = LoggerFactory.getLogger(Pieces.class);

  /** Where producers and committed progress come from (Kafka; tests give their own). */
  interface Kafka {
    Producer<byte[], byte[]> open(Map<String, Object> config);

    /** The latest committed progress of {@code key} (in {@code slot}), or null. */
    Progress read(String key, int slot) throws IOException;

    /**
     * Begins {@code producer}'s next transaction with {@code partitions} added ({@link
     * Priming}); false: nothing begun.
     */
    default boolean prime(Producer<byte[], byte[]> producer, Set<TopicPartition> partitions) {
      return Priming.begin(producer, partitions);
    }
  }

  private final Delivery delivery;
  private final Map<String, Object> config;
  private final Kafka kafka;
  private final int slots;
  private final long answerMillis;
  private final long primedNanos; // a primed transaction older is aborted before use
  private final long spanNanos; // a transaction older is committed at the next piece's start
  // the task's transaction
  private String id; // the task's transactional id: its first piece's partition's (null: none yet)
  private Producers.Held held; // the id's producer, once there
  private Opening opening; // it, while it opens (the first piece's records wait in it)
  private Sink.Acks acks; // the open transaction's records (null: none sent in it)
  private long started; // System.nanoTime() the open transaction began (was primed)
  private final Map<String, Progress> ending = new HashMap<>(); // its pieces' progress
  private final Trial trial = new Trial(); // a kept producer's, until Kafka took a record
  // the open piece
  private boolean piece;
  private String topic;
  private int partition;
  private long first;
  private boolean skip;
  private boolean wrote; // it sent a record

  Pieces(Delivery delivery, Map<String, Object> config, Kafka kafka, int slots) {
    this.delivery = delivery;
    this.config = config;
    this.kafka = kafka;
    this.slots = slots;
    this.answerMillis = Sink.deliveryTimeout(config) + 30_000L;
    // the coordinator times a transaction from its first partition: a piece in a primed one
    // has the rest of transaction.timeout.ms, at least nine tenths of it
    this.primedNanos = transactionTimeout(config) * 100_000L;
    this.spanNanos = transactionTimeout(config) * 500_000L;
  }

  /** The producers' transaction.timeout.ms (Kafka's default where unset). */
  static long transactionTimeout(Map<String, Object> config) {
    Object timeout = config.get(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG);
    return timeout == null ? 60_000L : Long.parseLong(timeout.toString());
  }

  /** A task's pieces on the cluster of {@code producer} (Spark's Kafka writer settings). */
  public static Pieces of(Delivery delivery, Map<String, Object> producer) {
    Map<String, Object> config = new HashMap<>(producer);
    // how long another task's open transaction may hold a progress read back
    long transactionTimeout = transactionTimeout(config) + 15_000L;
    config.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
    config.put(ProducerConfig.ACKS_CONFIG, "all");
    // initTransactions always retries once (its InitProducerId waits for the coordinator's
    // lookup) and sleeps retry.backoff.ms first: 100 ms of Kafka's default, per task of a
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
            return ProgressReader.read(
                config, delivery.progressTopic, slot, key, transactionTimeout);
          }
        };
    return new Pieces(delivery, config, kafka, ProgressReader.slots(config, delivery.progressTopic));
  }

  /**
   * The piece of {@code topic}/{@code partition} whose first record is at {@code first}. The
   * task's first piece names its id: a producer this executor kept for it is taken at once; a
   * new one is opened (and the partition's progress read) on another thread while the piece's
   * first records wait in memory ({@link Opening}), so the walk goes on meanwhile.
   */
  public void begin(String topic, int partition, long first)
      throws IOException, InterruptedException {
    if (piece) {
      throw new IllegalStateException("piece of " + this.topic + "/" + this.partition + " open");
    }
    if (id == null) {
      id = delivery.transactionalId(topic, partition);
    }
    if (held == null && opening == null) { // the task's first piece (or the first after abandon)
      Producers.Held kept = unprimeIfStale(Producers.reuse(id, delivery.generation));
      if (kept == null) {
        String key = Progress.key(delivery.kind, topic, partition);
        opening = Opening.start(() -> open(key));
        at(topic, partition, first);
        return;
      }
      take(kept);
      trial.start(true); // it may have been fenced since its last task (settle)
    }
    start(topic, partition, first);
    trial.add(new Trial.Begin(topic, partition, first));
  }

  /** The piece opened on the task's producer (there): write or skip decided. */
  private void start(String topic, int partition, long first)
      throws IOException, InterruptedException {
    String key = Progress.key(delivery.kind, topic, partition);
    // a read must not wait for this task's own transaction; an old one commits at a piece's edge
    while (acks != null
        && (!held.committed.containsKey(key) || System.nanoTime() - started > spanNanos)) {
      commit(); // on trial, found fenced: what it held was done again, its transaction open
    }
    at(topic, partition, first);
    decide(key);
  }

  /** The piece of {@code topic}/{@code partition} from {@code first} is the open one. */
  private void at(String topic, int partition, long first) {
    this.piece = true;
    this.topic = topic;
    this.partition = partition;
    this.first = first;
    this.skip = false;
    this.wrote = false;
  }

  /**
   * {@code kept}, its primed transaction aborted if it was begun so long ago that the task
   * would have too little of the transaction's timeout left; null (closed) if the abort
   * failed: fenced since, or its coordinator aborted it (the task opens the id anew).
   */
  private Producers.Held unprimeIfStale(Producers.Held kept) {
    if (kept == null || kept.primed == 0 || System.nanoTime() - kept.primed <= primedNanos) {
      return kept;
    }
    kept.primed = 0;
    try {
      kept.producer.abortTransaction(); // empty: no piece wrote in it
      return kept;
    } catch (KafkaException e) {
      Producers.release(kept, false);
      return null;
    }
  }

  /**
   * A new producer for the task's id, and the progress committed under {@code key} (on the
   * opening's thread; reads no field the task thread changes), or none read (null key).
   */
  private Producers.Held open(String key) {
    Producers.Held fresh = Producers.open(kafka, config, id, delivery.generation);
    try {
      if (key != null) {
        fresh.committed.put(key, read(key));
      }
      return fresh;
    } catch (IOException e) {
      Producers.release(fresh, false);
      throw new CompletionException(e);
    } catch (RuntimeException e) {
      Producers.release(fresh, false);
      throw e;
    }
  }

  private Progress read(String key) throws IOException {
    Progress read = kafka.read(key, Progress.slot(key, slots));
    return read == null ? new Progress(-1, 0) : read;
  }

  /** The task's producer is {@code taken}: when it was taken before (steady, for Priming). */
  private void take(Producers.Held taken) {
    held = taken;
    long now = System.nanoTime();
    held.gap = held.taken == 0 ? 0 : now - held.taken;
    held.taken = now;
  }

  /**
   * Write or skip the open piece on its partition's committed progress (read if the producer
   * does not know it; no transaction of this task holds it back); stop if a newer run took it.
   */
  private void decide(String key) throws IOException {
    Progress committed = held.committed.get(key);
    if (committed == null) {
      committed = read(key);
      held.committed.put(key, committed);
    }
    if (committed.generation > delivery.generation) {
      IOException e =
          new IOException(
              Fences.TAKEN
                  + ": source partition "
                  + where()
                  + " was claimed by run generation "
                  + committed.generation
                  + " (this run is generation "
                  + delivery.generation
                  + ")");
      close();
      throw e;
    }
    skip = delivery.committed(committed, first);
  }

  /**
   * Takes the producer being opened once it is there ({@code wait}: waits for it), and sends
   * the records that waited for it (or drops them: a committed piece's).
   */
  private void ready(boolean wait) throws IOException {
    if (opening == null || (!wait && !opening.done())) {
      return;
    }
    Opening opened = opening;
    opening = null;
    take(opened.take(where()));
    decide(Progress.key(delivery.kind, topic, partition));
    for (ProducerRecord<byte[], byte[]> record : opened.waiting()) {
      transmit(record);
    }
  }

  /** Whether the open piece's rows are sent (false: committed already by an earlier attempt). */
  public boolean writing() throws IOException {
    ready(true);
    return !skip;
  }

  /** One of the open piece's records. */
  public void send(ProducerRecord<byte[], byte[]> record) throws IOException {
    if (opening != null) {
      ready(opening.full());
      if (opening != null) {
        opening.hold(record);
        return;
      }
    }
    transmit(record);
  }

  private void transmit(ProducerRecord<byte[], byte[]> record) throws IOException {
    if (skip) {
      return;
    }
    if (trial.on()) { // (no step built per record when not on trial)
      trial.add(new Trial.Send(record));
    }
    try {
      if (acks == null) {
        if (held.primed == 0) {
          held.producer.beginTransaction();
          started = System.nanoTime();
        } else {
          started = held.primed;
        }
        held.primed = 0;
        acks = new Sink.Acks(true);
      }
      wrote = true;
      acks.send(held.producer, record); // raises a failure Kafka reported for an earlier one
    } catch (KafkaException | IOException e) {
      if (trial.on() && Fences.fenced(e)) {
        reopen();
        return;
      }
      throw e instanceof KafkaException k ? failed(k) : (IOException) e;
    }
    if (trial.on()) {
      settle(trial.full());
    }
  }

  /**
   * A kept producer on trial ({@link Pieces}): once Kafka took one of its records, it holds
   * the id and what the trial kept is dropped; found fenced, the id is opened anew ({@link
   * #reopen}). {@code wait}: waits for Kafka's first answer.
   */
  private void settle(boolean wait) throws IOException {
    if (!trial.on() || acks == null) {
      return;
    }
    try {
      if (wait && acks.failure() == null && !acks.tookOne()) {
        held.producer.flush();
        acks.awaitFirst(answerMillis);
      }
    } catch (KafkaException e) {
      if (!Fences.fenced(e)) {
        throw failed(e);
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IOException("interrupted while writing the piece of " + where(), e);
    }
    Exception e = acks.failure();
    if (e != null && Fences.fenced(e) && !acks.tookOne()) {
      reopen();
    } else if (e == null && acks.tookOne()) {
      trial.end();
    } // another failure: raised by the next send, or by the commit
  }

  /**
   * The kept producer was fenced before Kafka took any record of its transaction: closed, the
   * id opened anew, and what the task did under it done again (each piece's progress read: a
   * newer run's claim stops the task here, a piece committed meanwhile is dropped).
   */
  private void reopen() throws IOException {
    List<Trial.Step> steps = trial.end();
    Producers.Held fenced = held;
    held = null;
    acks = null; // its transaction never reached the coordinator: nothing to abort
    ending.clear();
    piece = false;
    Producers.release(fenced, false);
    LOG.info(
        "the producer this executor kept for {} was fenced (the task ran on another executor"
            + " since); opening it anew",
        id);
    Delivery.add(delivery.reopened);
    try {
      take(open(null));
    } catch (CompletionException e) {
      if (e.getCause() instanceof IOException io) {
        throw io;
      }
      throw e;
    }
    try {
      for (Trial.Step step : steps) {
        if (step instanceof Trial.Begin b) {
          start(b.topic(), b.partition(), b.first());
        } else if (step instanceof Trial.Send s) {
          transmit(s.record());
        } else if (step instanceof Trial.End e) {
          finish(e.nextOffset(), e.resolved(), e.position());
        }
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IOException("interrupted while writing the piece of " + where(), e);
    }
  }

  /**
   * The piece ends where the partition's next batch starts ({@code nextOffset}, the floor
   * {@code resolved} there): its progress record, in the task's transaction. The tests' kills
   * of the job ({@link CrashPoints}) are on either side of the transaction's commit.
   */
  public void end(long nextOffset, String resolved, JsonNode position)
      throws IOException, InterruptedException {
    if (!piece) {
      throw new IllegalStateException("no piece open");
    }
    ready(true);
    trial.add(new Trial.End(nextOffset, resolved, position));
    finish(nextOffset, resolved, position);
  }

  private void finish(long nextOffset, String resolved, JsonNode position)
      throws IOException, InterruptedException {
    if (!wrote) {
      piece = false;
      return; // committed already, or no row: nothing of it in the transaction
    }
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
    ProducerRecord<byte[], byte[]> progress =
        new ProducerRecord<>(
            delivery.progressTopic,
            Progress.slot(key, slots),
            key.getBytes(StandardCharsets.UTF_8),
            value);
    try {
      acks.send(held.producer, progress);
    } catch (KafkaException | IOException e) {
      if (!(trial.on() && Fences.fenced(e) && !acks.tookOne())) {
        throw e instanceof KafkaException k ? failed(k) : (IOException) e;
      }
      reopen(); // done again under the new producer, this end too
      return;
    }
    ending.put(key, new Progress(nextOffset, delivery.generation, delivery.scanTime));
    if (CrashPoints.armed(CrashPoints.IN_TRANSACTION)) {
      // the kill lands with the piece on the broker, uncommitted: flushed and answered
      try {
        held.producer.flush();
        acks.await(answerMillis);
      } catch (KafkaException e) {
        throw failed(e);
      }
      CrashPoints.reach(CrashPoints.IN_TRANSACTION);
    }
    piece = false; // (a failure leaves it open: the task's close aborts the transaction)
  }

  /**
   * Commits the open transaction (no piece open, or one about to begin): a kept producer on
   * trial first waits for Kafka's first answer, and found fenced does it all again under the id
   * opened anew (the transaction then open is the new producer's). Each piece's progress is
   * what the producer knows committed afterwards. Returns where its records went (none: nothing
   * was open).
   */
  private Set<TopicPartition> commit() throws IOException, InterruptedException {
    settle(true);
    if (acks == null) {
      return Set.of();
    }
    Sink.Acks answered = acks;
    try {
      TaskFaults.reach("slow_commit");
      held.producer.commitTransaction();
      Delivery.add(delivery.committed);
      answered.await(answerMillis);
    } catch (KafkaException e) {
      abortOpen();
      throw Fences.failed(e, where(), id);
    }
    acks = null;
    held.committed.putAll(ending);
    ending.clear();
    CrashPoints.reach(CrashPoints.PIECE_COMMITTED); // committed, not reported
    TaskFaults.reach("after_commit");
    return answered.partitions();
  }

  /**
   * Whether the task's id gets its tasks often enough that the next one likely comes while a
   * transaction primed now is fresh: primed and then aborted unused, a transaction costs more
   * than it saves (a slow trigger's task is not primed).
   */
  private boolean steady() {
    return held.gap > 0 && held.gap < primedNanos / 2;
  }

  /**
   * The piece is not done (an initial scan's chunk that met what stops the run: a bad record
   * with nowhere to divert it, a row its output schema cannot hold): the task's transaction is
   * aborted, so nothing of it is seen and the chunk runs again whole; the producer is kept.
   */
  public void abandon() throws IOException {
    ready(true);
    boolean wasTrial = trial.on();
    trial.end();
    piece = false;
    ending.clear();
    try {
      if (acks != null) {
        acks = null;
        held.producer.abortTransaction();
        Delivery.add(delivery.aborted);
      }
    } catch (KafkaException e) {
      if (!(wasTrial && Fences.fenced(e))) {
        throw failed(e);
      }
      // fenced before Kafka took any of it: nothing written; the producer is closed
      Producers.release(held, false);
      held = null;
      return;
    }
    Producers.release(held, true);
    held = null;
  }

  /**
   * Ends the task's use: a failed task's open piece aborts the transaction (and its pieces
   * ended before it: the retry writes them again); otherwise the transaction commits, and the
   * producer, kept, begins its next one with the partitions it wrote to added (a steady task:
   * {@link Priming}). A failed commit is thrown.
   */
  @Override
  public void close() {
    if (opening != null) { // a failed task's producer still opening: closed once it is open
      opening.cancel();
      opening = null;
    }
    if (held == null) {
      return;
    }
    if (piece) {
      abortOpen();
      return;
    }
    try {
      Set<TopicPartition> partitions = commit();
      if (!partitions.isEmpty() && steady() && kafka.prime(held.producer, partitions)) {
        held.primed = System.nanoTime(); // its next task's partitions added now
      }
    } catch (IOException e) {
      abortOpen();
      throw new UncheckedIOException(e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      abortOpen();
      throw new UncheckedIOException(new IOException("interrupted while committing", e));
    }
    Producers.release(held, true);
    held = null;
  }

  private void abortOpen() {
    trial.end();
    piece = false;
    ending.clear();
    if (held == null) {
      return;
    }
    if (acks != null) {
      acks = null;
      try {
        held.producer.abortTransaction();
      } catch (RuntimeException e) {
        // fenced or broken: closing the producer is what is left; the next holder aborts it
      }
      Delivery.add(delivery.aborted);
    }
    Producers.release(held, false);
    held = null;
  }

  private IOException failed(KafkaException e) {
    return Fences.failed(e, where(), id);
  }

  private String where() {
    return topic + "/" + partition;
  }

  /** Drops every kept producer and progress reader, and the faults reached (tests). */
  static void forget() {
    Producers.forget();
    TaskFaults.forget();
    CrashPoints.use(null);
  }
}
