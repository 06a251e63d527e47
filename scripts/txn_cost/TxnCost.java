import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * What Kafka's transactions cost on their own, outside Spark and Highwater (docs/benchmarks.md,
 * session 46): 200,000 records of 371 random bytes in 12 "tasks", two at a time, to a topic of
 * three partitions, with the walk's producer settings, written by
 *
 * <ul>
 *   <li>{@code shared}: one idempotent producer for every task (at least once's way);
 *   <li>{@code fresh}: a new transactional producer per task, one transaction each (a run's
 *       first batch under exactly once);
 *   <li>{@code kept}: one transactional producer per task kept across rounds (a later batch).
 * </ul>
 *
 * <p>Prints, per round, the wall time, the broker's CPU seconds and this process's, and the
 * median initTransactions of the fresh producers. Run by {@code run.py}.
 */
public final class TxnCost {
  private static final int TASKS = 12;
  private static final int RECORDS = 200_000;
  private static final Map<String, Producer<byte[], byte[]>> KEPT = new ConcurrentHashMap<>();
  private static final List<Double> INITS = new ArrayList<>();
  private static String bootstrap;
  private static String backoff;

  private TxnCost() {}

  static double cpu(long pid) throws Exception {
    String stat = Files.readString(Path.of("/proc/" + pid + "/stat"));
    String[] f = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
    return (Long.parseLong(f[11]) + Long.parseLong(f[12])) / 100.0;
  }

  static Map<String, Object> settings() {
    Map<String, Object> m = new HashMap<>();
    m.put("bootstrap.servers", bootstrap);
    m.put("acks", "all");
    m.put("linger.ms", "5");
    m.put("batch.size", "262144");
    m.put("retry.backoff.ms", backoff);
    m.put("key.serializer", ByteArraySerializer.class);
    m.put("value.serializer", ByteArraySerializer.class);
    return m;
  }

  static void send(Producer<byte[], byte[]> producer, String topic, int task) {
    Random random = new Random(task);
    for (int i = 0; i < RECORDS / TASKS; i++) {
      byte[] value = new byte[371];
      random.nextBytes(value);
      producer.send(new ProducerRecord<>(topic, ("k" + random.nextInt(1_000_000)).getBytes(), value));
    }
  }

  static Void task(String mode, String topic, int task, int round, Producer<byte[], byte[]> shared) {
    if (shared != null) {
      send(shared, topic, task);
      shared.flush();
      return null;
    }
    String id = "txn-" + task;
    Producer<byte[], byte[]> producer = mode.equals("kept") ? KEPT.get(id) : null;
    if (producer == null) {
      Map<String, Object> m = settings();
      m.put("transactional.id", mode + round + "-" + id);
      producer = new KafkaProducer<>(m);
      long started = System.nanoTime();
      producer.initTransactions();
      synchronized (INITS) {
        INITS.add((System.nanoTime() - started) / 1e6);
      }
      if (mode.equals("kept")) {
        KEPT.put(id, producer);
      }
    }
    producer.beginTransaction();
    send(producer, topic, task);
    producer.commitTransaction();
    if (!mode.equals("kept")) {
      producer.close();
    }
    return null;
  }

  static void run(String mode, String topic, int round) throws Exception {
    ExecutorService pool = Executors.newFixedThreadPool(2);
    Producer<byte[], byte[]> shared = mode.equals("shared") ? new KafkaProducer<>(settings()) : null;
    List<Future<Void>> done = new ArrayList<>();
    for (int t = 0; t < TASKS; t++) {
      int task = t;
      done.add(pool.submit(() -> task(mode, topic, task, round, shared)));
    }
    for (Future<Void> f : done) {
      f.get();
    }
    if (shared != null) {
      shared.close();
    }
    pool.shutdown();
  }

  public static void main(String[] args) throws Exception {
    bootstrap = args[0];
    long broker = Long.parseLong(args[1]);
    String[] modes = args[2].split(",");
    int rounds = Integer.parseInt(args[3]);
    backoff = args[4];
    long self = ProcessHandle.current().pid();
    for (String mode : modes) {
      run(mode, "warm", -1); // every path warmed once, the broker's too
    }
    INITS.clear();
    Map<String, List<String>> out = new TreeMap<>();
    for (int r = 0; r < rounds; r++) {
      for (String mode : modes) {
        double b = cpu(broker);
        double c = cpu(self);
        long started = System.nanoTime();
        run(mode, "out", r);
        out.computeIfAbsent(mode, k -> new ArrayList<>())
            .add(
                String.format(
                    "%.2f s (broker %.2f, client %.2f)",
                    (System.nanoTime() - started) / 1e9, cpu(broker) - b, cpu(self) - c));
      }
    }
    out.forEach((mode, runs) -> System.out.println(mode + ": " + String.join(", ", runs)));
    List<Double> inits = new ArrayList<>(INITS);
    inits.sort(null);
    if (!inits.isEmpty()) {
      System.out.printf("initTransactions median %.0f ms of %d%n", inits.get(inits.size() / 2), inits.size());
    }
  }
}
