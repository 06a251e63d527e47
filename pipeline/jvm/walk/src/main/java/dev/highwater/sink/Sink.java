package dev.highwater.sink;

import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.spark.api.java.function.ForeachPartitionFunction;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.util.CaseInsensitiveMap$;
import org.apache.spark.sql.classic.Dataset;
import org.apache.spark.sql.kafka010.KafkaSourceProvider$;
import org.apache.spark.sql.kafka010.producer.CachedKafkaProducer;
import org.apache.spark.sql.kafka010.producer.InternalKafkaProducerPool$;

/**
 * Every changefeed write to Kafka: the walk's ({@code dev.highwater.walk.Walk#write}) and rows'
 * ({@link #write}).
 *
 * <p>Through Spark's pooled producer, with Spark's Kafka writer options checked as that writer
 * checks them; unlike that writer, a task ends only once Kafka answered every record it sent
 * ({@link Acks}: the producer's flush() alone is not proof).
 */
public final class Sink {
  private Sink() {}

  /**
   * Writes {@code records} (columns topic, key, value, headers) to Kafka; returns once the
   * brokers acknowledged them all. {@code options}: Spark's Kafka writer options ({@code
   * kafka.}-prefixed), and ours for exactly once ({@link Delivery}). A Dataset action, so what
   * the rows' plan observes is reported. Returns the transactions committed and aborted.
   */
  public static long[] write(Dataset<Row> records, java.util.Map<String, String> options) {
    Delivery delivery = Delivery.of(options);
    Map<String, Object> producer = producer(Delivery.kafka(options));
    if (delivery == null) {
      records.select("topic", "key", "value", "headers").foreachPartition(new Rows(producer));
    } else {
      records
          .select("topic", "key", "value", "headers", "summary", "progress")
          .foreachPartition(new PieceRows(producer, delivery));
    }
    return Delivery.counts(delivery);
  }

  /** The producer settings of Spark's Kafka writer {@code options}, checked as it checks them. */
  public static Map<String, Object> producer(java.util.Map<String, String> options) {
    return new HashMap<>(
        KafkaSourceProvider$.MODULE$.kafkaParamsForProducer(
            CaseInsensitiveMap$.MODULE$.apply(
                scala.collection.immutable.Map$.MODULE$.from(
                    scala.jdk.javaapi.CollectionConverters.asScala(options)))));
  }

  /** A task's records, handed to the producer one by one. */
  public interface Sends {
    void to(Producer<byte[], byte[]> kafka, Acks acks) throws IOException;
  }

  /**
   * One task's sends by the pooled producer of {@code producer}: returns once Kafka answered
   * every record; raises the first record it refused, or that it did not answer in time.
   */
  public static void send(Map<String, Object> producer, Sends sends)
      throws IOException, InterruptedException {
    CachedKafkaProducer pooled = InternalKafkaProducerPool$.MODULE$.acquire(producer);
    try {
      deliver(pooled.producer(), sends, deliveryTimeout(producer) + 30_000L);
    } finally {
      InternalKafkaProducerPool$.MODULE$.release(pooled);
    }
  }

  /**
   * {@code sends} by {@code kafka}, flushed; returns once Kafka answered every record, waiting
   * at most {@code millis} for the answers; raises the first record it refused.
   */
  static void deliver(Producer<byte[], byte[]> kafka, Sends sends, long millis)
      throws IOException, InterruptedException {
    Acks acks = new Acks();
    sends.to(kafka, acks);
    kafka.flush();
    acks.await(millis);
  }

  /** The producer's delivery.timeout.ms: how long it may take to answer a record. */
  static long deliveryTimeout(Map<String, Object> producer) {
    Object value = producer.get(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG);
    return value == null ? 120_000L : Long.parseLong(value.toString());
  }

  /** A task's rows (topic, key, value, headers) as Kafka records. */
  static final class Rows implements ForeachPartitionFunction<Row> {
    private static final long serialVersionUID = 1L;
    private final Map<String, Object> producer;

    Rows(Map<String, Object> producer) {
      this.producer = producer;
    }

    @Override
    public void call(Iterator<Row> rows) throws IOException, InterruptedException {
      send(
          producer,
          (kafka, acks) -> {
            while (rows.hasNext()) {
              acks.send(kafka, record(rows.next()));
            }
          });
    }

    static ProducerRecord<byte[], byte[]> record(Row r) {
      byte[] key = r.isNullAt(1) ? null : (byte[]) r.get(1);
      byte[] value = r.isNullAt(2) ? null : (byte[]) r.get(2);
      return new ProducerRecord<>(r.getString(0), null, key, value, headers(r));
    }

    private static List<Header> headers(Row r) {
      if (r.isNullAt(3)) {
        return null;
      }
      List<Row> pairs = r.getList(3);
      List<Header> headers = new ArrayList<>(pairs.size());
      for (Row pair : pairs) {
        headers.add(new RecordHeader(pair.getString(0), (byte[]) pair.get(1)));
      }
      return headers;
    }
  }

