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
 * One task's writes under exactly-once delivery ({@link Delivery}): each source partition's
 * piece of a batch (its rows in offset order, and its dead letters) in one Kafka transaction
 * that commits the partition's {@link Progress} last.
 *
 * <p>{@link #begin} takes the partition's transactional producer (kept per executor between
 * batches; a new one's {@code initTransactions} fences every other holder of the id and ends
 * its open transaction; it opens while the piece's first records wait: {@link Opening}, and a
 * piece that ends before it is there is finished once it is, while the task goes on to its
 * next piece, whose producer opens side by side) and, once it is there, decides <b>write or
 * skip</b>: a piece whose first offset is below
 * the committed next offset was committed already (an earlier attempt of this task), so its
 * rows are walked again for the summary but not sent; a progress record of a newer generation
 * means a newer instance claimed the partition, and this one stops. A piece with no row
 * commits nothing. Any failure aborts the open transaction and closes the producer, so a retry
 * starts from what Kafka committed.
 *
 * <p><b>A kept producer is on trial</b> until Kafka took one of the piece's records under it:
 * the partition's task may have run on another executor since (Spark places a batch's tasks
 * where a core is free), whose new producer fenced this one. Kafka says so only when the
 * producer next talks to its coordinator, i.e. at the piece's first records. Found fenced
 * then, nothing of the piece is written (its partitions were never added to the transaction):
 * the producer is closed and the id opened anew ({@code initTransactions}: it fences the other
 * executor's, which meets the same at its next piece), the partition's progress is read, and
 * the piece's records sent so far go again under the new producer, or are dropped if what is
 * committed says the piece is (the other executor wrote it). The read is the claim's check: a
 * newer run's generation stops the task as ever. So a partition moving between executors costs
 * an {@code initTransactions} and a progress read, not a failed task. A fence met once Kafka
 * took a record (a newer instance, or another attempt writing now) fails the task.
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
  private Producers.Held held;
  private Opening opening; // the open piece's new producer, while it opens
  private long first;
  private String topic;
  private int partition;
  private boolean skip;
  private boolean open;
  private Sink.Acks acks;
  private final Trial trial = new Trial(); // a kept producer's piece, until Kafka took a record
  private final Commits commits; // pieces ended, their commits under way on other threads
  private final Unopened unopened = new Unopened(); // pieces ended before their producers opened

  Pieces(Delivery delivery, Map<String, Object> config, Kafka kafka, int slots) {
    this.delivery = delivery;
    this.config = config;
    this.kafka = kafka;
    this.slots = slots;
    this.answerMillis = Sink.deliveryTimeout(config) + 30_000L;
    // the coordinator times a transaction from its first partition: a piece in a primed one
    // has the rest of transaction.timeout.ms, at least nine tenths of it
    this.primedNanos = transactionTimeout(config) * 100_000L;
    this.commits = new Commits(delivery, kafka, answerMillis, primedNanos);
  }

  /** The producers' transaction.timeout.ms (Kafka's default where unset). */
  static long transactionTimeout(Map<String, Object> config) {
    Object timeout = config.get(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG);
    return timeout == null ? 60_000L : Long.parseLong(timeout.toString());
  }

  /** A task's pieces on the cluster of {@code producer} (Spark's Kafka writer settings). */
  public static Pieces of(Delivery delivery, Map<String, Object> producer) {
    Map<String, Object> config = new HashMap<>(producer);
    // how long another partition's open transaction may hold a progress read back
    long transactionTimeout = transactionTimeout(config) + 15_000L;
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
            return ProgressReader.read(
                config, delivery.progressTopic, slot, key, transactionTimeout);
          }
        };
    return new Pieces(delivery, config, kafka, ProgressReader.slots(config, delivery.progressTopic));
  }

  /**
   * The piece of {@code topic}/{@code partition} whose first record is at {@code first}. A
   * producer this executor kept for the partition is taken at once; a new one is opened (and
   * the partition's progress read) on another thread while the piece's first records wait in
   * memory ({@link Opening}), so the walk goes on meanwhile.
   */
  public void begin(String topic, int partition, long first)
      throws IOException, InterruptedException {
    if (held != null || opening != null) {
      throw new IllegalStateException("piece of " + this.topic + "/" + this.partition + " open");
    }
    String id = idOf(topic, partition);
    // pieces ended before their producers opened: those opened since, one of id waited for
    for (Unopened.Piece p : unopened.take(e -> id.equals(idOf(e.topic(), e.partition())))) {
      finish(p);
    }
    awaitCommit(id); // a piece of the same id ended in this task: its producer, once committed
    this.topic = topic;
    this.partition = partition;
    this.first = first;
    Producers.Held kept = unprimeIfStale(Producers.reuse(id, delivery.generation));
    if (kept != null) {
      decide(kept);
      trial.start(!skip); // it may have been fenced since its last piece (settle)
    } else {
      String key = Progress.key(delivery.kind, topic, partition);
      opening = Opening.start(() -> open(id, key));
    }
  }

  /**
   * {@code kept}, its primed transaction aborted if it was begun so long ago that the piece
   * would have too little of the transaction's timeout left; null (closed) if the abort
   * failed: fenced since, or its coordinator aborted it (the piece opens the id anew).
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
   * A new producer for {@code id}, and the progress committed under {@code key} (on the
   * opening's thread; reads no field the task thread changes).
   */
  private Producers.Held open(String id, String key) {
    Producers.Held fresh = Producers.open(kafka, config, id, delivery.generation);
    try {
      Progress read = kafka.read(key, Progress.slot(key, slots));
      fresh.committed = read == null ? new Progress(-1, 0) : read;
      return fresh;
    } catch (IOException e) {
      Producers.release(fresh, false);
      throw new CompletionException(e);
    } catch (RuntimeException e) {
      Producers.release(fresh, false);
      throw e;
    }
  }

  /** Write or skip the piece on {@code taken}'s committed progress; stop if a newer run took it. */
  private void decide(Producers.Held taken) throws IOException {
    held = taken;
    long now = System.nanoTime();
    held.gap = held.taken == 0 ? 0 : now - held.taken;
    held.taken = now;
    if (held.committed.generation > delivery.generation) {
      IOException e =
          new IOException(
              Fences.TAKEN
                  + ": source partition "
                  + where()
                  + " was claimed by run generation "
                  + held.committed.generation
                  + " (this run is generation "
                  + delivery.generation
                  + ")");
      close();
      throw e;
    }
    skip = delivery.committed(held.committed, first);
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
    decide(opened.take(where()));
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
    if (trial.on()) {
      trial.add(record);
    }
    try {
      if (!open) {
        if (held.primed == 0) {
          held.producer.beginTransaction();
        }
        held.primed = 0;
        acks = new Sink.Acks(true);
        open = true;
      }
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
   * A kept producer on trial ({@link Pieces}): once Kafka took one of the piece's records, it
   * holds the id and the records kept to send again are dropped; found fenced, the id is
   * opened anew ({@link #reopen}). {@code wait}: waits for Kafka's first answer.
   */
  private void settle(boolean wait) throws IOException {
    if (!trial.on() || !open) {
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
    if (e != null && Fences.fenced(e)) {
      reopen();
    } else if (e == null && acks.tookOne()) {
      trial.end();
    } // another failure: raised by the next send, or by end
  }

  /**
   * The kept producer was fenced before Kafka took any record of the piece under it: closed,
   * the id opened anew (its progress read: a newer run's claim stops the task here), and the
   * piece's records sent so far sent again (dropped if the piece is committed).
   */
  private void reopen() throws IOException {
    Producers.Held fenced = held;
    List<ProducerRecord<byte[], byte[]>> again = trial.end();
    held = null;
    open = false; // its transaction never reached the coordinator: nothing to abort
    Producers.release(fenced, false);
    openAgain(fenced.id);
    for (ProducerRecord<byte[], byte[]> record : again) {
      transmit(record);
    }
  }

  /** The open piece's id opened anew on this thread (its progress read, write or skip decided). */
  private void openAgain(String id) throws IOException {
    LOG.info(
        "source partition {}: the producer this executor kept for {} was fenced (the"
            + " partition's task ran on another executor since); opening it anew",
        where(),
        id);
    Delivery.add(delivery.reopened);
    Producers.Held fresh;
    try {
      fresh = open(id, Progress.key(delivery.kind, topic, partition));
    } catch (CompletionException e) {
      if (e.getCause() instanceof IOException io) {
        throw io;
      }
      throw e;
    }
    decide(fresh);
  }

  /**
   * A piece sent under a kept producer that Kafka found fenced before it took any of the piece
   * (its commit thread saw so): everything to write it again under the id opened anew.
   */
  record Redo(
      String topic,
      int partition,
      long first,
      List<ProducerRecord<byte[], byte[]>> records,
      long nextOffset,
      String resolved,
      JsonNode position) {}

  /** {@code redo}'s piece written again on this thread, its id opened anew (no piece open). */
  private void redo(Redo redo) throws IOException, InterruptedException {
    topic = redo.topic();
    partition = redo.partition();
    first = redo.first();
    openAgain(delivery.transactionalId(topic, partition));
    for (ProducerRecord<byte[], byte[]> record : redo.records()) {
      transmit(record);
    }
    end(redo.nextOffset(), redo.resolved(), redo.position());
  }

  /**
   * The piece ends where the partition's next batch starts ({@code nextOffset}, the floor
   * {@code resolved} there): its progress record, then the commit; returns once committed.
   * The tests' kills of the job ({@link CrashPoints}) are on either side of the commit.
   */
  public void end(long nextOffset, String resolved, JsonNode position)
      throws IOException, InterruptedException {
    if (opening != null && !opening.done()) { // finished once the producer is there
      Unopened.Piece piece =
          new Unopened.Piece(topic, partition, first, opening, nextOffset, resolved, position);
      opening = null;
      for (Unopened.Piece p : unopened.add(piece)) {
        finish(p); // too much held: the oldest waits for its producer now
      }
      return;
    }
    endNow(nextOffset, resolved, position);
  }

  /** {@code p} sent and its commit started, its producer waited for (no piece open). */
  private void finish(Unopened.Piece p) throws IOException, InterruptedException {
    topic = p.topic();
    partition = p.partition();
    first = p.first();
    opening = p.opening();
    endNow(p.nextOffset(), p.resolved(), p.position());
  }

  private void endNow(long nextOffset, String resolved, JsonNode position)
      throws IOException, InterruptedException {
    ready(true);
    settle(false); // a kept producer: Kafka took a record under it already, or found it fenced
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
        ProducerRecord<byte[], byte[]> progress =
            new ProducerRecord<>(
                delivery.progressTopic,
                Progress.slot(key, slots),
                key.getBytes(StandardCharsets.UTF_8),
                value);
        if (!sendProgress(progress)) {
          Producers.release(held, true); // opened anew: the piece was committed meanwhile
          held = null;
          return;
        }
        if (CrashPoints.armed(CrashPoints.IN_TRANSACTION)) {
          // the kill lands with the piece on the broker, uncommitted: flushed and answered
          held.producer.flush();
          acks.await(answerMillis);
          CrashPoints.reach(CrashPoints.IN_TRANSACTION);
        }
        Redo again = null;
        if (trial.on()) { // its commit thread waits for Kafka's first answer: fenced, it comes back
          again = new Redo(topic, partition, first, trial.end(), nextOffset, resolved, position);
        }
        commits.start(held, acks, where(), nextOffset, again);
        held = null;
        open = false;
        acks = null;
        return;
      }
    } catch (KafkaException e) {
      throw failed(e);
    }
    Producers.release(held, true);
    held = null;
  }

  /**
   * The piece's progress record sent; false if its kept producer, on trial, was found fenced
   * just now (Kafka's first answer came in since the last look) and the id opened anew found
   * the piece committed. Otherwise the piece is sent again under the new producer first.
   */
  private boolean sendProgress(ProducerRecord<byte[], byte[]> progress) throws IOException {
    try {
      acks.send(held.producer, progress);
      return true;
    } catch (KafkaException | IOException e) {
      if (!(trial.on() && Fences.fenced(e) && !acks.tookOne())) {
        throw e instanceof KafkaException k ? failed(k) : (IOException) e;
      }
    }
    reopen(); // the piece's records sent again under the new producer (or none: committed)
    if (!open) {
      return false;
    }
    acks.send(held.producer, progress);
    return true;
  }

  /**
   * Waits for the commits under way of {@code id}'s producer (no piece open): one fenced on
   * its trial is written again here first; a failure is thrown.
   */
  private void awaitCommit(String id) throws IOException, InterruptedException {
    while (commits.pending(id)) {
      Redo again = commits.await(id);
      if (again != null) {
        redo(again);
      }
    }
  }

  /**
   * Waits for every commit under way (no piece open); a piece fenced on its trial is written
   * again and waited for too. The first failure is thrown once every commit ended.
   */
  public void awaitCommits() throws IOException, InterruptedException {
    IOException first = null;
    try {
      for (Unopened.Piece p : unopened.take(e -> true)) {
        finish(p);
      }
    } catch (IOException e) {
      first = e;
      unopened.cancel();
    }
    while (!commits.isEmpty()) {
      try {
        Redo again = commits.awaitFirst();
        if (again != null && first == null) {
          redo(again);
        }
      } catch (IOException e) {
        first = first == null ? e : first;
      }
    }
    if (first != null) {
      throw first;
    }
  }

  /**
   * The piece is not done (an initial scan's chunk that met what stops the run: a bad record
   * with nowhere to divert it, a row its output schema cannot hold): its transaction is
   * aborted, so nothing of it is seen and the chunk runs again whole; the producer is kept.
   */
  public void abandon() throws IOException {
    ready(true);
    boolean wasTrial = trial.on();
    trial.end();
    try {
      if (open) {
        held.producer.abortTransaction();
        aborted();
      }
    } catch (KafkaException e) {
      if (!(wasTrial && Fences.fenced(e))) {
        throw failed(e);
      }
      aborted(); // fenced before Kafka took any of it: nothing written; the producer is closed
      Producers.release(held, false);
      held = null;
      return;
    }
    Producers.release(held, true);
    held = null;
  }

  /**
   * Ends the task's use: an open piece's transaction is aborted (a failed task's); the pieces
   * that ended before their producers opened are sent and committed (they are whole, as every
   * ended piece is), and every commit under way waited for (one that failed fails the task:
   * thrown, or suppressed by the failure already thrown).
   */
  @Override
  public void close() {
    UncheckedIOException uncommitted = null;
    abortOpen(); // a failed task's open piece (none once the task's walk ended)
    try {
      awaitCommits();
    } catch (IOException e) {
      uncommitted = new UncheckedIOException(e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      uncommitted = new UncheckedIOException(new IOException("interrupted while committing", e));
    }
    abortOpen(); // a piece written again that failed
    unopened.cancel(); // pieces not finished: the task was interrupted
    if (uncommitted != null) {
      throw uncommitted;
    }
  }

  private void abortOpen() {
    trial.end();
    if (opening != null) { // a failed task's producer still opening: closed once it is open
      opening.cancel();
      opening = null;
    }
    if (held == null) {
      return;
    }
    if (open) {
      try {
        held.producer.abortTransaction();
      } catch (RuntimeException e) {
        // fenced or broken: closing the producer is what is left; the next holder aborts it
      }
      aborted();
    }
    Producers.release(held, false);
    held = null;
  }

  /** The open piece's transaction ended without its commit: counted as aborted. */
  private void aborted() {
    open = false;
    Delivery.add(delivery.aborted);
  }

  private IOException failed(KafkaException e) {
    return Fences.failed(e, where(), held.id);
  }

  private String idOf(String topic, int partition) {
    return delivery.transactionalId(topic, partition);
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
