package dev.highwater.walk;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import dev.highwater.encoding.Encoding;
import dev.highwater.encoding.Hlc;
import dev.highwater.encoding.Json;
import dev.highwater.placement.Placement;
import dev.highwater.sink.Delivery;
import dev.highwater.sink.Pieces;
import dev.highwater.sink.Sink;
import java.io.IOException;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.spark.api.java.JavaRDD;
import org.apache.spark.api.java.function.FlatMapFunction;
import org.apache.spark.api.java.function.VoidFunction;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.classic.Dataset;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;
import org.apache.spark.util.CollectionAccumulator;

/**
 * The changefeed's fast walk: a micro-batch of native JSON records walked in the JVM
 * (pipeline/core/batch/walk.py says when it runs and what follows it).
 *
 * <p>Per source partition, in offset order, as the Python loop (pipeline/core/batch/loop.py): a
 * marker raises the partition's floor; a change at or below the floor is dropped; any other
 * change goes to its source topic's output topic, written by the route's {@link Encoding}:
 * passed on as it came ({@code Verbatim}) or written again in Avro ({@code Avro}). Each takes
 * only records it writes exactly as the Python loop would. At the first record the route
 * does not take, the partition's walk stops and its summary says where (deferred: from, to, the
 * floor there); the driver hands that rest to the Python loop, which decides, so bad records
 * go where on_error says by one code path. The summaries (the Python loop's summary text) go
 * to an accumulator once a task's records are written.
 *
 * <p>It walks Spark's own rows (InternalRow) straight off the source's scan and hands each
 * record it takes to Spark's pooled Kafka producer ({@link #write}): a Row encoder, a
 * projection before it, or rows after it (the Kafka writer's projection and its copies of every
 * key and value) cost more per record than the walk itself (docs/benchmarks.md). {@link #walk}
 * gives the same records as rows, to look at.
 */
public final class Walk implements FlatMapFunction<Iterator<InternalRow>, InternalRow> {
  /** The rows {@link #walk} gives; in a holder, so that only it parses the DDL (Spark's parser). */
  static final class Output {
    static final StructType TYPE =
        StructType.fromDDL(
            "topic string, key binary, value binary, headers array<struct<key: string, value: binary>>");

    private Output() {}
  }

  private static final long serialVersionUID = 1L;
  private static final byte[] RESOLVED = "resolved".getBytes(StandardCharsets.US_ASCII);
  private static final byte[] NO_KEY = new byte[0]; // Canal-JSON's records are keyed by rows
  // a position beyond a long's: the partition's records go to the Python loop
  private static final long[] UNREADABLE = new long[0];

  /** Where a source topic's changes go, and how they are written there. */
  static final class Route implements Serializable {
    private static final long serialVersionUID = 1L;
    final String topic;
    final Encoding encoding;
    final boolean debezium; // Debezium's change events: no markers, positions, transactions
    final boolean rows; // records of several rows each, or a marker (Canal-JSON)
    // its transactions' places kept in the summary (the driver completes them from their topic)
    final boolean counted;
    final Map<String, long[]> commits; // binlogs: each transaction's END's time (its encoding's)

    Route(
        String topic,
        Encoding encoding,
        String format,
        boolean counted,
        Map<String, long[]> commits) {
      this.topic = topic;
      this.encoding = encoding;
      this.debezium = format.equals("debezium");
      this.rows = format.equals("canal-json");
      this.counted = counted;
      this.commits = commits;
    }
  }

  private final CollectionAccumulator<String> summaries;
  private final int[] columns; // key, value, topic, partition, offset in the batch's rows
  // the plan (pipeline/core/batch/boundary.py: WalkPlan), as read (BoundaryTest reads it too)
  final Map<String, Route> routes = new HashMap<>();
  final Map<String, long[]> thresholds = new HashMap<>(); // "topic/partition"
  // the highest source position read before the batch (Debezium), by "topic/partition"
  final Map<String, long[]> positions = new HashMap<>();
  final long[] newPartitionFloor;
  final int room;