  /**
   * A task's rows under exactly-once delivery ({@link Pieces}): records (topic set) between
   * each source partition's <i>begin</i> row (no topic, no summary; progress: its topic,
   * partition, first offset) and its <i>end</i> row (its summary; progress: next offset, the
   * floor there as {@code resolved}, the source position; or {@code abandon}: the piece is not
   * done and nothing of it commits), in the order the loop wrote them ({@link ProgressRow}).
   */
  static final class PieceRows implements ForeachPartitionFunction<Row> {
    private static final long serialVersionUID = 1L;
    private final Map<String, Object> producer;
    private final Delivery delivery;

    PieceRows(Map<String, Object> producer, Delivery delivery) {
      this.producer = producer;
      this.delivery = delivery;
    }

    @Override
    public void call(Iterator<Row> rows) throws IOException, InterruptedException {
      try (Pieces pieces = Pieces.of(delivery, producer)) {
        while (rows.hasNext()) {
          Row r = rows.next();
          if (!r.isNullAt(0)) {
            pieces.send(Rows.record(r));
            continue;
          }
          ProgressRow.parse(r.getString(5), r.isNullAt(4)).apply(pieces);
        }
      }
    }
  }

  /**
   * A task's sends: how many were sent, how many Kafka answered, the first failure.
   *
   * <p>{@code flush()} alone is not proof: when a broker refuses a batch as too large, the
   * producer splits it and flush returns before the halves are answered (KAFKA-19479, fixed
   * after the kafka-clients Spark 4.0 ships), so a refused record would pass unseen; and where
   * a split cannot make the batch small enough, the producer splits on until it expires the
   * records or its network thread dies, and no answer comes. Every record's callback runs once:
   * the task waits for as many answers as it sent, as long as the producer's own delivery
   * timeout and a margin, and fails when they do not all come.
   */
  public static final class Acks implements Callback {
    private long sent; // the task's thread only
    private long answered;
    private volatile Exception failed;
    private final Set<TopicPartition> partitions; // where Kafka took records (null: not kept)
    private String lastTopic; // the partition of the last record answered (partitions' last)
    private int lastPartition = -1;

    public Acks() {
      this(false);
    }

    /** {@code keepPartitions}: remember the partitions Kafka took records in ({@link #partitions}). */
    Acks(boolean keepPartitions) {
      partitions = keepPartitions ? new HashSet<>() : null;
    }

    /** Sends {@code record}, after raising any failure reported so far. */
    public void send(Producer<byte[], byte[]> kafka, ProducerRecord<byte[], byte[]> record)
        throws IOException {
      check();
      kafka.send(record, this);
      sent++;
    }

    @Override
    public synchronized void onCompletion(RecordMetadata metadata, Exception e) {
      if (e != null && failed == null) {
        failed = e;
      }
      if (e == null && partitions != null && metadata != null) {
        // a batch's records are answered one after the other: one look-up per batch, not record
        if (metadata.partition() != lastPartition || !metadata.topic().equals(lastTopic)) {
          lastTopic = metadata.topic();
          lastPartition = metadata.partition();
          partitions.add(new TopicPartition(lastTopic, lastPartition));
        }
      }
      answered++;
      notifyAll();
    }

    /** The partitions Kafka took records in so far (empty unless kept). */
    synchronized Set<TopicPartition> partitions() {
      return partitions == null ? Set.of() : new HashSet<>(partitions);
    }

    /** The first failure Kafka reported so far, or null. */
    Exception failure() {
      return failed;
    }

    /** Whether Kafka took a record sent so far (answered it, and refused none). */
    synchronized boolean tookOne() {
      return answered > 0 && failed == null;
    }

    /**
     * Waits until Kafka answered one of the records sent (or refused one), at most {@code
     * millis}; returns at once when none was sent.
     */
    synchronized void awaitFirst(long millis) throws IOException, InterruptedException {
      long deadline = System.nanoTime() + millis * 1_000_000L;
      while (sent > 0 && answered == 0 && failed == null) {
        long left = (deadline - System.nanoTime()) / 1_000_000L;
        if (left <= 0) {
          throw new IOException(
              "writing to Kafka failed: the producer answered none of "
                  + sent
                  + " records within "
                  + millis
                  + " ms (delivery.timeout.ms and a margin)");
        }
        wait(left);
      }
    }

    private void check() throws IOException {
      Exception e = failed;
      if (e != null) {
        throw new IOException("writing to Kafka failed: " + e, e);
      }
    }

    /** Waits until Kafka answered every record sent, at most {@code millis}. */
    synchronized void await(long millis) throws IOException, InterruptedException {
      long deadline = System.nanoTime() + millis * 1_000_000L;
      while (answered < sent && failed == null) {
        long left = (deadline - System.nanoTime()) / 1_000_000L;
        if (left <= 0) {
          throw new IOException(
              "writing to Kafka failed: the producer answered "
                  + answered
                  + " of "
                  + sent
                  + " records within "
                  + millis
                  + " ms (delivery.timeout.ms and a margin)");
        }
        wait(left);
      }
      check();
    }
  }
}
