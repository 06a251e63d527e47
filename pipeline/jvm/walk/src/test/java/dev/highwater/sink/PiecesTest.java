package dev.highwater.sink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.clients.producer.MockProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * Exactly-once pieces on Kafka's MockProducer (transactions, fencing): rows and the progress
 * record in one transaction, the progress last; a committed piece skipped; a newer generation
 * or a fence stops the task naming the partition; a producer kept between pieces.
 */
class PiecesTest {
  static final Delivery DELIVERY = new Delivery("highwater-cf", "_progress", 2);

  /** Opens MockProducers and answers progress reads from a map; counts both. */
  static class Fake implements Pieces.Kafka {
    final List<MockProducer<byte[], byte[]>> opened =
        Collections.synchronizedList(new ArrayList<>()); // opened on another thread
    final List<String> ids = new ArrayList<>();
    final Map<String, Progress> committed = new HashMap<>();
    int reads;

    @Override
    public Producer<byte[], byte[]> open(Map<String, Object> config) {
      MockProducer<byte[], byte[]> p =
          new MockProducer<>(true, new ByteArraySerializer(), new ByteArraySerializer());
      // producers open side by side on other threads: a producer and its id at one index
      synchronized (opened) {
        opened.add(p);
        ids.add((String) config.get("transactional.id"));
      }
      return p;
    }

    @Override
    public Progress read(String key, int slot) {
      reads++;
      assertEquals(Progress.slot(key, 4), slot);
      return committed.get(key);
    }
  }

  static Pieces pieces(Fake kafka) {
    return new Pieces(DELIVERY, new HashMap<>(), kafka, 4);
  }

  static ProducerRecord<byte[], byte[]> row(int n) {
    return new ProducerRecord<>("out", new byte[] {(byte) n}, new byte[] {(byte) n});
  }

  @AfterEach
  void forget() {
    Pieces.forget();
  }

  @Test
  void a_pieces_rows_and_its_progress_commit_in_one_transaction_progress_last() throws Exception {
    Fake kafka = new Fake();
    try (Pieces pieces = pieces(kafka)) {
      pieces.begin("src", 1, 100);
      assertTrue(pieces.writing());
      pieces.send(row(1));
      pieces.send(row(2));
      pieces.end(103, "5.0000000001", null);
    }
    MockProducer<byte[], byte[]> p = kafka.opened.get(0);
    assertEquals(List.of("highwater-cf-rows-src-1"), kafka.ids);
    assertTrue(p.transactionInitialized());
    assertTrue(p.transactionCommitted());
    assertEquals(1, p.commitCount());
    List<ProducerRecord<byte[], byte[]>> sent = p.history();
    assertEquals(3, sent.size());
    ProducerRecord<byte[], byte[]> progress = sent.get(2);
    assertEquals("_progress", progress.topic());
    assertEquals("rows/src/1", new String(progress.key(), StandardCharsets.UTF_8));
    assertEquals(Progress.slot("rows/src/1", 4), progress.partition());
    JsonNode value = Progress.JSON.readTree(progress.value());
    assertEquals(103, value.get("next_offset").asLong());
    assertEquals("5.0000000001", value.get("resolved").asText());
    assertEquals(2, value.get("generation").asLong());
    assertEquals(1, value.get("format_version").asInt());
    assertTrue(value.get("position").isNull());
    assertFalse(p.closed()); // kept for the partition's next batch
    assertEquals(1, kafka.reads);
  }

  @Test
  void an_abandoned_piece_aborts_its_rows_and_runs_again_whole_on_the_kept_producer()
      throws Exception {
    Fake kafka = new Fake();
    try (Pieces pieces = pieces(kafka)) {
      pieces.begin("src", 1, 100); // a scan chunk that meets a bad record it may not divert
      assertTrue(pieces.writing());
      pieces.send(row(1));
      pieces.abandon();
      assertTrue(kafka.opened.get(0).transactionAborted());
      assertEquals(0, kafka.opened.get(0).commitCount());
      pieces.begin("src", 1, 100); // the same chunk, run again once resumed
      assertTrue(pieces.writing()); // nothing of it was committed
      pieces.send(row(1));
      pieces.send(row(2));
      pieces.end(103, "5.0000000001", null);
    }
    MockProducer<byte[], byte[]> p = kafka.opened.get(0);
    assertEquals(1, kafka.opened.size()); // kept across the abandoned piece
    assertEquals(1, p.commitCount());
    List<ProducerRecord<byte[], byte[]>> sent = p.history(); // the committed ones
    assertEquals(3, sent.size());
    assertEquals(1, sent.get(0).value()[0]);
    assertEquals(2, sent.get(1).value()[0]);
    assertEquals("_progress", sent.get(2).topic());
  }

