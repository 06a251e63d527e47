package dev.highwater.sink;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;

/**
 * A progress row of a task's rows under exactly-once delivery, read ({@link Sink}'s {@code
 * PieceRows} reads each one): a <i>begin</i> row's (its topic, partition, first offset), or an
 * <i>end</i> row's (next offset, the floor there as {@code resolved}, the source position; or
 * {@code abandon}). The Python side declares them once (pipeline/core/batch/boundary.py:
 * PieceBegin, PieceEnd, PieceAbandon); tests/golden/boundary.json holds examples of each, which
 * BoundaryTest reads here.
 */
record ProgressRow(
    boolean begins,
    boolean abandon,
    String topic,
    int partition,
    long first,
    long nextOffset,
    String resolved,
    JsonNode position) {

  /** The progress {@code text} of a begin row ({@code begins}: no summary) or of an end row. */
  static ProgressRow parse(String text, boolean begins) throws IOException {
    JsonNode p = Progress.JSON.readTree(text);
    if (begins) {
      return new ProgressRow(
          true,
          false,
          p.get("topic").asText(),
          p.get("partition").asInt(),
          p.get("first").asLong(),
          -1,
          null,
          null);
    }
    if (p.path("abandon").asBoolean(false)) {
      return new ProgressRow(false, true, null, -1, -1, -1, null, null);
    }
    return new ProgressRow(
        false,
        false,
        null,
        -1,
        -1,
        p.get("next_offset").asLong(),
        p.get("resolved").textValue(),
        p.get("position"));
  }

  /** What the row says to {@code pieces}: a piece begins, ends, or is abandoned. */
  void apply(Pieces pieces) throws IOException, InterruptedException {
    if (begins) {
      pieces.begin(topic, partition, first);
    } else if (abandon) {
      pieces.abandon();
    } else {
      pieces.end(nextOffset, resolved, position);
    }
  }
}