  Walk(String plan, int[] columns, CollectionAccumulator<String> summaries) throws IOException {
    this.columns = columns;
    this.summaries = summaries;
    JsonNode root = new ObjectMapper().readTree(plan);
    root.get("routes")
        .fields()
        .forEachRemaining(
            e -> {
              String topic = e.getValue().get("topic").asText();
              String format = e.getValue().path("format").asText("native");
              Map<String, long[]> commits = new HashMap<>(); // binlogs' ENDs' times
              root.path("commits")
                  .path(e.getKey())
                  .fields()
                  .forEachRemaining(c -> commits.put(c.getKey(), time(c.getValue())));
              JsonNode registry = e.getValue().path("registry"); // Debezium in Avro
              Encoding encoding =
                  Encoding.of(
                      e.getValue().get("encoding"),
                      topic,
                      format,
                      commits,
                      registry.isObject() ? registry : null);
              boolean counted = e.getValue().path("counted").asBoolean(true);
              routes.put(e.getKey(), new Route(topic, encoding, format, counted, commits));
            });
    for (JsonNode t : root.get("thresholds")) {
      thresholds.put(
          t.get(0).asText() + "/" + t.get(1).asInt(),
          new long[] {t.get(2).asLong(), t.get(3).asLong()});
    }
    for (JsonNode t : root.path("positions")) {
      long[] position = new long[t.get(2).size()];
      for (int k = 0; k < position.length; k++) {
        JsonNode p = t.get(2).get(k);
        position = position == UNREADABLE || !p.canConvertToLong() ? UNREADABLE : position;
        if (position != UNREADABLE) {
          position[k] = p.asLong();
        }
      }
      positions.put(t.get(0).asText() + "/" + t.get(1).asInt(), position);
    }
    JsonNode floor = root.get("new_partition_floor");
    newPartitionFloor = time(floor);
    room = root.get("room").asInt();
  }

  private static long[] time(JsonNode wallAndLogical) {
    return new long[] {wallAndLogical.get(0).asLong(), wallAndLogical.get(1).asLong()};
  }

  /**
   * Walks {@code batch} (Spark's Kafka source rows) under {@code plan} and sends the records it
   * takes to Kafka ({@link Sink}); returns once the brokers acknowledged them all. {@code
   * options}: Spark's Kafka writer options ({@code kafka.}-prefixed). Each source partition's
   * summary goes to {@code summaries} once its task's records are acknowledged (a failed
   * task's are dropped, as Spark drops them).
   */
  public static long[] write(
      Dataset<Row> batch,
      String plan,
      CollectionAccumulator<String> summaries,
      java.util.Map<String, String> options)
      throws IOException {
    Delivery delivery = Delivery.of(options);
    Map<String, Object> producer = Sink.producer(Delivery.kafka(options));
    Walk walk = new Walk(plan, columns(batch.schema()), summaries);
    // one task per core, each walking its source partitions one after the other, each
    // partition on the executor the source prefers for it (its producer stays there), and
    // under exactly once a partition's commit goes on while the task walks the next one
    int cores = batch.sparkSession().sparkContext().defaultParallelism();
    Placement.rowsInPlace(batch.queryExecution().toRdd(), cores)
        .toJavaRDD()
        .foreachPartition(new Send(walk, producer, delivery));
    return Delivery.counts(delivery);
  }

  /**
   * The walk of {@code batch} under {@code plan} as rows (topic, key, value, headers) instead of
   * sent: the same walk, for looking at what it writes (tests against the Python loop).
   */
  public static Dataset<Row> walk(
      Dataset<Row> batch, String plan, CollectionAccumulator<String> summaries)
      throws IOException {
    JavaRDD<InternalRow> records = batch.queryExecution().toRdd().toJavaRDD();
    Walk walk = new Walk(plan, columns(batch.schema()), summaries);
    return batch
        .sparkSession()
        .internalCreateDataFrame(records.mapPartitions(walk).rdd(), Output.TYPE, false);
  }