  @Test
  void a_piece_committed_by_an_earlier_attempt_is_walked_but_not_sent() throws Exception {
    Fake kafka = new Fake();
    kafka.committed.put("rows/src/0", new Progress(110, 2));
    try (Pieces pieces = pieces(kafka)) {
      pieces.begin("src", 0, 100); // its rows up to 110 are committed
      assertFalse(pieces.writing());
      pieces.send(row(1));
      pieces.end(110, "5.0000000000", null);
      pieces.begin("src", 0, 110); // the next piece starts where the committed one ended
      assertTrue(pieces.writing());
      pieces.send(row(2));
      pieces.end(111, "5.0000000000", null);
    }
    MockProducer<byte[], byte[]> p = kafka.opened.get(0);
    assertEquals(1, kafka.opened.size()); // one producer, kept between the pieces
    assertEquals(1, kafka.reads); // read once, after it was opened
    assertEquals(1, p.commitCount());
    assertEquals(2, p.history().size()); // row 2 and its progress: row 1 was not sent again
  }

  @Test
  void a_scan_chunk_is_done_for_its_own_scan_only() throws Exception {
    Fake kafka = new Fake();
    kafka.committed.put("scan/src/0", new Progress(500, 2, "7.0000000000"));
    Delivery again = new Delivery("highwater-cf", "_progress", 2, "scan", "9.0000000000");
    try (Pieces pieces = new Pieces(again, new HashMap<>(), kafka, 4)) {
      pieces.begin("src", 0, 0); // the chunk [0, 500) of the scan at 7: not this one's
      assertTrue(pieces.writing());
      pieces.send(row(1));
      pieces.end(500, null, null);
    }
    assertEquals(List.of("highwater-cf-scan-src-0"), kafka.ids);
    MockProducer<byte[], byte[]> p = kafka.opened.get(0);
    JsonNode value = Progress.JSON.readTree(p.history().get(1).value());
    assertEquals("scan/src/0", new String(p.history().get(1).key(), StandardCharsets.UTF_8));
    assertEquals("9.0000000000", value.get("time").asText());
    assertEquals(500, value.get("next_offset").asLong());
    // the same chunk of the same scan again (a retried task): committed, not sent
    try (Pieces pieces = new Pieces(again, new HashMap<>(), kafka, 4)) {
      pieces.begin("src", 0, 0);
      assertFalse(pieces.writing());
      pieces.send(row(1));
      pieces.end(500, null, null);
    }
    assertEquals(1, p.commitCount());
  }

  @Test
  void a_piece_without_rows_commits_nothing() throws Exception {
    Fake kafka = new Fake();
    try (Pieces pieces = pieces(kafka)) {
      pieces.begin("src", 2, 0);
      pieces.end(50, "5.0000000000", null);
    }
    assertEquals(0, kafka.opened.get(0).commitCount());
    assertTrue(kafka.opened.get(0).history().isEmpty());
  }

  @Test
  void a_partition_claimed_by_a_newer_run_stops_the_task_and_writes_nothing() throws Exception {
    Fake kafka = new Fake();
    kafka.committed.put("rows/src/0", new Progress(10, 3));
    Pieces pieces = pieces(kafka);
    pieces.begin("src", 0, 10); // the producer opens meanwhile
    IOException e =
        assertThrows(
            IOException.class,
            () -> {
              pieces.send(row(1));
              pieces.end(11, "5.0000000000", null); // (or once its producer opened)
            });
    assertEquals(
        Fences.TAKEN
            + ": source partition src/0 was claimed by run generation 3 (this run is generation 2)",
        e.getMessage());
    assertTrue(kafka.opened.get(0).closed());
    assertTrue(kafka.opened.get(0).history().isEmpty());
    assertEquals(0, Producers.kept());
    pieces.close();
  }

  /** A Fake whose progress reads wait for {@link #answer}. */
  static final class SlowRead extends Fake {
    final CountDownLatch answer = new CountDownLatch(1);

    @Override
    public Progress read(String key, int slot) {
      try {
        answer.await();
      } catch (InterruptedException e) {
        throw new IllegalStateException(e);
      }
      return super.read(key, slot);
    }
  }

  @Test
  void records_sent_while_the_producer_opens_wait_and_then_go_in_order() throws Exception {
    SlowRead kafka = new SlowRead();
    try (Pieces pieces = pieces(kafka)) {
      pieces.begin("src", 1, 100);
      for (int n = 1; n <= 3; n++) {
        pieces.send(row(n)); // the walk goes on while the producer opens
      }
      kafka.answer.countDown();
      pieces.send(row(4));
      pieces.end(104, "5.0000000001", null);
    }
    MockProducer<byte[], byte[]> p = kafka.opened.get(0);
    List<String> sent = new ArrayList<>();
    p.history().forEach(r -> sent.add(r.topic() + (r.topic().equals("out") ? r.key()[0] : "")));
    assertEquals(List.of("out1", "out2", "out3", "out4", "_progress"), sent);
    assertEquals(1, p.commitCount());
  }

