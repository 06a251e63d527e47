package dev.highwater.sink;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.function.Supplier;
import org.apache.kafka.clients.producer.ProducerRecord;

/**
 * A piece's new transactional producer being opened (and its partition's progress read) on
 * another thread, and the piece's first records waiting for it in memory ({@link Pieces}): what
 * a new run pays on each partition's first piece, while the walk goes on.
 */
final class Opening {
  static final long WAITING_BYTES = 16L << 20; // a piece's records held while its producer opens
  private static final ExecutorService OPENER =
      Daemons.pool("highwater-open-producer");

  private final CompletableFuture<Producers.Held> future;
  private final List<ProducerRecord<byte[], byte[]>> waiting = new ArrayList<>();
  private long waitingBytes;

  private Opening(CompletableFuture<Producers.Held> future) {
    this.future = future;
  }

  /** Opens what {@code open} opens, on another thread (it reads no field the task changes). */
  static Opening start(Supplier<Producers.Held> open) {
    return new Opening(CompletableFuture.supplyAsync(open, OPENER));
  }

  /** Whether the producer is there (or its opening failed). */
  boolean done() {
    return future.isDone();
  }

  /** The records' bytes held. */
  long bytes() {
    return waitingBytes;
  }

  /** Whether the records waiting reached {@link #WAITING_BYTES}: time to wait for it. */
  boolean full() {
    return waitingBytes >= WAITING_BYTES;
  }

  /** One more record, held until the producer is there. */
  void hold(ProducerRecord<byte[], byte[]> record) {
    waiting.add(record);
    waitingBytes += size(record);
  }

  /** A record's key and value bytes. */
  static long size(ProducerRecord<byte[], byte[]> record) {
    return (record.key() == null ? 0 : record.key().length)
        + (record.value() == null ? 0 : record.value().length);
  }

  /** The records held, in order. */
  List<ProducerRecord<byte[], byte[]>> waiting() {
    return waiting;
  }

  /** The producer once it is open (waits for it); the opening's own failure is thrown. */
  Producers.Held take(String where) throws IOException {
    try {
      return future.get();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IOException("interrupted while opening the producer of " + where, e);
    } catch (ExecutionException e) {
      waiting.clear();
      Throwable cause = e.getCause();
      if (cause instanceof CompletionException && cause.getCause() != null) {
        cause = cause.getCause(); // the opening wraps its IOException
      }
      if (cause instanceof IOException io) {
        throw io;
      }
      if (cause instanceof RuntimeException r) {
        throw r;
      }
      throw new IOException("opening the producer of " + where + " failed: " + cause, cause);
    }
  }

  /** A failed task's opening: its producer is closed once it is open. */
  void cancel() {
    waiting.clear();
    waitingBytes = 0;
    future.whenComplete(
        (opened, e) -> {
          if (opened != null) {
            Producers.release(opened, false);
          }
        });
  }
}
