package dev.highwater.sink;

import java.io.IOException;
import java.util.Arrays;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.TaskContext;

/**
 * Fault points inside a task's exactly-once write, for the tests that fail and retry it (the
 * task alone; the job's SIGKILLs at the same places are {@link CrashPoints}').
 */
final class TaskFaults {
  private static final Set<String> REACHED = ConcurrentHashMap.newKeySet();
  private static final long SLOW_COMMIT_MS = 20_000L;

  private TaskFaults() {}

  /**
   * Tests' fault points, {@code HIGHWATER_TASK_FAULT=<point>[,<point>]}, each reached once per
   * executor, by a task's first attempt: {@code after_commit} fails the task after its commit,
   * before it reports; {@code slow_commit} holds the commit back 20 s, past a short {@code
   * transaction.timeout.ms} and the coordinator's sweep of timed-out transactions (10 s), so
   * the coordinator aborts it first.
   */
  static void reach(String point) throws IOException, InterruptedException {
    reach(point, TaskContext.get());
  }

  /** {@link #reach(String)} for {@code task}, on a thread of its own (a piece's commit). */
  static void reach(String point, TaskContext task) throws IOException, InterruptedException {
    String asked = System.getenv("HIGHWATER_TASK_FAULT");
    if (asked == null || !Arrays.asList(asked.split(",")).contains(point)) {
      return;
    }
    if (task == null || task.attemptNumber() != 0 || !REACHED.add(point)) {
      return;
    }
    System.err.println("fault injected " + point + " (HIGHWATER_TASK_FAULT)");
    if (point.equals("slow_commit")) {
      Thread.sleep(SLOW_COMMIT_MS);
      return;
    }
    throw new IOException("fault injected " + point + " (HIGHWATER_TASK_FAULT)");
  }

  /** Every point reachable again (tests). */
  static void forget() {
    REACHED.clear();
  }
}