  @Test
  void records_that_waited_for_a_committed_piece_are_dropped() throws Exception {
    SlowRead kafka = new SlowRead();
    kafka.committed.put("rows/src/0", new Progress(110, 2));
    try (Pieces pieces = pieces(kafka)) {
      pieces.begin("src", 0, 100); // committed up to 110 by an earlier attempt
      pieces.send(row(1));
      pieces.send(row(2));
      kafka.answer.countDown();
      pieces.end(110, "5.0000000000", null);
    }
    assertTrue(kafka.opened.get(0).history().isEmpty());
    assertEquals(0, kafka.opened.get(0).commitCount());
  }

  @Test
  void a_fenced_producer_fails_the_task_naming_the_partition_and_is_not_kept() throws Exception {
    Fake kafka = new Fake();
    Pieces pieces = pieces(kafka);
    pieces.begin("src", 0, 0);
    assertTrue(pieces.writing()); // its producer is open
    pieces.send(row(1));
    kafka.opened.get(0).fenceProducer(); // another attempt or instance opened the id
    IOException e =
        assertThrows(IOException.class, () -> pieces.end(2, "5.0000000000", null));
    assertTrue(e.getMessage().startsWith(Fences.TAKEN + " (or another attempt of this task did"));
    assertTrue(e.getMessage().contains("src/0, transactional id highwater-cf-rows-src-0"));
    pieces.close();
    assertFalse(kafka.opened.get(0).transactionCommitted());
    assertTrue(kafka.opened.get(0).closed());
    assertEquals(0, Producers.kept());
    // the retry opens the id anew (fencing the other) and reads what is committed
    try (Pieces retry = pieces(kafka)) {
      retry.begin("src", 0, 0);
      retry.send(row(1));
      retry.end(2, "5.0000000000", null);
    }
    assertEquals(2, kafka.opened.size());
    assertEquals(2, kafka.reads);
    assertTrue(kafka.opened.get(1).transactionCommitted());
  }

  /** A Fake whose producers answer a record only when told (or at a flush, as at a commit). */
  static final class Answering extends Fake {
    @Override
    public Producer<byte[], byte[]> open(Map<String, Object> config) {
      MockProducer<byte[], byte[]> p =
          new MockProducer<>(false, new ByteArraySerializer(), new ByteArraySerializer()) {
            @Override
            public synchronized void commitTransaction() {
              flush(); // KafkaProducer's commit waits for every record's answer first
              super.commitTransaction();
            }
          };
      synchronized (opened) { // as Fake.open
        opened.add(p);
        ids.add((String) config.get("transactional.id"));
      }
      return p;
    }
  }

  /** What {@code p} committed: "out" and the row's number, or the progress topic. */
  static List<String> sent(MockProducer<byte[], byte[]> p) {
    List<String> sent = new ArrayList<>();
    p.history().forEach(r -> sent.add(r.topic() + (r.topic().equals("out") ? r.key()[0] : "")));
    return sent;
  }

  /** Partition src/0's piece [0, 2) committed by this executor: its producer kept. */
  static MockProducer<byte[], byte[]> committedHere(Fake kafka) throws Exception {
    try (Pieces pieces = pieces(kafka)) {
      pieces.begin("src", 0, 0);
      pieces.send(row(1));
      pieces.end(2, "5.0000000000", null);
    }
    assertEquals(1, Producers.kept());
    return kafka.opened.get(0);
  }

  @Test
  void a_kept_producer_another_executor_fenced_is_opened_anew_and_the_piece_commits()
      throws Exception {
    Fake kafka = new Fake();
    MockProducer<byte[], byte[]> kept = committedHere(kafka);
    // the partition's next piece [2, 5) ran on another executor, whose new producer fenced it
    kafka.committed.put("rows/src/0", new Progress(5, 2));
    kept.fenceProducer();
    try (Pieces pieces = pieces(kafka)) {
      pieces.begin("src", 0, 5); // back on this executor: the kept producer is taken
      assertTrue(pieces.writing());
      pieces.send(row(2)); // its transaction cannot begin: fenced
      pieces.send(row(3));
      pieces.end(7, "5.0000000000", null);
    }
    assertTrue(kept.closed());
    assertEquals(List.of("highwater-cf-rows-src-0", "highwater-cf-rows-src-0"), kafka.ids);
    MockProducer<byte[], byte[]> fresh = kafka.opened.get(1);
    assertTrue(fresh.transactionInitialized()); // it fenced the other executor's in turn
    assertEquals(1, fresh.commitCount());
    assertEquals(List.of("out2", "out3", "_progress"), sent(fresh));
    assertEquals(7, Progress.parse(fresh.history().get(2).value()).nextOffset);
    assertEquals(2, kafka.reads); // what is committed, read for the new one
    assertEquals(1, Producers.kept()); // the new one, for the partition's next piece
  }

