package dev.highwater.sink;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Future;
import org.apache.kafka.common.KafkaException;
import org.apache.spark.TaskContext;

/**
 * A task's pieces' commits, each on a thread of its own: the task goes on to its next piece
 * (another partition's producer) while the coordinator writes this one's, and waits for every
 * commit before it ends ({@link Pieces#close}), so a task reports success only with its pieces
 * committed.
 *
 * <p>A committed piece's producer, its partition steady, begins its next transaction with the
 * partitions it wrote added ({@link Priming}). A kept producer's piece still on trial ({@link
 * Trial}) waits here for Kafka's first answer: a fence then means nothing of it reached the
 * coordinator, and the piece comes back to be written again ({@link Pieces.Redo}).
 */
final class Commits {
  private static final ExecutorService COMMITTER =
      Daemons.pool("highwater-commit");

  /** A piece's commit under way: its producer's id, and the commit's end. */
  private record Committing(String id, String where, Future<Boolean> done, Pieces.Redo again) {}

  private final Delivery delivery;
  private final Pieces.Kafka kafka;
  private final long answerMillis;
  private final long primedNanos; // a primed transaction older is aborted before use
  private final List<Committing> committing = new ArrayList<>();

  Commits(Delivery delivery, Pieces.Kafka kafka, long answerMillis, long primedNanos) {
    this.delivery = delivery;
    this.kafka = kafka;
    this.answerMillis = answerMillis;
    this.primedNanos = primedNanos;
  }

  /**
   * Commits {@code piece}'s transaction (its records sent under {@code answered}) on another
   * thread; {@code again}: the piece to write again if its trial ends fenced (null: no trial).
   */
  void start(
      Producers.Held piece,
      Sink.Acks answered,
      String where,
      long nextOffset,
      Pieces.Redo again) {
    TaskContext task = TaskContext.get(); // the fault points' (a thread-local of the task's)
    Future<Boolean> done =
        COMMITTER.submit(
            () -> {
              boolean ok = false;
              try {
                if (again != null && fencedOnTrial(piece, answered)) {
                  return false; // never reached the coordinator: nothing to abort; written again
                }
                TaskFaults.reach("slow_commit", task);
                piece.producer.commitTransaction();
                Delivery.add(delivery.committed);
                answered.await(answerMillis);
                piece.committed = new Progress(nextOffset, delivery.generation, delivery.scanTime);
                if (steady(piece) && kafka.prime(piece.producer, answered.partitions())) {
                  piece.primed = System.nanoTime(); // its next piece's partitions added now
                }
                CrashPoints.reach(CrashPoints.PIECE_COMMITTED); // committed, not reported
                TaskFaults.reach("after_commit", task);
                ok = true;
                return true;
              } catch (KafkaException e) {
                try {
                  piece.producer.abortTransaction();
                } catch (RuntimeException gone) {
                  // fenced or broken: closing the producer is what is left
                }
                Delivery.add(delivery.aborted);
                throw Fences.failed(e, where, piece.id);
              } finally {
                Producers.release(piece, ok);
              }
            });
    committing.add(new Committing(piece.id, where, done, again));
  }

  /**
   * Whether {@code piece}'s partition gets its pieces often enough that the next one likely
   * comes while a transaction primed now is fresh: primed and then aborted unused, a
   * transaction costs more than it saves (a slow trigger's partition is not primed).
   */
  private boolean steady(Producers.Held piece) {
    return piece.gap > 0 && piece.gap < primedNanos / 2;
  }

  /**
   * A kept producer's trial, on its commit thread: whether Kafka's first answer to the piece
   * was a fence (another executor opened the id since this one's last piece). A fence once
   * Kafka took a record is another attempt writing now: the commit fails, and the task.
   */
  private boolean fencedOnTrial(Producers.Held piece, Sink.Acks answered)
      throws InterruptedException {
    try {
      piece.producer.flush();
      answered.awaitFirst(answerMillis);
    } catch (KafkaException | IOException e) {
      if (!Fences.fenced(e)) {
        return false; // the commit meets it, and fails
      }
    }
    Exception e = answered.failure();
    return e != null && Fences.fenced(e) && !answered.tookOne();
  }

  /** Whether a commit of {@code id}'s producer is under way. */
  boolean pending(String id) {
    return first(id) != null;
  }

  boolean isEmpty() {
    return committing.isEmpty();
  }

  /**
   * Waits for the first commit under way of {@code id}'s producer: null once it committed, the
   * piece to write again if its trial ended fenced; its failure is thrown.
   */
  Pieces.Redo await(String id) throws IOException, InterruptedException {
    return await(first(id));
  }

  /** Waits for the first commit under way, as {@link #await(String)}. */
  Pieces.Redo awaitFirst() throws IOException, InterruptedException {
    return await(committing.get(0));
  }

  private Committing first(String id) {
    for (Committing c : committing) {
      if (c.id().equals(id)) {
        return c;
      }
    }
    return null;
  }

  private Pieces.Redo await(Committing c) throws IOException, InterruptedException {
    committing.remove(c);
    try {
      return c.done().get() ? null : c.again();
    } catch (ExecutionException e) {
      Throwable cause = e.getCause();
      if (cause instanceof IOException io) {
        throw io;
      }
      if (cause instanceof RuntimeException r) {
        throw r;
      }
      if (cause instanceof Error err) {
        throw err;
      }
      throw new IOException("committing the piece of " + c.where() + " failed: " + cause, cause);
    }
  }
}
