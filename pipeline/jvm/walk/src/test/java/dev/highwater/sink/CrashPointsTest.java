package dev.highwater.sink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.producer.MockProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The job's crash points in a piece's write ({@link CrashPoints}), their kill replaced by an
 * exception: where each lands (the transaction open with the piece on the broker, or committed
 * and not reported), on which reach, and the line it records as {@code faults.py} does.
 */
class CrashPointsTest {
  @TempDir Path dir;

  /** What a test's kill throws in place of the SIGKILL. */
  static final class Killed extends RuntimeException {
    private static final long serialVersionUID = 1L;

    Killed(String what) {
      super(what);
    }
  }

  /** A Fake whose producers answer a record only when flushed (or committed): a real one's lag. */
  static final class Unanswered extends PiecesTest.Fake {
    @Override
    public Producer<byte[], byte[]> open(Map<String, Object> config) {
      MockProducer<byte[], byte[]> p =
          new MockProducer<>(false, new ByteArraySerializer(), new ByteArraySerializer());
      opened.add(p);
      ids.add((String) config.get("transactional.id"));
      return p;
    }
  }

  Path crashing(String spec) {
    Path record = dir.resolve("crashes");
    CrashPoints.use(
        new CrashPoints(
            spec,
            record.toString(),
            what -> {
              throw new Killed(what);
            }));
    return record;
  }

  @AfterEach
  void forget() {
    Pieces.forget();
  }

  @Test
  void in_transaction_kills_with_the_pieces_rows_and_progress_answered_and_not_committed()
      throws Exception {
    Unanswered kafka = new Unanswered();
    Path record = crashing("in_transaction:2");
    try (Pieces pieces = PiecesTest.pieces(kafka)) {
      pieces.begin("src", 0, 0); // the first reach
      pieces.send(PiecesTest.row(1));
      pieces.end(1, "5.0000000000", null);
      pieces.begin("src", 1, 0); // its progress read: the first piece committed before it
      assertEquals(1, kafka.opened.get(0).commitCount());
      pieces.send(PiecesTest.row(2));
      pieces.send(PiecesTest.row(3));
      Killed killed = assertThrows(Killed.class, () -> pieces.end(2, "5.0000000000", null));
      assertEquals("crash point in_transaction:2: SIGKILL", killed.getMessage());
      MockProducer<byte[], byte[]> p = kafka.opened.get(0); // the task's one producer
      assertTrue(p.flushed()); // every record sent was answered: on the broker
      assertTrue(p.transactionInFlight());
      assertFalse(p.transactionCommitted());
      List<ProducerRecord<byte[], byte[]>> open = p.uncommittedRecords();
      assertEquals(
          List.of("out", "out", "_progress"), open.stream().map(ProducerRecord::topic).toList());
    }
    assertEquals(
        "crash point in_transaction:2: SIGKILL\n",
        Files.readString(record, StandardCharsets.UTF_8));
  }

  @Test
  void piece_committed_kills_after_the_commit_before_the_task_goes_on() throws Exception {
    PiecesTest.Fake kafka = new PiecesTest.Fake();
    kafka.committed.put("rows/src/0", new Progress(10, 2));
    Path record = crashing("piece_committed");
    try (Pieces pieces = PiecesTest.pieces(kafka)) {
      pieces.begin("src", 0, 0); // committed by an earlier attempt: skipped, no reach
      pieces.send(PiecesTest.row(1));
      pieces.end(10, "5.0000000000", null);
      pieces.begin("src", 0, 10);
      pieces.send(PiecesTest.row(2));
      pieces.end(11, "5.0000000000", null);
      Killed killed = assertThrows(Killed.class, pieces::close); // the task's commit: killed there
      assertEquals("crash point piece_committed:1: SIGKILL", killed.getMessage());
      MockProducer<byte[], byte[]> p = kafka.opened.get(0);
      assertEquals(1, p.commitCount());
      assertEquals(2, p.history().size()); // row 2 and its progress, committed
    }
    assertEquals(
        "crash point piece_committed:1: SIGKILL\n",
        Files.readString(record, StandardCharsets.UTF_8));
  }

  @Test
  void only_the_asked_point_is_armed_and_only_its_nth_reach_kills() throws Exception {
    Path record = dir.resolve("crashes");
    List<String> kills = new ArrayList<>();
    CrashPoints points = new CrashPoints("in_transaction:3", record.toString(), kills::add);
    assertTrue(points.asks(CrashPoints.IN_TRANSACTION));
    assertFalse(points.asks(CrashPoints.PIECE_COMMITTED));
    for (int n = 0; n < 5; n++) {
      points.at(CrashPoints.PIECE_COMMITTED);
      points.at(CrashPoints.IN_TRANSACTION);
    }
    assertEquals(List.of("crash point in_transaction:3: SIGKILL"), kills);
    assertEquals(
        "crash point in_transaction:3: SIGKILL\n",
        Files.readString(record, StandardCharsets.UTF_8));
    // a driver point of faults.py, or none at all: nothing here is armed
    for (String driver : new String[] {"after_write:2", "", null}) {
      assertFalse(new CrashPoints(driver, null, kills::add).asks(CrashPoints.IN_TRANSACTION));
    }
    assertFalse(CrashPoints.armed(CrashPoints.IN_TRANSACTION)); // no Spark here: the env's are off
    assertEquals(1, kills.size());
  }

  @Test
  void the_process_group_is_the_third_field_after_the_command_name() throws Exception {
    assertEquals(5678, CrashPoints.processGroup("1234 (java (a) b) S 1 5678 5678 0 -1 4194560"));
    String self = Files.readString(Path.of("/proc/self/stat"));
    assertTrue(CrashPoints.processGroup(self) > 0);
  }
}