  @Test
  void a_kept_producer_kafka_answers_fenced_before_taking_a_record_is_opened_anew()
      throws Exception {
    Answering kafka = new Answering();
    MockProducer<byte[], byte[]> kept = committedHere(kafka);
    kafka.committed.put("rows/src/0", new Progress(5, 2)); // [2, 5) written elsewhere
    try (Pieces pieces = pieces(kafka)) {
      pieces.begin("src", 0, 5);
      pieces.send(row(2)); // handed to the producer: KafkaProducer learns of a fence later
      kept.errorNext(new ProducerFencedException("fenced by another executor's producer"));
      kept.fenceProducer();
      pieces.send(row(3));
      pieces.send(row(4));
      pieces.end(8, "5.0000000000", null);
    }
    assertTrue(kept.closed());
    MockProducer<byte[], byte[]> fresh = kafka.opened.get(1);
    assertEquals(List.of("out2", "out3", "out4", "_progress"), sent(fresh));
    assertEquals(1, fresh.commitCount());
    assertEquals(2, kafka.reads);
  }

  @Test
  void a_kept_producer_fenced_at_the_pieces_end_before_any_answer_is_opened_anew()
      throws Exception {
    Answering kafka = new Answering();
    MockProducer<byte[], byte[]> kept = committedHere(kafka);
    kafka.committed.put("rows/src/0", new Progress(5, 2));
    try (Pieces pieces = pieces(kafka)) {
      pieces.begin("src", 0, 5);
      pieces.send(row(2));
      pieces.send(row(3));
      kept.errorNext(new ProducerFencedException("fenced")); // answered only now
      kept.errorNext(new ProducerFencedException("fenced"));
      kept.fenceProducer();
      pieces.end(7, "5.0000000000", null);
    }
    assertEquals(List.of("out2", "out3", "_progress"), sent(kafka.opened.get(1)));
  }

  @Test
  void a_piece_committed_elsewhere_meanwhile_is_not_sent_again_by_the_reopened_producer()
      throws Exception {
    Fake kafka = new Fake();
    MockProducer<byte[], byte[]> kept = committedHere(kafka);
    // a retry of this task ran on another executor and committed [5, 7): its producer fenced
    kafka.committed.put("rows/src/0", new Progress(7, 2));
    kept.fenceProducer();
    try (Pieces pieces = pieces(kafka)) {
      pieces.begin("src", 0, 5); // this executor kept only what it committed itself: up to 2
      pieces.send(row(2));
      pieces.send(row(3));
      pieces.end(7, "5.0000000000", null);
    }
    MockProducer<byte[], byte[]> fresh = kafka.opened.get(1);
    assertTrue(fresh.history().isEmpty());
    assertEquals(0, fresh.commitCount());
  }

  @Test
  void a_kept_producer_fenced_by_a_newer_runs_claim_still_stops_the_task() throws Exception {
    Fake kafka = new Fake();
    MockProducer<byte[], byte[]> kept = committedHere(kafka);
    kafka.committed.put("rows/src/0", new Progress(2, 3)); // a newer instance claimed it
    kept.fenceProducer();
    Pieces pieces = pieces(kafka);
    pieces.begin("src", 0, 2);
    IOException e =
        assertThrows(
            IOException.class,
            () -> {
              pieces.send(row(2));
              pieces.end(3, "5.0000000000", null);
            });
    assertEquals(
        Fences.TAKEN
            + ": source partition src/0 was claimed by run generation 3 (this run is generation 2)",
        e.getMessage());
    pieces.close();
    assertEquals(2, kafka.opened.size());
    assertTrue(kafka.opened.get(1).closed());
    assertTrue(kafka.opened.get(1).history().isEmpty());
    assertEquals(0, Producers.kept());
  }

