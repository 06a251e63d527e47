package dev.highwater.walk;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.highwater.encoding.Encoding;
import dev.highwater.encoding.ScanEnvelope;
import dev.highwater.sink.Delivery;
import dev.highwater.sink.Pieces;
import dev.highwater.sink.Sink;
import java.io.IOException;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.producer.ProducerRecord;
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
 * An initial scan's chunk of a native source walked in the JVM (pipeline/core/scan/scan_walk.py
 * says when), as the Python scan walks it (pipeline/core/scan/scan.py): one source partition's
 * records sorted by (the key's xxhash64, the key, the offset), so each key's versions come
 * together in commit order. Of a key's versions at or below the statement time the latest (the
 * first offset of equal times) is its snapshot row, unless it is a delete; the versions after
 * it follow as changes ({@code changes}, up to the end time), or are only read.
 *
 * <p>Versions at or below the time are told apart by the time at their value's tail ({@link
 * ScanEnvelope#time}) and only the latest is read whole, as the Python scan does. At the first
 * key with a record the walk does not take (a time it cannot read there, a value it does not
 * write exactly as the Python scan would, a marker it cannot read, a row beyond the sink's
 * limit), it stops: the rest of the chunk, from that key on in the sort's order, is the Python
 * scan's (its report says where). Under exactly once a chunk is one transaction: one the walk
 * stopped in is abandoned, and the whole chunk is the Python scan's.
 *
 * <p>Each task reports one JSON text to {@code reports}: {@code {"summary": <the partition's
 * summary, as the Python scan's> | null, "rest": null | {"hash": <long>|null, "key":
 * <base64>|null}}} (a rest with a null hash: the whole chunk).
 */
public final class Scan implements Serializable {
  private static final long serialVersionUID = 1L;

  private final CollectionAccumulator<String> reports;
  private final int[] columns; // key, value, offset, hash in the sorted rows
  // the plan (pipeline/core/batch/boundary.py: ScanWalkPlan), as read (BoundaryTest reads it too)
  final String source;
  final int partition;
  final long first; // the chunk's range [first, end)
  final long end;
  final String topic; // where its rows go
  final ScanEnvelope envelope;
  final long[] statement;
  final long[] endTime; // null: none
  final boolean changes;
  final int room;

  Scan(String plan, int[] columns, CollectionAccumulator<String> reports) throws IOException {
    this.columns = columns;
    this.reports = reports;
    JsonNode p = new ObjectMapper().readTree(plan);
    source = p.get("source").asText();
    partition = p.get("partition").asInt();
    first = p.get("span").get(0).asLong();
    end = p.get("span").get(1).asLong();
    topic = p.get("topic").asText();
    List<String> members = new ArrayList<>();
    p.get("members").forEach(m -> members.add(m.asText()));
    envelope = new ScanEnvelope(members);
    statement = time(p.get("statement_time"));
    endTime = p.path("end_time").isNull() ? null : time(p.get("end_time"));
    changes = p.get("changes").asBoolean();
    room = p.get("room").asInt();
  }

  private static long[] time(JsonNode wallAndLogical) {
    return new long[] {wallAndLogical.get(0).asLong(), wallAndLogical.get(1).asLong()};
  }

  /**
   * Walks {@code sorted} (the chunk's rows: key, value, offset, hash, sorted by hash, key,
   * offset; one task) under {@code plan} and sends its rows to Kafka; returns the transactions
   * (committed, aborted) once the brokers acknowledged every record. {@code options}: Spark's
   * Kafka writer options, and the scan's exactly-once ones.
   */
  public static long[] write(
      Dataset<Row> sorted,
      String plan,
      CollectionAccumulator<String> reports,
      Map<String, String> options)
      throws IOException {
    Delivery delivery = Delivery.of(options);
    Map<String, Object> producer = Sink.producer(Delivery.kafka(options));
    Scan scan = new Scan(plan, columns(sorted.schema()), reports);
    sorted.queryExecution().toRdd().toJavaRDD().foreachPartition(new Send(scan, producer, delivery));
    return Delivery.counts(delivery);
  }

