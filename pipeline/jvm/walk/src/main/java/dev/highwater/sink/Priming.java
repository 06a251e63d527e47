package dev.highwater.sink;

import java.lang.reflect.Field;
import java.util.Collection;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.internals.Sender;
import org.apache.kafka.clients.producer.internals.TransactionManager;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A kept producer's next transaction, begun as soon as its last one committed, with the
 * partitions it wrote to added to it ahead of its next piece.
 *
 * <p>A transaction's first record to a partition waits for the coordinator to add the
 * partition ({@code AddPartitionsToTxn}: a replicated write to the transaction log), and only
 * then is sent; the producer sends no record while that request is out. On the dev cluster
 * that round trip is most of what a piece costs over at least once (docs/benchmarks.md: a
 * piece of 100 records to 6 partitions and its progress took 38 - 40 ms to commit against 10 -
 * 12 ms sent without a transaction, and 12 ms with its partitions added 30 ms before). So the
 * coordinator adds them between batches, while nothing waits on it: a partition's rows go
 * where they went last batch, keys hash alike. A partition added and then not written gets an
 * empty commit marker; one written and not added is added then, as before.
 *
 * <p>Kafka's producer has no public call that adds a partition without a record; this uses
 * the one its {@code send} uses ({@code TransactionManager.maybeAddPartition}), and the
 * sender's wake-up. Where the client is not the one it was built against, priming is off (the
 * first use logs why) and every piece adds its partitions as it writes, which is only slower.
 */
final class Priming {
  private static final Logger LOG = LoggerFactory.getLogger(Priming.class);
  private static final Field MANAGER = field("transactionManager");
  private static final Field SENDER = field("sender");
  private static volatile boolean usable = MANAGER != null && SENDER != null;

  private Priming() {}

  /**
   * Begins {@code producer}'s next transaction and adds {@code partitions} to it; false (and
   * nothing begun) where this client cannot.
   */
  static boolean begin(Producer<byte[], byte[]> producer, Collection<TopicPartition> partitions) {
    if (!usable || !(producer instanceof KafkaProducer<byte[], byte[]>)) {
      return false;
    }
    TransactionManager manager;
    Sender sender;
    try {
      manager = (TransactionManager) MANAGER.get(producer);
      sender = (Sender) SENDER.get(producer);
    } catch (IllegalAccessException | ClassCastException e) {
      off(e);
      return false;
    }
    producer.beginTransaction();
    try {
      for (TopicPartition partition : partitions) {
        manager.maybeAddPartition(partition);
      }
      sender.wakeup();
    } catch (LinkageError e) {
      off(e); // begun, nothing added: the next piece adds its partitions as it writes
    } catch (KafkaException e) {
      // the producer's error (fenced, say): the next piece's first record meets it
    }
    return true;
  }

  private static Field field(String name) {
    try {
      Field f = KafkaProducer.class.getDeclaredField(name);
      f.setAccessible(true);
      return f;
    } catch (ReflectiveOperationException | RuntimeException | LinkageError e) {
      LOG.info("no transaction priming with this Kafka client ({}): {}", name, e.toString());
      return null;
    }
  }

  private static void off(Throwable e) {
    if (usable) {
      usable = false;
      LOG.info("no transaction priming with this Kafka client: {}", e.toString());
    }
  }
}