  @Test
  void a_kept_producer_fenced_after_kafka_took_a_record_of_the_piece_fails_the_task()
      throws Exception {
    Answering kafka = new Answering();
    MockProducer<byte[], byte[]> kept = committedHere(kafka);
    Pieces pieces = pieces(kafka);
    pieces.begin("src", 0, 2);
    pieces.send(row(2));
    kept.completeNext(); // Kafka took it: the producer held the id at the piece's start
    pieces.send(row(3));
    kept.fenceProducer(); // and lost it since: another attempt or instance writes now
    IOException e =
        assertThrows(IOException.class, () -> pieces.end(4, "5.0000000000", null));
    assertTrue(e.getMessage().startsWith(Fences.TAKEN + " (or another attempt of this task did"));
    pieces.close();
    assertEquals(1, kafka.opened.size()); // not opened anew
    assertTrue(kept.closed());
    assertEquals(0, Producers.kept());
  }

  @Test
  void a_producer_kept_from_an_earlier_run_is_not_used_by_a_later_one() throws Exception {
    Fake kafka = new Fake();
    try (Pieces pieces = pieces(kafka)) { // generation 2
      pieces.begin("src", 0, 0);
      pieces.send(row(1));
      pieces.end(1, null, null);
    }
    Delivery next = new Delivery("highwater-cf", "_progress", 3); // a restart in this JVM
    try (Pieces pieces = new Pieces(next, new HashMap<>(), kafka, 4)) {
      pieces.begin("src", 0, 1);
      pieces.send(row(2));
      pieces.end(2, null, null);
    }
    assertEquals(2, kafka.opened.size()); // the next run's claim fenced the first producer
    assertTrue(kafka.opened.get(0).closed());
    assertTrue(kafka.opened.get(1).transactionCommitted());
    assertEquals(2, kafka.reads);
  }

  @Test
  void a_producer_no_task_used_for_a_while_is_closed() throws Exception {
    Fake kafka = new Fake();
    try (Pieces pieces = pieces(kafka)) {
      pieces.begin("src", 0, 0);
      pieces.end(0, null, null);
    }
    assertEquals(1, Producers.kept());
    Producers.evictIdle(); // used just now: kept
    assertEquals(1, Producers.kept());
    long idle = Producers.IDLE_NANOS;
    Producers.IDLE_NANOS = 0;
    try {
      Producers.evictIdle();
    } finally {
      Producers.IDLE_NANOS = idle;
    }
    assertEquals(0, Producers.kept());
    assertTrue(kafka.opened.get(0).closed());
  }

  @Test
  void a_failed_task_aborts_its_open_transaction() throws Exception {
    Fake kafka = new Fake();
    try (Pieces pieces = pieces(kafka)) {
      pieces.begin("src", 0, 0);
      assertTrue(pieces.writing()); // its producer is open
      pieces.send(row(1));
    } // the task failed here: close without end
    assertTrue(kafka.opened.get(0).transactionAborted());
    assertFalse(kafka.opened.get(0).transactionCommitted());
    assertEquals(0, Producers.kept());
  }

  @Test
  void a_failed_tasks_producer_still_opening_is_closed_once_open_and_sends_nothing()
      throws Exception {
    SlowRead kafka = new SlowRead();
    try (Pieces pieces = pieces(kafka)) {
      pieces.begin("src", 0, 0);
      pieces.send(row(1));
    } // the task failed while its producer was opening
    kafka.answer.countDown();
    long deadline = System.currentTimeMillis() + 10_000;
    while ((kafka.opened.isEmpty() || !kafka.opened.get(0).closed())
        && System.currentTimeMillis() < deadline) {
      Thread.sleep(10);
    }
    assertEquals(0, Producers.kept());
    assertTrue(kafka.opened.get(0).closed());
    assertTrue(kafka.opened.get(0).history().isEmpty());
  }

  @Test
  void the_options_say_the_delivery_and_spark_never_sees_them() {
    Map<String, String> options = new HashMap<>();
    options.put("kafka.bootstrap.servers", "b:9092");
    assertNull(Delivery.parse(options));
    options.put("highwater.delivery", "exactly_once");
    options.put("highwater.transactional.id.prefix", "highwater-cf");
    options.put("highwater.progress.topic", "_p");
    options.put("highwater.generation", "7");
    Delivery d = Delivery.parse(options);
    assertEquals(7, d.generation);
    assertEquals("highwater-cf-rows-t-3", d.transactionalId("t", 3));
    assertEquals(Map.of("kafka.bootstrap.servers", "b:9092"), Delivery.kafka(options));
    options.remove("highwater.generation");
    IllegalArgumentException e =
        assertThrows(IllegalArgumentException.class, () -> Delivery.parse(options));
    assertEquals("highwater.generation is required with exactly_once delivery", e.getMessage());
  }

  @Test
  void the_slot_is_crc32_of_the_key_as_python_computes_it() {
    // zlib.crc32(b"rows/src/0") % 4, zlib.crc32(b"rows/orders/11") % 12 (pipeline/core/progress/claim.py)
    assertEquals(SLOT_SRC_0, Progress.slot("rows/src/0", 4));
    assertEquals(SLOT_ORDERS_11, Progress.slot("rows/orders/11", 12));
  }