  /** The same walk, its records as rows (topic, key, value, headers) instead of sent. */
  public static Dataset<Row> rows(
      Dataset<Row> sorted, String plan, CollectionAccumulator<String> reports)
      throws IOException {
    JavaRDD<InternalRow> records = sorted.queryExecution().toRdd().toJavaRDD();
    Scan scan = new Scan(plan, columns(sorted.schema()), reports);
    FlatMapFunction<Iterator<InternalRow>, InternalRow> walk = scan::walk;
    return sorted
        .sparkSession()
        .internalCreateDataFrame(records.mapPartitions(walk).rdd(), Walk.Output.TYPE, false);
  }

  private static int[] columns(StructType schema) {
    String[] names = {"key", "value", "offset", "hash"};
    int[] columns = new int[names.length];
    for (int k = 0; k < names.length; k++) {
      columns[k] = schema.fieldIndex(names[k]);
    }
    return columns;
  }

  private Iterator<InternalRow> walk(Iterator<InternalRow> input) {
    Walker walker = new Walker(input);
    UTF8String to = UTF8String.fromString(topic);
    return Rows.of(() -> walker.next() ? Rows.row(to, walker.out) : null, () -> walker.report(false));
  }

  /** One task's walk, sent; under exactly once in one transaction with the chunk's progress. */
  static final class Send implements VoidFunction<Iterator<InternalRow>> {
    private static final long serialVersionUID = 1L;
    private final Scan scan;
    private final Map<String, Object> producer;
    private final Delivery delivery; // null: at least once

    Send(Scan scan, Map<String, Object> producer, Delivery delivery) {
      this.scan = scan;
      this.producer = producer;
      this.delivery = delivery;
    }

    @Override
    public void call(Iterator<InternalRow> input) throws IOException, InterruptedException {
      Walker walker = scan.new Walker(input);
      if (delivery == null) {
        Sink.send(
            producer,
            (kafka, acks) -> {
              while (walker.next()) {
                acks.send(kafka, record(walker));
              }
            });
        walker.report(false);
        return;
      }
      try (Pieces pieces = Pieces.of(delivery, producer)) {
        pieces.begin(scan.source, scan.partition, scan.first);
        while (walker.next()) {
          pieces.send(record(walker));
        }
        if (walker.stopped) {
          pieces.abandon(); // the whole chunk is the Python scan's
        } else {
          pieces.end(scan.end, null, null);
        }
      }
      walker.report(true);
    }

    private ProducerRecord<byte[], byte[]> record(Walker walker) {
      return new ProducerRecord<>(scan.topic, walker.out.key, walker.out.value);
    }
  }

  /**
   * One task's walk of the sorted rows: {@link #next} moves to the next row to write (in
   * {@link #out}), a key's rows once all of its versions were read.
   */
  final class Walker {
    private final Iterator<InternalRow> input;
    final Encoding.Encoded out = new Encoding.Encoded();
    private final Seen seen = new Seen(source, partition, null, null, null, first);
    private boolean started; // a key is being read
    private long hash;
    private byte[] key; // null: the markers
    private byte[] best; // its latest version at or below the statement time, and its time
    private long[] bestTs;
    private final List<byte[]> later = new ArrayList<>(); // its versions after it, in order
    private final List<byte[]> keys = new ArrayList<>(); // the key's rows, to go out
    private final List<byte[]> values = new ArrayList<>();
    private int row;
    private boolean ended;
    boolean stopped; // at the key of hash, key: the rest is the Python scan's

    Walker(Iterator<InternalRow> input) {
      this.input = input;
      seen.end = first;
    }

    /** The next row to write (in {@link #out}); false at the chunk's end or where it stopped. */
    boolean next() {
      while (row == keys.size()) {
        keys.clear();
        values.clear();
        row = 0;
        if (ended) {
          return false;
        }
        read();
      }
      out.key = keys.get(row);
      out.value = values.get(row++);
      return true;
    }