  private static int[] columns(StructType schema) {
    String[] names = {"key", "value", "topic", "partition", "offset"};
    int[] columns = new int[names.length];
    for (int k = 0; k < names.length; k++) {
      columns[k] = schema.fieldIndex(names[k]);
    }
    return columns;
  }

  @Override
  public Iterator<InternalRow> call(Iterator<InternalRow> input) {
    Walker walker = new Walker(input);
    return Rows.of(
        () -> {
          Route route = walker.next();
          return route == null ? null : Rows.row(UTF8String.fromString(route.topic), walker.out);
        },
        walker::report);
  }

  /**
   * One task's walk, sent: each record straight from the walk to the producer (no rows between:
   * the Kafka writer's projections and copies of every key and value cost more than the walk,
   * docs/benchmarks.md). The task ends once every record sent was acknowledged, then reports
   * the summaries; a record Kafka refused fails the task.
   */
  static final class Send implements VoidFunction<Iterator<InternalRow>> {
    private static final long serialVersionUID = 1L;
    private final Walk walk;
    private final Map<String, Object> producer;
    private final Delivery delivery; // null: at least once

    Send(Walk walk, Map<String, Object> producer, Delivery delivery) {
      this.walk = walk;
      this.producer = producer;
      this.delivery = delivery;
    }

    @Override
    public void call(Iterator<InternalRow> input) throws IOException, InterruptedException {
      Walker walker = walk.new Walker(input);
      if (delivery == null) {
        Sink.send(
            producer,
            (kafka, acks) -> {
              for (Route route = walker.next(); route != null; route = walker.next()) {
                acks.send(kafka, record(route, walker.out));
              }
            });
      } else {
        transacted(walker);
      }
      walker.report();
    }

    /** Each source partition's records in one transaction with its progress ({@link Pieces}). */
    private void transacted(Walker walker) throws IOException, InterruptedException {
      try (Pieces pieces = Pieces.of(delivery, producer)) {
        Seen piece = null;
        for (Route route = walker.next(); route != null; route = walker.next()) {
          if (walker.last != piece) { // the partition before it was walked to its end
            if (piece != null) {
              end(pieces, piece);
            }
            piece = walker.last;
            pieces.begin(piece.topic, piece.partition, piece.first);
          }
          pieces.send(record(route, walker.out));
        }
        if (piece != null) {
          end(pieces, piece);
        }
      }
    }

    private static void end(Pieces pieces, Seen s) throws IOException, InterruptedException {
      boolean rest = s.deferred >= 0; // the Python loop's piece starts there
      ArrayNode position = s.position();
      pieces.end(rest ? s.deferred : s.end, Hlc.text(rest ? s.deferredFloor : s.floor), position);
    }
  }

  /** A position with the time its change was read at (debezium.py's {@code timed}). */
  private static long[] timed(long[] position, long[] ts) {
    long[] timed = Arrays.copyOf(position, position.length + 3);
    timed[position.length] = -1; // the mark: a time follows
    timed[position.length + 1] = ts[0];
    timed[position.length + 2] = ts[1];
    return timed;
  }

  /** Times ({wall, logical}) and positions alike: element by element, then the longer. */
  static int compare(long[] a, long[] b) {
    for (int k = 0; k < Math.min(a.length, b.length); k++) {
      int c = Long.compare(a[k], b[k]);
      if (c != 0) {
        return c;
      }
    }
    return Integer.compare(a.length, b.length);
  }

  /** A record's size as the Python loop counts it (a tombstone's value: none). */
  private static int size(byte[] key, byte[] value, Encoding.Headers headers) {
    return key.length + (value == null ? 0 : value.length) + Encoding.Headers.bytes(headers);
  }