  static final int SLOT_SRC_0 = 2;
  static final int SLOT_ORDERS_11 = 3;

  @Test
  void a_fence_answered_between_the_last_look_and_the_progress_record_reopens_the_id()
      throws Exception {
    Answering kafka = new Answering();
    MockProducer<byte[], byte[]> kept = committedHere(kafka);
    kafka.committed.put("rows/src/0", new Progress(5, 2)); // [2, 5) written elsewhere
    try (Pieces pieces = pieces(kafka)) {
      pieces.begin("src", 0, 5);
      pieces.send(row(2));
      pieces.send(row(3)); // both handed over, no answer yet: the trial goes on
      kept.errorNext(new ProducerFencedException("fenced by another executor's producer"));
      kept.fenceProducer(); // the answer is in before the progress record goes
      pieces.end(7, "5.0000000000", null);
    }
    assertTrue(kept.closed());
    MockProducer<byte[], byte[]> fresh = kafka.opened.get(1);
    assertEquals(List.of("out2", "out3", "_progress"), sent(fresh));
    assertEquals(1, fresh.commitCount());
  }

  /** A task of one row in each of src/{@code partitions}, from {@code first}. */
  static void task(Pieces pieces, int first, int... partitions) throws Exception {
    for (int p : partitions) {
      pieces.begin("src", p, first);
      pieces.send(row(p));
      pieces.end(first + 1, "5.0000000000", null);
    }
  }

  @Test
  void a_tasks_pieces_commit_in_one_transaction_under_its_first_partitions_id() throws Exception {
    Fake kafka = new Fake();
    try (Pieces pieces = pieces(kafka)) {
      task(pieces, 0, 0, 1, 2); // a new producer: it knows src/0 only, reads the others
    }
    MockProducer<byte[], byte[]> p = kafka.opened.get(0);
    assertEquals(List.of("highwater-cf-rows-src-0"), kafka.ids);
    assertEquals(3, kafka.reads);
    assertEquals(3, p.commitCount()); // committed before each read
    try (Pieces pieces = pieces(kafka)) {
      task(pieces, 1, 0, 1, 2); // the next batch: kept, it knows all three
    }
    assertEquals(1, kafka.opened.size());
    assertEquals(3, kafka.reads);
    assertEquals(4, p.commitCount()); // one transaction for the task
    List<String> last = sent(p).subList(6, 12);
    assertEquals(List.of("out0", "_progress", "out1", "_progress", "out2", "_progress"), last);
    for (int k = 0; k < 3; k++) { // each partition's progress in it, where its next batch starts
      ProducerRecord<byte[], byte[]> progress = p.history().get(7 + 2 * k);
      assertEquals("rows/src/" + k, new String(progress.key(), StandardCharsets.UTF_8));
      assertEquals(2, Progress.parse(progress.value()).nextOffset);
    }
  }

  @Test
  void a_progress_read_never_waits_for_the_tasks_own_open_transaction() throws Exception {
    Fake kafka =
        new Fake() {
          @Override
          public Progress read(String key, int slot) {
            for (MockProducer<byte[], byte[]> p : opened) { // read_committed would wait for it
              assertFalse(p.transactionInFlight() && !p.uncommittedRecords().isEmpty(), key);
            }
            return super.read(key, slot);
          }
        };
    try (Pieces pieces = pieces(kafka)) {
      task(pieces, 0, 0, 1, 2, 3);
    }
    assertEquals(4, kafka.reads);
    assertEquals(4, kafka.opened.get(0).commitCount());
  }

  @Test
  void a_transaction_older_than_half_its_timeout_commits_at_the_next_pieces_start()
      throws Exception {
    Fake kafka = new Fake();
    Map<String, Object> config = new HashMap<>(Map.of("transaction.timeout.ms", "60"));
    try (Pieces pieces = new Pieces(DELIVERY, config, kafka, 4)) {
      task(pieces, 0, 0, 1);
    }
    MockProducer<byte[], byte[]> p = kafka.opened.get(0);
    assertEquals(2, p.commitCount());
    try (Pieces pieces = new Pieces(DELIVERY, config, kafka, 4)) {
      task(pieces, 1, 0);
      Thread.sleep(40); // the transaction is older than 30 ms
      task(pieces, 1, 1);
    }
    assertEquals(4, p.commitCount());
    try (Pieces pieces = new Pieces(DELIVERY, config, kafka, 4)) {
      task(pieces, 2, 0, 1); // young: one
    }
    assertEquals(5, p.commitCount());
  }