    /** Reads rows until a key ends (its rows in keys, values), the input ends or the walk stops. */
    private void read() {
      while (input.hasNext()) {
        InternalRow record = input.next();
        long h = record.getLong(columns[3]);
        byte[] k = record.isNullAt(columns[0]) ? null : record.getBinary(columns[0]);
        seen.end = Math.max(seen.end, record.getLong(columns[2]) + 1);
        boolean same = started && h == hash && Arrays.equals(k, key);
        if (!same && started && !finish()) {
          return;
        }
        if (!same) {
          started = true;
          hash = h;
          key = k;
        }
        byte[] value = record.isNullAt(columns[1]) ? null : record.getBinary(columns[1]);
        if (!version(value)) {
          stop();
          return;
        }
        if (!same && !keys.isEmpty()) {
          return; // the key before it is out
        }
      }
      if (started) {
        finish();
      }
      ended = true;
    }

    /** A version of the key being read; false: not taken. */
    private boolean version(byte[] value) {
      if (value == null) {
        return false;
      }
      if (key == null) {
        return Walk.marker(value) != null; // a marker: the stream's concern
      }
      long[] ts = ScanEnvelope.time(value);
      if (ts == null) {
        return false;
      }
      if (Walk.compare(ts, statement) > 0) {
        later.add(value); // read once the key is read, whether it goes out or not
      } else if (best == null || Walk.compare(ts, bestTs) > 0) {
        best = value; // the first offset of equal times stays
        bestTs = ts;
      }
      return true;
    }

    /** The key read: its rows to keys, values; false: not taken (the walk stops there). */
    private boolean finish() {
      boolean taken = key == null || rows();
      best = null;
      later.clear();
      if (!taken) {
        keys.clear();
        values.clear();
        stop();
      }
      return taken;
    }

    /** The key's rows: its snapshot row, then its changes after the time. */
    private boolean rows() {
      if (best != null) {
        if (!envelope.write(key, best, statement, true, out)) {
          return false;
        }
        if (out.value != null && !add()) {
          return false;
        }
      }
      long duplicates = 0;
      long[] last = null;
      for (byte[] value : later) {
        // read whether or not it goes out: one the Python scan cannot read is its bad record
        if (!envelope.write(key, value, null, false, out)) {
          return false;
        }
        if (!changes || (endTime != null && Walk.compare(out.ts, endTime) > 0)) {
          continue;
        }
        if (last != null && Walk.compare(out.ts, last) <= 0) {
          duplicates++;
        } else if (!add()) {
          return false;
        }
        last = last == null || Walk.compare(out.ts, last) > 0 ? out.ts : last;
      }
      long bytes = 0;
      for (int k = 0; k < keys.size(); k++) {
        bytes += keys.get(k).length + values.get(k).length;
      }
      seen.emitted += keys.size();
      seen.bytes += bytes;
      seen.duplicates += duplicates;
      return true;
    }

    private boolean add() {
      if (out.key.length + out.value.length > room) {
        return false;
      }
      keys.add(out.key);
      values.add(out.value);
      return true;
    }

    private void stop() {
      stopped = true;
      ended = true;
    }

    /** The task's report: its summary (none when {@code whole}ly the Python scan's) and rest. */
    void report(boolean whole) {
      ObjectMapper json = new ObjectMapper();
      ObjectNode report = json.createObjectNode();
      if (!started && !stopped) {
        report.putNull("summary").putNull("rest"); // no record: nothing to say
      } else if (stopped && whole) {
        report.putNull("summary");
        report.putObject("rest").putNull("hash").putNull("key");
      } else {
        report.set("summary", readTree(json, seen.summary(json)));
        if (stopped) {
          ObjectNode rest = report.putObject("rest").put("hash", hash);
          if (key == null) {
            rest.putNull("key");
          } else {
            rest.put("key", Base64.getEncoder().encodeToString(key));
          }
        } else {
          report.putNull("rest");
        }
      }
      reports.add(report.toString());
    }
  }

  private static JsonNode readTree(ObjectMapper json, String text) {
    try {
      return json.readTree(text);
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }
}
