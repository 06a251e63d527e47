package dev.highwater.sink;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Predicate;

/**
 * A task's pieces that ended while their new producers were still opening ({@link Opening}),
 * in order: each is sent and committed once its producer is there ({@link Pieces}), so a
 * task's first pieces open their producers side by side rather than one after the other. Their
 * records wait in memory, {@link Opening#WAITING_BYTES} at the most between them.
 */
final class Unopened {
  /** A piece ended before its producer opened: all {@link Pieces#end} needs once it is there. */
  record Piece(
      String topic,
      int partition,
      long first,
      Opening opening,
      long nextOffset,
      String resolved,
      JsonNode position) {}

  private final ArrayDeque<Piece> pieces = new ArrayDeque<>();
  private long bytes; // their records'

  /** {@code piece} waits; returns the oldest pieces to finish now, waiting for their producers. */
  List<Piece> add(Piece piece) {
    pieces.add(piece);
    bytes += piece.opening().bytes();
    List<Piece> now = new ArrayList<>();
    while (bytes > Opening.WAITING_BYTES) {
      now.add(take(pieces.peek()));
    }
    return now;
  }

  /** The pieces to finish now, taken in order: those opened, and those {@code also} names. */
  List<Piece> take(Predicate<Piece> also) {
    List<Piece> now = new ArrayList<>();
    for (Piece p : List.copyOf(pieces)) {
      if (p.opening().done() || also.test(p)) {
        now.add(take(p));
      }
    }
    return now;
  }

  private Piece take(Piece piece) {
    pieces.remove(piece);
    bytes -= piece.opening().bytes();
    return piece;
  }

  /** None is sent: a failed task's (each producer is closed once it opened). */
  void cancel() {
    pieces.forEach(p -> p.opening().cancel());
    pieces.clear();
    bytes = 0;
  }
}