  @Test
  void a_failed_commit_fails_the_task_naming_its_id_and_the_producer_is_not_kept()
      throws Exception {
    Fake kafka =
        new Fake() {
          @Override
          public Producer<byte[], byte[]> open(Map<String, Object> config) {
            MockProducer<byte[], byte[]> p = (MockProducer<byte[], byte[]>) super.open(config);
            p.commitTransactionException = new ProducerFencedException("a newer attempt");
            return p;
          }
        };
    Pieces pieces = pieces(kafka);
    pieces.begin("src", 0, 0);
    pieces.send(row(1));
    pieces.end(1, "5.0000000000", null);
    UncheckedIOException failed = assertThrows(UncheckedIOException.class, pieces::close);
    assertTrue(failed.getMessage().contains(Fences.TAKEN), failed.getMessage());
    assertTrue(failed.getMessage().contains("highwater-cf-rows-src-0"), failed.getMessage());
    assertTrue(kafka.opened.get(0).closed());
    assertEquals(0, Producers.kept());
  }

  @Test
  void a_failed_tasks_open_piece_aborts_the_pieces_ended_before_it() throws Exception {
    Fake kafka = new Fake();
    try (Pieces pieces = pieces(kafka)) {
      task(pieces, 0, 0, 1); // kept, knowing both
    }
    MockProducer<byte[], byte[]> p = kafka.opened.get(0);
    Pieces pieces = pieces(kafka);
    task(pieces, 1, 0); // ended: its progress sent, in the open transaction
    pieces.begin("src", 1, 1);
    pieces.send(row(7)); // the task fails here: its walk stops, close follows
    pieces.close();
    assertEquals(2, p.commitCount());
    assertTrue(p.transactionAborted());
    assertEquals(List.of("out0", "_progress", "out1", "_progress"), sent(p)); // the committed
    assertEquals(0, Producers.kept());
  }

  @Test
  void a_kept_producer_fenced_before_kafka_took_a_record_does_the_whole_task_again()
      throws Exception {
    Answering kafka = new Answering();
    try (Pieces pieces = pieces(kafka)) {
      task(pieces, 0, 0, 1, 2); // kept, knowing all three
    }
    MockProducer<byte[], byte[]> kept = kafka.opened.get(0);
    // the next batch's task ran on another executor, which committed src/1 up to 4: fenced
    kafka.committed.put("rows/src/0", new Progress(1, 2));
    kafka.committed.put("rows/src/1", new Progress(4, 2));
    kafka.committed.put("rows/src/2", new Progress(1, 2));
    kept.fenceProducer();
    try (Pieces pieces = pieces(kafka)) {
      pieces.begin("src", 0, 1);
      pieces.send(row(10));
      pieces.end(2, "5.0000000000", null);
      pieces.begin("src", 1, 1); // committed up to 4 elsewhere: this executor does not know
      pieces.send(row(11));
      pieces.end(4, "5.0000000000", null);
      pieces.begin("src", 2, 1);
      pieces.send(row(12)); // the fence answered only now
      kept.errorNext(new ProducerFencedException("fenced by another executor's producer"));
      pieces.send(row(13));
      pieces.end(3, "5.0000000000", null);
    }
    assertTrue(kept.closed());
    MockProducer<byte[], byte[]> fresh = kafka.opened.get(1);
    assertEquals(List.of("out10", "_progress", "out12", "out13", "_progress"), sent(fresh));
    assertFalse(fresh.transactionAborted());
    assertEquals(3 + 3, kafka.reads); // each piece's progress read for the new producer
  }

  /** A Kafka whose producers are primed as KafkaProducers are: begun, the partitions noted. */
  static class Priming extends Fake {
    final List<Set<TopicPartition>> primed = Collections.synchronizedList(new ArrayList<>());
    final List<String> aborted = Collections.synchronizedList(new ArrayList<>());

    @Override
    public Producer<byte[], byte[]> open(Map<String, Object> config) {
      MockProducer<byte[], byte[]> p =
          new MockProducer<>(true, new ByteArraySerializer(), new ByteArraySerializer()) {
            @Override
            public synchronized void abortTransaction() {
              aborted.add((String) config.get("transactional.id"));
              super.abortTransaction();
            }
          };
      synchronized (opened) { // as Fake.open
        opened.add(p);
        ids.add((String) config.get("transactional.id"));
      }
      return p;
    }

    @Override
    public boolean prime(Producer<byte[], byte[]> producer, Set<TopicPartition> partitions) {
      producer.beginTransaction();
      primed.add(partitions);
      return true;
    }
  }