  /** The Kafka record of the change in {@code out}, to {@code route}'s topic. */
  static ProducerRecord<byte[], byte[]> record(Route route, Encoding.Encoded out) {
    Encoding.Headers headers = out.headers;
    if (headers == null) {
      return new ProducerRecord<>(route.topic, out.key, out.value);
    }
    List<Header> list = new ArrayList<>(headers.names.size());
    for (int k = 0; k < headers.names.size(); k++) {
      list.add(new RecordHeader(headers.names.get(k), headers.values.get(k)));
    }
    return new ProducerRecord<>(route.topic, null, out.key, out.value, list);
  }

  /**
   * One task's walk of its source rows: {@link #next} moves to the next change to write (its
   * route, the record in {@link #out}); {@link #report} hands each partition's summary over
   * once the task's records are written.
   */
  final class Walker {
    private final Iterator<InternalRow> input;
    private final Map<String, Seen> seen = new LinkedHashMap<>();
    final Encoding.Encoded out = new Encoding.Encoded();
    private Seen last;
    private UTF8String lastTopic;
    private Route pending; // a record of several rows being written: its route
    private int row; // and its next row

    Walker(Iterator<InternalRow> input) {
      this.input = input;
    }

    /** The next change's route (its key and value in {@link #out}); null at the input's end. */
    Route next() {
      if (pending != null) { // the next row of a record of several
        if (row < out.rowKeys.size()) {
          out.key = out.rowKeys.get(row);
          out.headers = row < out.rowHeaders.size() ? out.rowHeaders.get(row) : null;
          out.value = out.rowValues.get(row++);
          last.emitted++;
          last.bytes += size(out.key, out.value, out.headers);
          return pending;
        }
        pending = null;
      }
      while (input.hasNext()) {
        Route route = step(input.next());
        if (route != null) {
          return route;
        }
      }
      return null;
    }

    /** Each source partition's summary to the accumulator (a failed task's are dropped). */
    void report() {
      ObjectMapper json = new ObjectMapper();
      for (Seen s : seen.values()) {
        summaries.add(s.summary(json));
      }
      seen.clear();
    }

    private Seen partition(UTF8String topic, int partition, long offset) {
      if (last != null && last.partition == partition && lastTopic.equals(topic)) {
        return last;
      }
      String id = topic + "/" + partition;
      Seen s = seen.get(id);
      if (s == null) {
        long[] floor = thresholds.getOrDefault(id, newPartitionFloor);
        Route route = routes.get(topic.toString());
        s = new Seen(topic.toString(), partition, route, floor, positions.get(id), offset);
        seen.put(id, s);
      }
      last = s;
      lastTopic = topic.clone(); // the input row's buffer is reused
      return s;
    }

    /** One source record (key, value, topic, partition, offset): its route if written, or null. */
    private Route step(InternalRow record) {
      long offset = record.getLong(columns[4]);
      Seen s = partition(record.getUTF8String(columns[2]), record.getInt(columns[3]), offset);
      s.end = offset + 1;
      if (s.deferred >= 0) {
        return null; // the Python loop walks the rest of this partition
      }
      byte[] value = record.isNullAt(columns[1]) ? null : record.getBinary(columns[1]);
      if (s.route.rows) {
        return rows(s, offset, value);
      }
      if (s.route.debezium) {
        byte[] key = record.isNullAt(columns[0]) ? null : record.getBinary(columns[0]);
        return change(s, offset, key, value);
      }
      if (record.isNullAt(columns[0])) {
        long[] marker = value == null ? null : marker(value);
        if (marker == null) {
          return defer(s, offset);
        }
        raise(s, marker);
        return null;
      }
      byte[] key = record.getBinary(columns[0]);
      if (value == null || !s.route.encoding.encode(key, value, out)) {
        return defer(s, offset);
      }
      int size = size(out.key, out.value, out.headers);
      if (size > room) {
        return defer(s, offset);
      }
      if (compare(out.ts, s.floor) <= 0) {
        s.duplicates++;
        return null;
      }
      s.emitted++;
      s.bytes += size;
      return s.route;
    }

