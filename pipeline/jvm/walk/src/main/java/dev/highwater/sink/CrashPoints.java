package dev.highwater.sink;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.spark.SparkContext$;
import org.apache.spark.SparkEnv;

/**
 * The crash points inside a task's exactly-once write ({@link Pieces}): the job SIGKILLed
 * there, as {@code kill -9} of it would, for the tests that show what a read_committed reader
 * sees afterwards. The driver's points are {@code pipeline/core/batch/faults.py}'s, and these honour
 * the same environment: {@code HIGHWATER_CRASH_AT=<point>:<n>} kills the job the n-th time
 * this JVM reaches {@code point} (any task, any attempt), after appending {@code crash point
 * <point>:<n>: SIGKILL} to the file {@code HIGHWATER_CRASH_LOG} names, so a test can show where
 * the kill landed:
 *
 * <ul>
 *   <li>{@value #IN_TRANSACTION}: a piece's rows and its progress record were sent, flushed and
 *       acknowledged (they are on the broker, in the task's open transaction), its commit not
 *       yet asked for;
 *   <li>{@value #PIECE_COMMITTED}: the task's transaction committed and every record of it
 *       acknowledged, the task has not reported to the driver (so the driver has no checkpoint
 *       of it either). Not {@link TaskFaults}' {@code after_commit}, which fails the task there
 *       and lets Spark run it again.
 * </ul>
 *
 * <p>The kill is of this JVM's process group ({@code /proc/self/stat}): in local mode the
 * executor is the spark-submit JVM, which {@code highwater run} starts in a session of its own
 * with the Python driver and workers in it, so the whole job dies at once and nothing of it
 * runs on, exactly as at the driver's points. An executor elsewhere (a standalone worker's,
 * which shares its worker's group) ignores the points: killing its group would not be the
 * job's kill.
 */
final class CrashPoints {
  static final String IN_TRANSACTION = "in_transaction";
  static final String PIECE_COMMITTED = "piece_committed";
  /** How long a kill may take to land before the point says it did not. */
  private static final long KILL_WAIT_MS = 60_000L;

  /** What the n-th reach does once its line is recorded: kill the job (tests: their own). */
  interface Kill {
    void run(String what) throws IOException, InterruptedException;
  }

  private static final CrashPoints NONE = new CrashPoints(null, null, what -> {});
  private static volatile CrashPoints job; // the environment's, read at the first reach

  private final String point; // null: none asked for
  private final int nth;
  private final String record;
  private final Kill kill;
  private final AtomicInteger reached = new AtomicInteger();

  /**
   * {@code spec}: {@code <point>[:<n>]} ({@code n} 1 when left out, as faults.py reads it);
   * {@code record}: the file the crash line is appended to, or null.
   */
  CrashPoints(String spec, String record, Kill kill) {
    if (spec == null || spec.isEmpty()) {
      this.point = null;
      this.nth = 0;
    } else {
      int colon = spec.indexOf(':');
      this.point = colon < 0 ? spec : spec.substring(0, colon);
      String n = colon < 0 ? "" : spec.substring(colon + 1);
      this.nth = n.isEmpty() ? 1 : Integer.parseInt(n);
    }
    this.record = record;
    this.kill = kill;
  }

  /** Whether the job is to be killed at {@code point} at some reach (not necessarily this one). */
  static boolean armed(String point) {
    return current().asks(point);
  }

  /** Kill the job here if the environment asks for it; returns only if it does not. */
  static void reach(String point) throws IOException, InterruptedException {
    current().at(point);
  }

  /** Tests' own points in place of the environment's ({@code null}: the environment's). */
  static void use(CrashPoints points) {
    job = points;
  }

  private static CrashPoints current() {
    CrashPoints points = job;
    if (points == null) {
      points = fromEnvironment();
      job = points;
    }
    return points;
  }

  private static CrashPoints fromEnvironment() {
    String spec = System.getenv("HIGHWATER_CRASH_AT");
    if (spec == null || spec.isEmpty()) {
      return NONE;
    }
    SparkEnv spark = SparkEnv.get();
    if (spark == null || !SparkContext$.MODULE$.DRIVER_IDENTIFIER().equals(spark.executorId())) {
      System.err.println(
          "HIGHWATER_CRASH_AT ignored: not local mode's spark-submit JVM, whose process group"
              + " is the job");
      return NONE;
    }
    return new CrashPoints(spec, System.getenv("HIGHWATER_CRASH_LOG"), CrashPoints::killGroup);
  }

  boolean asks(String at) {
    return at.equals(point);
  }

  void at(String at) throws IOException, InterruptedException {
    if (!asks(at) || reached.incrementAndGet() != nth) {
      return;
    }
    String what = "crash point " + point + ":" + nth + ": SIGKILL";
    if (record != null) { // stderr would go through the JVM, which dies with it
      Files.writeString(
          Path.of(record),
          what + "\n",
          StandardCharsets.UTF_8,
          StandardOpenOption.CREATE,
          StandardOpenOption.APPEND);
    }
    kill.run(what);
  }

  /** SIGKILLs this JVM's process group (the job, in local mode); never returns normally. */
  private static void killGroup(String what) throws IOException, InterruptedException {
    long group = processGroup(Files.readString(Path.of("/proc/self/stat")));
    Process kill = new ProcessBuilder("kill", "-KILL", "--", "-" + group).inheritIO().start();
    kill.waitFor(); // the kill is of its own group too: it seldom gets to exit
    Thread.sleep(KILL_WAIT_MS); // the signal is on its way to this JVM
    throw new IllegalStateException(
        what + ": process group " + group + " still alive (kill exit " + kill.exitValue() + ")");
  }

  /**
   * The process group in {@code /proc/<pid>/stat}: the fifth field, the third after the
   * command name in parentheses (which may hold spaces and parentheses: the last {@code )}
   * ends it).
   */
  static long processGroup(String stat) {
    String[] after = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
    return Long.parseLong(after[2]); // state, ppid, pgrp
  }
}