  /** {@code n} pieces of src/0, one after the other, each one row. */
  static void piecesHere(Fake kafka, Map<String, Object> config, int from, int n) throws Exception {
    for (int k = from; k < from + n; k++) {
      try (Pieces pieces = new Pieces(DELIVERY, config, kafka, 4)) {
        pieces.begin("src", 0, k);
        pieces.send(row(k));
        pieces.end(k + 1, "5.0000000000", null);
      }
    }
  }

  @Test
  void a_steady_partitions_committed_producer_begins_the_next_transaction_with_its_partitions()
      throws Exception {
    Priming kafka = new Priming();
    piecesHere(kafka, new HashMap<>(), 0, 1);
    assertEquals(List.of(), kafka.primed); // one piece: how often they come is not known
    piecesHere(kafka, new HashMap<>(), 1, 1);
    MockProducer<byte[], byte[]> kept = kafka.opened.get(0);
    assertEquals(
        List.of(Set.of(new TopicPartition("out", 0), new TopicPartition("_progress", 0))),
        kafka.primed); // as Kafka answered: MockProducer answers partition 0 for every record
    assertTrue(kept.transactionInFlight()); // begun, nothing in it
    piecesHere(kafka, new HashMap<>(), 2, 1); // in the primed transaction: no second begin
    assertEquals(3, kept.commitCount());
    assertEquals(
        List.of("out0", "_progress", "out1", "_progress", "out2", "_progress"), sent(kept));
    assertEquals(List.of(), kafka.aborted);
    assertEquals(1, kafka.opened.size());
    assertEquals(2, kafka.primed.size()); // and again for the piece after
  }

  @Test
  void a_partition_whose_pieces_come_slowly_is_not_primed() throws Exception {
    Priming kafka = new Priming();
    Map<String, Object> config = new HashMap<>(Map.of("transaction.timeout.ms", "100"));
    piecesHere(kafka, config, 0, 1);
    Thread.sleep(10); // over half of the tenth of the timeout a primed transaction may wait
    piecesHere(kafka, config, 1, 1);
    assertEquals(List.of(), kafka.primed);
    assertFalse(kafka.opened.get(0).transactionInFlight());
  }

  @Test
  void a_transaction_primed_longer_ago_than_a_tenth_of_its_timeout_is_aborted_before_use()
      throws Exception {
    Priming kafka = new Priming();
    Map<String, Object> config = new HashMap<>(Map.of("transaction.timeout.ms", "10000"));
    piecesHere(kafka, config, 0, 2); // within 0.5 s of each other: primed
    assertEquals(1, kafka.primed.size());
    Thread.sleep(1_100); // the piece would have less than nine tenths of the timeout left
    piecesHere(kafka, config, 2, 1);
    MockProducer<byte[], byte[]> kept = kafka.opened.get(0);
    assertEquals(List.of("highwater-cf-rows-src-0"), kafka.aborted); // the empty one
    assertEquals(3, kept.commitCount());
    assertEquals(
        List.of("out0", "_progress", "out1", "_progress", "out2", "_progress"), sent(kept));
    assertEquals(1, kafka.primed.size()); // not again: its pieces no longer come often
  }

  @Test
  void a_primed_producer_fenced_since_is_opened_anew_and_the_piece_commits() throws Exception {
    Priming kafka = new Priming();
    piecesHere(kafka, new HashMap<>(), 0, 2);
    MockProducer<byte[], byte[]> kept = kafka.opened.get(0);
    assertTrue(kept.transactionInFlight()); // primed
    kafka.committed.put("rows/src/0", new Progress(5, 2)); // [2, 5) written elsewhere
    kept.fenceProducer(); // the other executor's initTransactions ended the primed one
    piecesHere(kafka, new HashMap<>(), 5, 1);
    assertTrue(kept.closed());
    MockProducer<byte[], byte[]> fresh = kafka.opened.get(1);
    assertEquals(List.of("out5", "_progress"), sent(fresh));
    assertEquals(1, fresh.commitCount());
  }

  /** Progress reads that wait for their partition's gate (the opening of each producer). */
  static final class Gated extends Fake {
    final Map<String, CountDownLatch> gates = new HashMap<>();

    Gated(String... keys) {
      for (String key : keys) {
        gates.put(key, new CountDownLatch(1));
      }
    }

    @Override
    public Progress read(String key, int slot) {
      try {
        gates.get(key).await();
      } catch (InterruptedException e) {
        throw new IllegalStateException(e);
      }
      synchronized (this) {
        return super.read(key, slot);
      }
    }

    MockProducer<byte[], byte[]> of(int partition) {
      synchronized (opened) {
        return opened.get(ids.indexOf("highwater-cf-rows-src-" + partition));
      }
    }

    void waitForOpened(int n) throws InterruptedException {
      for (int k = 0; k < 500 && opened.size() < n; k++) {
        Thread.sleep(10);
      }
    }
  }
}