    /**
     * A Debezium record, as the Python loop takes it: a re-send (at or below the highest
     * position read) is dropped but counts for its transaction, a change at or below the
     * floor is a duplicate; a tombstone carries nothing.
     */
    private Route change(Seen s, long offset, byte[] key, byte[] value) {
      if (value == null && key != null) {
        return null;
      }
      if (key == null || s.latest == UNREADABLE || !s.route.encoding.encode(key, value, out)) {
        return defer(s, offset);
      }
      long[] position = out.position;
      boolean resent = position != null && s.latest != null && compare(position, s.latest) <= 0;
      // a binlog change whose END was not read yet waits for it (the Python loop's rest does)
      if (!resent && (out.ts == null || size(out.key, out.value, out.headers) > room)) {
        return defer(s, offset);
      }
      if (out.tx != null && s.route.counted) {
        s.saw(out.tx, out.within, out.ts);
      }
      if (resent) {
        s.resent++;
        return null;
      }
      if (position != null) {
        s.latest = timed(position, out.ts); // a snapshot read after it starts above its time
      }
      if (compare(out.ts, s.floor) <= 0) {
        s.duplicates++;
        return null;
      }
      s.emitted++;
      s.bytes += size(out.key, out.value, out.headers);
      return s.route;
    }

    /**
     * A record of several rows or a marker (Canal-JSON), as the Python loop takes it: a marker
     * raises the floor; rows at or below it are duplicates; the others go out one by one
     * ({@link #next}). A record with any row the walk cannot write is the Python loop's, whole.
     */
    private Route rows(Seen s, long offset, byte[] value) {
      if (value == null || !s.route.encoding.encode(NO_KEY, value, out)) {
        return defer(s, offset);
      }
      if (out.marker != null) {
        raise(s, out.marker);
        return null;
      }
      int rows = out.rowKeys.size();
      for (int k = 0; k < rows; k++) {
        Encoding.Headers headers = k < out.rowHeaders.size() ? out.rowHeaders.get(k) : null;
        if (size(out.rowKeys.get(k), out.rowValues.get(k), headers) > room) {
          return defer(s, offset);
        }
      }
      if (rows == 0) {
        return null; // DDL
      }
      if (compare(out.ts, s.floor) <= 0) {
        s.duplicates += rows;
        return null;
      }
      pending = s.route;
      row = 0;
      return next();
    }

    /** A marker read: the partition's floor and highest marker rise to it. */
    private void raise(Seen s, long[] marker) {
      if (compare(marker, s.floor) > 0) {
        s.floor = marker;
      }
      if (s.resolved == null || compare(marker, s.resolved) > 0) {
        s.resolved = marker;
      }
    }

    private Route defer(Seen s, long offset) {
      s.deferred = offset;
      s.deferredFloor = s.floor;
      return null;
    }
  }

  /** A marker's time: the value is {"resolved": "<hlc>"} and nothing else; else null. */
  static long[] marker(byte[] b) {
    int i = Json.ws(b, 0);
    if (i >= b.length || b[i] != '{') {
      return null;
    }
    i = Json.ws(b, i + 1);
    int name = i;
    i = name < b.length && b[name] == '"' ? Json.string(b, name, false) : -1;
    if (i < 0 || !Json.named(b, name, i, RESOLVED)) {
      return null;
    }
    i = Json.ws(b, i);
    if (i >= b.length || b[i] != ':') {
      return null;
    }
    int text = Json.ws(b, i + 1);
    i = text < b.length && b[text] == '"' ? Json.string(b, text, false) : -1;
    if (i < 0) {
      return null;
    }
    long[] ts = Hlc.parse(b, text + 1, i - 1);
    i = Json.ws(b, i);
    if (ts == null || i >= b.length || b[i] != '}' || Json.ws(b, i + 1) != b.length) {
      return null;
    }
    return ts;
  }

}
